"""What an ``rlplat-train`` command line asks for, read from its flags without importing Hydra,
and how a console script's process treats Python's garbage collector.

:mod:`rlplat.cli.launch` decides from the flags, before anything heavy is imported, whether to
start MLflow's child process early; :mod:`rlplat.hydra_ext.validate` checks the rest.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
from collections.abc import Iterator, Sequence

INFO_FLAGS = ("-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion")
"""Hydra flags that print something and run nothing: no output directory is written."""


def prints_only(args: Sequence[str]) -> bool:
    """Whether the command line only prints (``--help``, ``--cfg job``, ...) and runs nothing."""
    return any(arg.split("=", 1)[0] in INFO_FLAGS for arg in args)


def is_multirun(args: Sequence[str]) -> bool:
    """Whether the command line starts a multirun (``-m``, ``--multirun``)."""
    return bool({"-m", "--multirun"} & set(args))


def is_resume(args: Sequence[str]) -> bool:
    """Whether the command line continues a run or a sweep (``resume=``)."""
    return any(arg.startswith("resume=") for arg in args)


def collect_after_start_up() -> None:
    """Pause Python's cyclic garbage collector until training starts
    (:meth:`rlplat.signals.Life.start_up_done`): importing torch, Hydra and MLflow creates some
    500k objects, which it would walk about five times (~0.4 s here) to free next to nothing."""
    gc.disable()


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """The garbage collector paused inside the block, for a short command that imports torch or
    MLflow (see :func:`collect_after_start_up`); as it was after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@functools.cache  # registered once
def skip_final_collection() -> None:
    """Exempt the objects left at exit from the last garbage collection (~0.55 s of a 2.5 s
    command here, to free memory the system takes back anyway). Console scripts call it first,
    so that it runs after every other exit handler (last-in, first-out)."""
    atexit.register(gc.freeze)
