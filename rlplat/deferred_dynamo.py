"""``torch._dynamo`` kept off the path of runs that do not compile.

Importing ``torch._dynamo``, torch.compile's front end, takes about 0.7 s and 70 MB of
resident memory here: as long as ``import torch`` itself, and a quarter of a small run's
peak memory. A run that does not compile uses none of it, yet three things import it:

- tensordict marks a few functions for the compiler when it is imported
  (``torch.compiler.allow_in_graph``, ``torch.compiler.assume_constant_result``); both
  return the function itself and only record the mark in dynamo's tables;
- ``torch.optim.Optimizer`` wraps ``add_param_group``, ``zero_grad``, ``state_dict`` and
  ``load_state_dict`` in ``torch._disable_dynamo``, which imports dynamo on the first call
  to build the wrapper that keeps the compiler out of them, and caches it on the function;
- ``Optimizer.step`` inserts a graph break (rlplat's optimizer steps skip that wrapper:
  :mod:`rlplat.optim.groups`).

:func:`defer_dynamo` defers the first two until something imports ``torch._dynamo`` (a
``trainer.compile=true`` run's ``torch.compile``, or any other import): the marks are
recorded and the optimizer methods run as they are; the moment dynamo is imported, the
marks are applied and the cached wrappers dropped, so from then on everything is as if
nothing had been deferred. Until then nothing traces, so nothing differs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

DYNAMO = "torch._dynamo"
MARKS = ("allow_in_graph", "assume_constant_result")  # torch.compiler functions deferred
DISABLE_CACHE = "__dynamo_disable"  # where torch._disable_dynamo caches its wrapper
OPTIMIZER_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")

_deferred_marks: list[tuple[str, Any]] = []  # (mark, function) in the order made
_cached: list[Callable[..., Any]] = []  # optimizer methods given themselves as their wrapper
_originals: dict[str, Callable[..., Any]] = {}  # torch.compiler's own mark functions


def defer_dynamo() -> bool:
    """Defer the compiler marks and optimizer wrappers that import ``torch._dynamo`` (above).

    Call it before tensordict is imported. It imports torch. Once ``torch._dynamo`` is
    imported, by anyone, the deferred marks are applied and the optimizer methods get
    their dynamo wrappers on their next call, as without this.

    Returns:
        True when it deferred; False when ``torch._dynamo`` is imported already, or
        when it has deferred already in this process (both: nothing to do).
    """
    if DYNAMO in sys.modules or _originals:
        return False
    import torch.compiler
    from torch.optim.optimizer import Optimizer

    for mark in MARKS:
        _originals[mark] = getattr(torch.compiler, mark)
        setattr(torch.compiler, mark, _deferring(mark))
    for name in OPTIMIZER_METHODS:
        function = getattr(getattr(Optimizer, name), "__wrapped__", None)
        if function is not None and not hasattr(function, DISABLE_CACHE):
            setattr(function, DISABLE_CACHE, function)
            _cached.append(function)
    sys.meta_path.insert(0, _OnDynamoImport())
    return True


def deferred_marks() -> Sequence[tuple[str, Any]]:
    """The ``(mark, function)`` pairs recorded and not yet applied."""
    return tuple(_deferred_marks)


def _deferring(mark: str) -> Callable[[Any], Any]:
    """``torch.compiler.<mark>`` that records the mark while dynamo is not imported."""

    def deferred(fn: Any) -> Any:
        if DYNAMO in sys.modules:
            return getattr(sys.modules[DYNAMO], mark)(fn)
        if isinstance(fn, (list, tuple)):
            return [deferred(f) for f in fn]
        if not callable(fn):
            raise TypeError(f"torch.compiler.{mark} expects a callable, got {fn!r}")
        _deferred_marks.append((mark, fn))
        return fn

    deferred.__name__ = deferred.__qualname__ = mark
    deferred.__doc__ = _originals[mark].__doc__
    return deferred


def _apply(dynamo: ModuleType) -> None:
    """Undo the deferral once ``dynamo`` is imported: apply the marks, drop the cached
    wrappers, give torch.compiler its own functions back."""
    import torch.compiler

    for mark, original in _originals.items():
        setattr(torch.compiler, mark, original)
    for mark, fn in _deferred_marks:
        getattr(dynamo, mark)(fn)
    _deferred_marks.clear()
    for function in _cached:
        if getattr(function, DISABLE_CACHE, None) is function:
            delattr(function, DISABLE_CACHE)
    _cached.clear()


class _OnDynamoImport(importlib.abc.MetaPathFinder):
    """Finds ``torch._dynamo`` as the import system would, and undoes the deferral when
    its module has run; then leaves ``sys.meta_path``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:  # not installed: the import fails as it would without this
            return None
        loader: Any = spec.loader  # a package's source loader
        exec_module = loader.exec_module

        def exec_then_apply(module: ModuleType) -> None:
            exec_module(module)
            _apply(module)

        loader.exec_module = exec_then_apply  # this spec's loader only
        return spec
