"""What a run stopped by a signal prints: the command that resumes it, only when there is
something to resume."""

from __future__ import annotations

import pytest

from rlplat.checkpoint import CHECKPOINT_DIR
from rlplat.cli.run import RunSpec, _exit_interrupted
from rlplat.tracking.locate import SWEEP_FILE


def stopped(output_dir, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        _exit_interrupted(KeyboardInterrupt(), RunSpec(output_dir=output_dir, title="a run"))
    return int(exit_info.value.code), capsys.readouterr().err


def test_a_run_stopped_before_its_first_checkpoint_prints_no_resume_command(tmp_path, capsys):
    code, err = stopped(tmp_path, capsys)
    assert code == 130 and "Resume with:" not in err
    assert err.strip() == "rlplat-train: stopped by SIGINT at once, before its first checkpoint: nothing to resume"

    (tmp_path / CHECKPOINT_DIR).mkdir()
    (tmp_path / CHECKPOINT_DIR / "step_000000001024.pt").write_bytes(b"")
    code, err = stopped(tmp_path, capsys)
    assert code == 130 and f"Resume with: rlplat-train resume={tmp_path}" in err


def test_a_sweeps_job_stopped_before_its_first_checkpoint_prints_its_sweeps_resume(tmp_path, capsys):
    (tmp_path / SWEEP_FILE).write_text("{}\n")
    (tmp_path / "0").mkdir()
    code, err = stopped(tmp_path / "0", capsys)  # the sweep's resume starts the job again
    assert code == 130 and f"Resume with: rlplat-train resume={tmp_path}" in err
