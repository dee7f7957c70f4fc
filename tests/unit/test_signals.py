"""The process's one state machine for SIGINT and SIGTERM (:mod:`rlplat.signals`), driven by
real signals sent to this process, each test on a fresh :class:`Life`."""

from __future__ import annotations

import gc
import os
import signal

import pytest

from rlplat.signals import Life, Phase, exit_status, interrupted_by


class Stop:
    signal: str | None = None


@pytest.fixture
def life():
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield Life()
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    gc.unfreeze()


def test_a_first_signal_in_training_asks_the_loop_to_stop_and_a_second_stops_at_once(life, capsys):
    stop = Stop()
    assert life.phase is Phase.START_UP
    with pytest.raises(KeyboardInterrupt, match="SIGINT"), life.training(stop):
        assert life.phase is Phase.RUNNING
        os.kill(os.getpid(), signal.SIGTERM)
        assert (stop.signal, life.phase) == ("SIGTERM", Phase.STOPPING)
        assert life.stopped_by is None  # a single run: nothing for later jobs to read
        os.kill(os.getpid(), signal.SIGINT)
    assert "SIGTERM: stopping after this rollout (again to stop at once)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers before the block


def test_objects_alive_at_the_start_are_frozen_during_training_and_given_back_after(life):
    gc.unfreeze()
    with life.training(Stop()):
        assert gc.get_freeze_count() > 1000  # the modules, at least
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), life.training(Stop()):
        raise RuntimeError("the run failed")
    assert gc.get_freeze_count() == 0


def test_a_sweep_records_the_first_signal_waits_on_the_second_and_exits_on_the_third(life, capsys):
    life.sweep_waits(main_process=True)
    os.kill(os.getpid(), signal.SIGINT)
    assert (life.stopped_by, life.phase) == ("SIGINT", Phase.STOPPED)
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(SystemExit) as exited:
        os.kill(os.getpid(), signal.SIGTERM)
    assert exited.value.code == 143
    err = capsys.readouterr().err
    assert "the sweep starts no more jobs" in err and "waiting for the jobs to end their runs" in err


def test_a_job_of_a_stopped_sweep_stops_at_its_first_rollout_and_a_signal_in_a_job_stops_the_sweep(life):
    life.sweep_waits()
    stop = Stop()
    with life.training(stop):
        os.kill(os.getpid(), signal.SIGINT)
    assert life.stopped_by == "SIGINT"  # no further job of this process starts
    later = Stop()
    with life.training(later):
        assert later.signal == "SIGINT"


def test_exit_statuses_and_names():
    assert (exit_status("SIGINT"), exit_status("SIGTERM")) == (130, 143)
    assert interrupted_by(KeyboardInterrupt("SIGTERM")) == "SIGTERM"
    assert interrupted_by(KeyboardInterrupt()) == "SIGINT"


def test_only_this_module_and_nothing_else_names_the_signals():
    """Signal handling lives in one module: no other module of rlplat names SIGINT or SIGTERM."""
    from pathlib import Path

    import rlplat

    root = Path(rlplat.__file__).parent
    naming = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(name in path.read_text() for name in ("SIGINT", "SIGTERM"))
    )
    assert naming == ["signals.py"]
