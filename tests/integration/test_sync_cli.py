"""rlplat-sync as a user runs it: what a run kept while its tracking server was away is
recorded once a store answers; bad input is one line and exit status 2.

The kept file is written as a run's tracker writes it (:class:`rlplat.tracking.pending.KeptRun`);
tests/integration/test_team_server.py and test_team_guide.py make them with a real server
killed during real runs.
"""

from __future__ import annotations

import pytest
from conftest import cli
from mlflow import MlflowClient
from servers import free_port

from rlplat.tags import PARENT_TAG, RUN_DIR_TAG
from rlplat.tracking.pending import PENDING_FILE, KeptRun, PendingRun, save_pending
from rlplat.tracking.records import read_run_file


def kept_run(run_dir, uri: str, parent: str | None = None) -> KeptRun:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 3\n")
    tags = {"algo": "ppo", "seed": "3", RUN_DIR_TAG: str(run_dir), **({PARENT_TAG: parent} if parent else {})}
    kept = KeptRun(
        uri, "team", None, None, PendingRun("ppo-cartpole-s3", tags, 1_000_000), "FINISHED", 1_009_000,
        params={"seed": "3", "loss.gamma": "0.99"}, tags={"rlplat.waited_for_server": "true"},
        metrics=[("time/fps", 900.0 + i, 1_001_000 + 1000 * i, 256 * (i + 1)) for i in range(5)],
        artifacts=[(str(run_dir / "config.yaml"), None)],
    )  # fmt: skip
    save_pending(run_dir, kept)
    return kept


def test_a_kept_run_is_created_with_its_times_and_values_and_its_file_removed(tmp_path, store):
    parent = MlflowClient(tracking_uri=store)
    parent_id = parent.create_run(parent.create_experiment("team")).info.run_id
    kept_run(tmp_path / "sweep" / "0", store, parent=parent_id)
    kept_run(tmp_path / "sweep" / "1", store, parent=parent_id)
    result = cli("rlplat-sync", str(tmp_path / "sweep"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ids = [read_run_file(tmp_path / "sweep" / job)["run_id"] for job in ("0", "1")]
    assert result.stdout.splitlines() == [f"rlplat-sync: recorded run {run_id}" for run_id in ids]
    for run_id in ids:
        run = MlflowClient(tracking_uri=store).get_run(run_id)
        assert (run.info.start_time, run.info.end_time, run.info.status) == (1_000_000, 1_009_000, "FINISHED")
        assert run.info.run_name == "ppo-cartpole-s3" and run.data.tags[PARENT_TAG] == parent_id
        assert run.data.params == {"seed": "3", "loss.gamma": "0.99"}
        history = MlflowClient(tracking_uri=store).get_metric_history(run_id, "time/fps")
        assert sorted((m.step, m.timestamp) for m in history) == [
            (256 * (i + 1), 1_001_000 + 1000 * i) for i in range(5)
        ]
        assert [a.path for a in MlflowClient(tracking_uri=store).list_artifacts(run_id)] == ["config.yaml"]
    assert not list((tmp_path / "sweep").rglob(PENDING_FILE))
    again = cli("rlplat-sync", str(tmp_path / "sweep"), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("rlplat-sync: nothing to record")


def test_a_server_that_does_not_answer_keeps_the_file_and_exits_1(tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    kept_run(tmp_path / "run", uri)
    result = cli("rlplat-sync", str(tmp_path / "run"), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"rlplat-sync: error: no MLflow tracking server answers at {uri} (connection refused): nothing recorded; "
        "run rlplat-sync again once it answers (wait=SECONDS waits for it)"
    )
    assert (tmp_path / "run" / PENDING_FILE).is_file() and read_run_file(tmp_path / "run") == {}


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            [],
            "rlplat-sync: error: give a run or sweep directory, e.g. rlplat-sync outputs/multirun/2026-11-28/12-00-00",
        ),
        (["nowhere"], "rlplat-sync: error: 'nowhere': no such run or sweep directory"),
        ([".", "wait=-1"], "rlplat-sync: error: wait='-1': must be 0 or more seconds, e.g. wait=60"),
        ([".", "wiat=5"], "rlplat-sync: error: wiat=5: unknown key 'wiat'. Valid keys: wait. Did you mean 'wait'?"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, line, tmp_path):
    result = cli("rlplat-sync", *args, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == line and result.stdout == ""


def test_help_names_the_kept_file_and_the_exit_statuses(tmp_path):
    result = cli("rlplat-sync", "--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("usage: rlplat-sync PATH [PATH ...] [wait=SECONDS]")
    assert PENDING_FILE in result.stdout and "Exit status 0" in result.stdout
