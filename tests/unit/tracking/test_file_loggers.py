"""The loggers of ``tracking.also``: what metrics.csv and the TensorBoard event files hold,
read back with the csv module and TensorBoard's own reader; a reopened logger (a resumed
run) appends without writing a step twice; the config checks and the missing-package error."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlplat.loggers import CSV_HEADER, CsvLogger, TensorBoardLogger, check_loggers, logged_paths, make_loggers
from rlplat.registry import ConfigError
from rlplat.tracking.settings import TrackingConfig

STEPS = {
    128: {"loss/objective": 0.1234567890123, "time/fps": 1500.0},
    256: {"loss/objective": -2.5e-7, "time/fps": 1612.25, "eval/return_mean": 21.5},
}


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def log(logger, steps=STEPS) -> None:
    for frames, metrics in steps.items():
        logger.on_log(metrics, frames)
    logger.close()


def test_csv_holds_one_row_per_value_in_long_format_with_exact_values(tmp_path):
    log(CsvLogger(tmp_path))
    with (tmp_path / "metrics.csv").open(newline="") as file:
        assert next(csv.reader(file)) == list(CSV_HEADER)
    table = rows(tmp_path / "metrics.csv")
    assert [(int(r["frames"]), r["metric"], float(r["value"])) for r in table] == [
        (frames, key, value) for frames, metrics in STEPS.items() for key, value in metrics.items()
    ]  # repr() of a float reads back as the same double
    assert all(float(r["wall_time"]) > 1.7e9 for r in table)  # unix seconds


def test_a_reopened_csv_appends_after_its_last_step_and_after_the_given_step(tmp_path):
    log(CsvLogger(tmp_path))
    log(CsvLogger(tmp_path), {256: {"time/fps": 1.0}, 384: {"time/fps": 2.0}})  # 256 was written already
    log(CsvLogger(tmp_path, after_step=512), {512: {"time/fps": 3.0}, 640: {"time/fps": 4.0}})  # MLflow has 512
    with (tmp_path / "metrics.csv").open() as file:
        assert file.read().count("frames,wall_time") == 1  # one header
    fps = [(int(r["frames"]), float(r["value"])) for r in rows(tmp_path / "metrics.csv") if r["metric"] == "time/fps"]
    assert fps == [(128, 1500.0), (256, 1612.25), (384, 2.0), (640, 4.0)]


def test_tensorboard_holds_each_metric_as_a_scalar_at_its_frames(tmp_path):
    log(TensorBoardLogger(tmp_path))
    events = scalars(tmp_path / "tensorboard")
    assert set(events) == {"loss/objective", "time/fps", "eval/return_mean"}
    for key in events:
        expected = [(frames, metrics[key]) for frames, metrics in STEPS.items() if key in metrics]
        assert [step for step, _ in events[key]] == [step for step, _ in expected]
        assert [value for _, value in events[key]] == pytest.approx([v for _, v in expected], rel=1e-6, abs=1e-12)


def test_a_reopened_tensorboard_logger_appends_without_writing_a_step_twice(tmp_path):
    log(TensorBoardLogger(tmp_path))
    log(TensorBoardLogger(tmp_path), {256: {"time/fps": 1.0}, 384: {"time/fps": 2.0}})
    log(TensorBoardLogger(tmp_path, after_step=512), {512: {"time/fps": 3.0}, 640: {"time/fps": 4.0}})
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 3  # a file per writer
    assert scalars(tmp_path / "tensorboard")["time/fps"] == [(128, 1500.0), (256, 1612.25), (384, 2.0), (640, 4.0)]


def test_make_loggers_builds_them_in_order_and_names_what_to_upload(tmp_path):
    loggers = make_loggers(("tensorboard", "csv"), tmp_path)
    assert [type(logger) for logger in loggers] == [TensorBoardLogger, CsvLogger]
    for logger in loggers:
        logger.close()
    assert logged_paths(loggers) == [(tmp_path / "tensorboard", "tensorboard"), (tmp_path / "metrics.csv", None)]
    assert make_loggers((), tmp_path) == []


def test_a_missing_tensorboard_package_is_a_config_error_naming_the_key_and_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what an environment without it finds
    with pytest.raises(ConfigError) as error:
        check_loggers(("csv", "tensorboard"))
    assert str(error.value) == (
        "tracking.also=['csv', 'tensorboard']: the tensorboard package is not installed: "
        "pip install 'rlplat[tensorboard]'"
    )
    check_loggers(("csv",))  # the CSV logger needs nothing more


@pytest.mark.parametrize(
    "also,message",
    [
        (["csv", "wandb"], "tracking.also=['csv', 'wandb']: 'wandb' is no logger; valid: csv, tensorboard"),
        ("csv", "tracking.also='csv': must be a list of csv, tensorboard, e.g. [csv]"),
    ],
)
def test_tracking_also_names_the_bad_value_and_the_valid_ones(also, message):
    with pytest.raises(ConfigError) as error:
        TrackingConfig(enabled=False, uri="", artifact_location=None, experiment="", run_name=None, also=also)
    assert str(error.value) == message


def test_tracking_also_keeps_each_logger_once_in_order():
    config = TrackingConfig(False, "", None, "", None, also=["tensorboard", "csv", "tensorboard"])
    assert config.also == ("tensorboard", "csv")
