"""Loggers beside MLflow, chosen with ``tracking.also``: a CSV file and TensorBoard event files
in the run directory, written whether or not MLflow records the run.

Each is a trainer callback (the hooks of :class:`rlplat.trainer.Callback`): every log
step's metrics (the same mapping MLflow gets, step = frames) become rows of
``metrics.csv`` or scalars of ``tensorboard/``. A resumed run appends, skipping the steps
already written, as MLflow's recorder does. When the run is recorded in MLflow, the files
are logged as its artifacts when it ends (``metrics.csv``, ``tensorboard/``).
"""

from __future__ import annotations

import csv
import importlib.util
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlplat.registry import ConfigError

CSV_FILE = "metrics.csv"
CSV_HEADER = ("frames", "wall_time", "metric", "value")
TENSORBOARD_DIR = "tensorboard"


def check_loggers(names: Sequence[str]) -> None:
    """Check that the packages of the loggers ``names`` are installed (before any run exists).

    Raises:
        ConfigError: for ``tensorboard`` without the tensorboard package.
    """
    if "tensorboard" in names and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            f"tracking.also={list(names)!r}: the tensorboard package is not installed: "
            "pip install 'rlplat[tensorboard]'"
        )


class CsvLogger:
    """``metrics.csv`` in the run directory, one row per value, long format: ``frames``
    (the step), ``wall_time`` (unix seconds), ``metric``, ``value``. Read it wide with
    ``pandas.read_csv(path).pivot_table(index="frames", columns="metric", values="value")``.

    Args:
        run_dir: The run directory.
        after_step: Steps at or below this are not written (a resumed run); the file's own
            last step counts too.
    """

    def __init__(self, run_dir: Path, after_step: int | None = None) -> None:
        self.path = Path(run_dir) / CSV_FILE
        steps = [s for s in (after_step, self._last_step()) if s is not None]
        self.after_step = max(steps) if steps else None
        new = not self.path.is_file() or self.path.stat().st_size == 0
        self.file = self.path.open("a", newline="")
        self.writer = csv.writer(self.file)
        if new:
            self.writer.writerow(CSV_HEADER)
            self.file.flush()

    def _last_step(self) -> int | None:
        if not self.path.is_file():
            return None
        with self.path.open(newline="") as file:
            steps = [int(row["frames"]) for row in csv.DictReader(file)]
        return max(steps, default=None)

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Append a row per metric at step ``frames`` (unless already written)."""
        if self.after_step is not None and frames <= self.after_step:
            return
        now = time.time()
        self.writer.writerows((frames, f"{now:.3f}", key, repr(float(value))) for key, value in metrics.items())
        self.file.flush()

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing more: the evaluation's metrics came through :meth:`on_log`."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """Nothing."""

    def close(self) -> None:
        """Close the file."""
        self.file.close()


class TensorBoardLogger:
    """TensorBoard event files in ``<run_dir>/tensorboard/``: each metric a scalar, step =
    frames (``tensorboard --logdir outputs/runs`` shows every run). Needs the tensorboard
    package (``pip install 'rlplat[tensorboard]'``).

    Args:
        run_dir: The run directory.
        after_step: Steps at or below this are not written (a resumed run); the last step
            already in the event files counts too.
    """

    def __init__(self, run_dir: Path, after_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.directory = Path(run_dir) / TENSORBOARD_DIR
        steps = [s for s in (after_step, self._last_step()) if s is not None]
        self.after_step = max(steps) if steps else None
        self.writer: Any = SummaryWriter(log_dir=str(self.directory))

    def _last_step(self) -> int | None:
        if not self.directory.is_dir():
            return None
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(self.directory), size_guidance={"scalars": 0})
        events.Reload()
        steps = [e.step for tag in events.Tags()["scalars"] for e in events.Scalars(tag)]
        return max(steps, default=None)

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Write each metric as a scalar at step ``frames`` (unless already written)."""
        if self.after_step is not None and frames <= self.after_step:
            return
        now = time.time()
        for key, value in metrics.items():
            self.writer.add_scalar(key, float(value), global_step=frames, walltime=now)
        self.writer.flush()

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing more: the evaluation's metrics came through :meth:`on_log`."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """Nothing."""

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def make_loggers(names: Sequence[str], run_dir: Path, after_step: int | None = None) -> list[Any]:
    """The loggers ``names`` (``tracking.also``) writing into ``run_dir``.

    Raises:
        ConfigError: for a logger whose package is missing (see :func:`check_loggers`).
    """
    check_loggers(names)
    kinds = {"csv": CsvLogger, "tensorboard": TensorBoardLogger}
    return [kinds[name](run_dir, after_step) for name in names]


def logged_paths(loggers: Sequence[Any]) -> list[tuple[Path, str | None]]:
    """What to upload as artifacts when the run ends: ``(path, artifact folder)`` per logger."""
    paths: list[tuple[Path, str | None]] = []
    for logger in loggers:
        if isinstance(logger, CsvLogger):
            paths.append((logger.path, None))
        elif isinstance(logger, TensorBoardLogger):
            paths.append((logger.directory, TENSORBOARD_DIR))
    return paths
