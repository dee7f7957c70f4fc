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

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rlplat.cli.args import ArgumentParser, Key, reported
from rlplat.command_line import skip_final_collection
from rlplat.registry import ConfigError

PROG = "rlplat-sync"


def _seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"{key}={value!r}: must be a number of seconds, e.g. {key}=60") from None
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"{key}={value!r}: must be 0 or more seconds, e.g. {key}=60")
    return seconds


WAIT = Key(_seconds, 0.0, "seconds to wait for a tracking server that does not answer (0: try once)")


def parse(argv: Sequence[str] | None) -> tuple[list[Path], float]:
    """Command line -> (the paths, the ``wait`` seconds).

    Raises:
        ConfigError: for no path, a path that does not exist, an unknown key or a bad value.
    """
    parser = ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n", 2)[2] if __doc__ else None,
        usage=f"{PROG} PATH [PATH ...] [wait=SECONDS]",
        epilog=f"keys:\n  wait={WAIT.default:g}".ljust(28) + WAIT.help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("words", nargs="*", metavar="PATH or key=value")
    words = parser.parse_args(argv).words
    paths, wait = [], float(WAIT.default)
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key == "wait":
            wait = WAIT.parse(key, value)
            continue
        if sep and not Path(word).exists():
            raise ConfigError(f"{key}={value!r}: unknown key; valid: wait")
        if not Path(word).exists():
            raise ConfigError(f"{word!r}: no such run or sweep directory")
        paths.append(Path(word).resolve())
    if not paths:
        raise ConfigError("give a run or sweep directory, e.g. rlplat-sync outputs/multirun/2026-11-28/12-00-00")
    return paths, wait


def sync(paths: list[Path], wait_s: float) -> int:
    """Record every kept run under ``paths``; returns the exit status (0, or 1 when some are
    still kept)."""
    from rlplat.tracking.pending import load_pending, pending_files
    from rlplat.tracking.sync import record_kept, wait_for_server

    files = [path for root in paths for path in pending_files(root)]
    if not files:
        print(f"{PROG}: nothing to record: no run under {', '.join(map(str, paths))} kept anything")
        return 0
    for uri in sorted({load_pending(path).uri for path in files}):

        def waiting(why: str, uri: str = uri) -> None:
            if wait_s > 0:
                say(f"waiting up to {wait_s:g} s for the tracking server at {uri} ({why})")

        problem = wait_for_server(uri, wait_s, waiting)
        if problem is not None:
            say(f"error: no MLflow tracking server answers at {uri} ({problem}): nothing recorded; run {PROG} again "
                "once it answers (wait=SECONDS waits for it)")  # fmt: skip
            return 1
    left = 0
    for path in files:
        try:
            print(f"{PROG}: recorded run {record_kept(path, say)}")
        except ConfigError as error:
            say(f"error: {path} was not recorded: {error}")
            left += 1
    return 1 if left else 0


def say(line: str) -> None:
    """Print ``rlplat-sync: <line>`` on stderr."""
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``rlplat-sync``."""
    skip_final_collection()
    with reported(PROG, "what was recorded so far stays; the rest is still kept"):
        paths, wait = parse(sys.argv[1:] if argv is None else argv)
        sys.exit(sync(paths, wait))


if __name__ == "__main__":
    main()
