"""Checkpoint files: written atomically, rotated, read back without running code.

A run directory holds ``checkpoints/step_<frames>.pt`` (the newest ``checkpoint.keep`` of
them), ``best.pt`` (best evaluation) and, once the run finished, ``final.pt``. Each file is
one ``torch.save`` of plain data (dicts, lists, numbers, strings and tensors) written to a
temporary file, fsync'ed and renamed over the target, so a crash leaves either the old file
or the new one, never half of one. Reading uses ``torch.load(weights_only=True)``: a
checkpoint cannot run code.
"""

from __future__ import annotations

import os
import random
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from rlplat.registry import ConfigError

CHECKPOINT_DIR = "checkpoints"
FINAL = "final.pt"
BEST = "best.pt"
FORMAT = 2  # 2: optimizer states over flat parameter buffers (rlplat.optim.groups)
_STEP = re.compile(r"^step_(\d+)\.pt$")


class CheckpointError(ConfigError):
    """A checkpoint file that cannot be read (missing, truncated, corrupt, or not rlplat's)."""


def step_name(frames: int) -> str:
    """File name of the periodic checkpoint written after ``frames`` frames."""
    return f"step_{frames:012d}.pt"


def atomic_save(state: Mapping[str, Any], path: Path) -> Path:
    """``torch.save`` to ``path`` through a temporary file in the same directory, fsync'ed
    and renamed over ``path`` (then the directory fsync'ed), so that ``path`` is always
    either the previous file or the complete new one. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(temporary, "wb") as file:
            torch.save(dict(state), file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``torch.load(weights_only=True)``.

    Raises:
        CheckpointError: when the file is missing, truncated, corrupt or not an rlplat
            checkpoint; the message names the file and the reason.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read ({type(error).__name__}: {reason})") from error
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"checkpoint {str(path)!r} is not an rlplat checkpoint (format {FORMAT})")
    if state["format"] != FORMAT:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format {state['format']!r}; this rlplat reads format {FORMAT} "
            f"(the rlplat version that wrote it reads it)"
        )
    return state


def periodic_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``(frames, path)`` of the run's periodic checkpoints, newest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.pt") if (m := _STEP.match(p.name))]
    return sorted(found, reverse=True)


def load_newest(run_dir: Path, warn: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """The newest readable periodic checkpoint of a run directory; an unreadable newer one is
    skipped with a warning naming it.

    Raises:
        CheckpointError: when the run directory has no readable checkpoint.
    """
    say = warn or (lambda message: warnings.warn(message, stacklevel=2))
    candidates = periodic_checkpoints(run_dir)
    for index, (_, path) in enumerate(candidates):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as error:
            fallback = candidates[index + 1][1].name if index + 1 < len(candidates) else "none left"
            say(f"{error}; falling back to the previous checkpoint ({fallback})")
    folder = Path(run_dir) / CHECKPOINT_DIR
    best = folder / BEST
    hint = ""
    if best.is_file():  # killed after an evaluation, before its first periodic checkpoint
        hint = f"; it has {str(best)!r}, its best evaluation's, which rlplat-eval and rlplat-record take"
    raise CheckpointError(f"no readable periodic checkpoint (step_*.pt) in {str(folder)!r}{hint}")


class CheckpointFiles:
    """Writes a run's checkpoints: periodic ones rotated to the newest ``keep``, ``best.pt``
    and ``final.pt``.

    Args:
        run_dir: The run directory; files go to its ``checkpoints/``.
        keep: Periodic checkpoints kept, newest first.
    """

    def __init__(self, run_dir: Path, keep: int) -> None:
        self.folder = Path(run_dir) / CHECKPOINT_DIR
        self.keep = keep

    def write_periodic(self, state: Mapping[str, Any], frames: int) -> Path:
        """Write ``step_<frames>.pt`` and delete periodic ones beyond the newest ``keep``."""
        path = atomic_save(state, self.folder / step_name(frames))
        for _, old in periodic_checkpoints(self.folder.parent)[self.keep :]:
            old.unlink(missing_ok=True)
        return path

    def write(self, state: Mapping[str, Any], name: str) -> Path:
        """Write ``best.pt`` or ``final.pt``."""
        return atomic_save(state, self.folder / name)


def rng_state() -> dict[str, Any]:
    """Python's, numpy's and torch's global RNG states, as plain data and tensors."""
    kind, keys, position, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    return {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore :func:`rng_state`."""
    random.setstate(state["python"])
    numpy = state["numpy"]
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["kind"], keys, numpy["position"], numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
