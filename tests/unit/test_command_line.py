"""The console scripts skip the interpreter's last garbage collection at exit."""

from __future__ import annotations

import subprocess
import sys

CYCLE_AT_EXIT = """
import atexit, gc, sys
{skip}

class Noisy:
    def __del__(self):
        print("collected at exit", flush=True)

a, b = Noisy(), Noisy()
a.other, b.other = b, a  # a cycle: only the garbage collector frees it
del a, b
atexit.register(lambda: print("handler registered later runs first, frozen:", gc.get_freeze_count(), flush=True))
"""


def exit_output(skip: str) -> str:
    code = CYCLE_AT_EXIT.format(skip=skip)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_the_last_collection_is_skipped_after_every_other_exit_handler():
    skipped = "from rlplat.command_line import skip_final_collection\nskip_final_collection()\nskip_final_collection()"
    out = exit_output(skipped)
    assert "frozen: 0" in out  # the other handler ran before the freeze
    assert "collected at exit" not in out  # the shutdown collection found nothing to walk
    assert "collected at exit" in exit_output("")  # without it, the shutdown collection frees the cycle


def test_a_paused_collection_is_restored_as_it_was():
    import gc

    from rlplat.command_line import collection_paused

    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block's pause holds
    assert gc.isenabled()


RUN_THEN_REPORT = """
import atexit, gc, sys
atexit.register(lambda: print("collector enabled at exit:", gc.isenabled(), "frozen:", gc.get_freeze_count() > 0))
sys.argv = ["rlplat-train", *{args!r}]
from rlplat.cli.launch import main
main()
"""


def test_rlplat_train_pauses_the_collector_only_until_training_starts(tmp_path):
    args = [
        "algo=ppo", "env=cartpole", "tracking.enabled=false", "trainer.total_frames=256",
        "collector.num_envs=2", "collector.steps_per_env=128", "trainer.eval_episodes=1",
        "hydra.run.dir=run",
    ]  # fmt: skip
    code = RUN_THEN_REPORT.format(args=args)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "collector enabled at exit: True frozen: True" in out.stdout
