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
