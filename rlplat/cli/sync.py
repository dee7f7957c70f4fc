"""rlplat-sync: record in MLflow what runs kept while their tracking server was away.

    rlplat-sync PATH [PATH ...] [wait=SECONDS]

A run whose tracking server did not answer by its end (a single run after 30 s, a sweep's
job after 5 s) keeps what it could not write in its run directory, in mlflow-pending.json:
its creation when it began while the server was away, its params, tags, metric values (each
at its step and time) and artifacts, and its end (status and time). This command records
them once the server answers: it creates the run where needed (nested under its sweep's
parent run, as the job's tags say), writes every value at its step and time, ends the run
with its status, and removes the file. PATH is a run directory, a sweep directory or any
folder of them. A sweep's end and rlplat-train resume=<sweep dir> do the same for their jobs.
Exit status 0 when everything was recorded (or nothing was kept), 1 when something is still
kept (the server did not answer, or refused a write: the line says which), 2 for bad input.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

from rlplat.cli.args import Command, Key, number, reported
from rlplat.command_line import skip_final_collection
from rlplat.registry import ConfigError

PROG = "rlplat-sync"


def directory(word: str) -> Path:
    """``word`` as a resolved path; raises ConfigError when nothing is there."""
    if not Path(word).exists():
        raise ConfigError(f"{word!r}: no such run or sweep directory")
    return Path(word).resolve()


SECONDS = number(lambda s: 0 <= s < math.inf, "0 or more seconds, e.g. wait=60")
KEYS = {"wait": Key(SECONDS, 0, "seconds to wait for a tracking server that does not answer (0: try once)")}
COMMAND = Command(
    PROG,
    f"{PROG} PATH [PATH ...] [wait=SECONDS]",
    __doc__.split("\n\n", 2)[2] if __doc__ else "",
    KEYS,
    "give a run or sweep directory, e.g. rlplat-sync outputs/multirun/2026-11-28/12-00-00",
    many=True,
    target=directory,
)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``rlplat-sync``: exits 0 when nothing is kept any more, 1 when
    something still is, 2 for bad input (:func:`rlplat.tracking.sync.sync`)."""
    skip_final_collection()
    with reported(PROG, "what was recorded so far stays; the rest is still kept"):
        paths, values, _ = COMMAND.parse(argv)
        from rlplat.tracking.sync import sync

        say = lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True)
        sys.exit(0 if sync(paths, values["wait"], say, lambda line: print(f"{PROG}: {line}")) else 1)


if __name__ == "__main__":
    main()
