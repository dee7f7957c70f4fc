"""torch's shared libraries loaded in a background thread while Hydra composes the config.

``import torch`` takes about 0.8 s here, and about 0.25 s of it is the dynamic loader's:
relocating ``libtorch_cpu.so`` and ``libtorch_python.so`` and running their static
initializers, which register torch's operators. None of that runs Python code, and the
loader runs without Python's interpreter lock when ``dlopen`` is called as a C function
through ctypes. :func:`start_loading` has a thread load them, the way torch's own import
would (``libtorch_global_deps.so`` globally, as ``torch/__init__.py`` does, which brings
``libtorch_cpu.so``, ``libc10.so`` and the rest; ``libtorch_python.so`` locally, as the
``torch._C`` extension that needs it would), while the main thread composes the config (~0.25 s
of Python); ``import torch`` then finds them loaded and only runs its Python part.
:func:`wait` joins the thread before torch is imported. ``rlplat-train`` does this for a
single run, once its command line has passed the checks (:func:`rlplat.cli.train.main`).

Only on Linux and only for a torch whose ``lib/`` has both libraries; anywhere else, or when
torch is imported already, nothing is started and ``import torch`` loads them as always. A
library that fails to load here is left to torch's import, which loads it again and reports
its error as it always does. This module imports neither torch nor Hydra.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

LIBRARIES = (("libtorch_global_deps.so", os.RTLD_GLOBAL), ("libtorch_python.so", os.RTLD_LOCAL))
"""torch's shared libraries (in ``torch/lib``) and how its import loads them, in order."""

_threads: list[threading.Thread] = []


def library_paths() -> list[tuple[Path, int]]:
    """:data:`LIBRARIES` in the installed torch's ``lib/`` with their ``dlopen`` modes; empty
    when this is not Linux, when torch is not installed (found without importing it) or
    when one of them is not there."""
    if not sys.platform.startswith("linux"):
        return []
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    paths = [(lib / name, os.RTLD_NOW | mode) for name, mode in LIBRARIES]
    return paths if all(path.is_file() for path, _ in paths) else []


def start_loading() -> bool:
    """Start loading torch's shared libraries in a background thread (above).

    Returns:
        True when a thread started; False when torch is imported already, when a thread
        started before in this process, or when :func:`library_paths` is empty.
    """
    if "torch" in sys.modules or _threads:
        return False
    paths = library_paths()
    if not paths:
        return False
    dlopen = ctypes.CDLL(None).dlopen  # a foreign function: the interpreter lock is released while it runs
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = (ctypes.c_char_p, ctypes.c_int)
    thread = threading.Thread(target=_load, args=(dlopen, paths), name="rlplat-torch-libraries", daemon=True)
    thread.start()
    _threads.append(thread)
    atexit.register(wait)  # never exit while the loader runs static initializers
    return True


def _load(dlopen: Callable[[bytes, int], int | None], paths: Sequence[tuple[Path, int]]) -> None:
    for path, mode in paths:
        if not dlopen(os.fsencode(path), mode):
            return  # torch's import loads it again and reports the error


def wait() -> None:
    """Wait until the thread :func:`start_loading` started has loaded the libraries; at
    once when none was started."""
    while _threads:
        _threads.pop().join()
