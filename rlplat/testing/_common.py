"""What every check of the kit shares: resolving an entry, failing with its name, spaces."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import gymnasium
import numpy as np
import torch

from rlplat.envs.base import space_shape
from rlplat.registry import (
    REGISTRIES,
    ConfigError,
    PluginError,
    check_conforms,
    check_kwargs,
)

Entry = str | Callable[..., Any]
"""A registered name (``"point_mass"``) or the constructor itself (``make_point_mass``)."""

OBSERVATION_SPACE = gymnasium.spaces.Box(-2.0, 2.0, (4,), np.float32)
"""Observation space the kit supplies where the caller gives none."""

BOX_ACTIONS = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE_ACTIONS = gymnasium.spaces.Discrete(3)


@dataclass(frozen=True)
class Subject:
    """The entry under check; fails in its name.

    Attributes:
        kind: Registry kind (``"network"``).
        name: Registered name, or the constructor's ``__name__``.
        distribution: Distribution declaring it; ``""`` for a bare constructor.
        constructor: The constructor passed directly; None for the registered entry ``name``.
    """

    kind: str
    name: str
    distribution: str
    constructor: Callable[..., Any] | None = None

    def expect(self, condition: Any, message: str) -> None:
        """Raise ``AssertionError("<kind> '<name>': <message>")`` unless ``condition``."""
        if not condition:
            self.fail(message)

    def fail(self, message: str) -> NoReturn:
        """Raise ``AssertionError("<kind> '<name>': <message>")``."""
        raise AssertionError(f"{self.kind} {self.name!r}: {message}")

    @contextmanager
    def running(self, what: str) -> Iterator[None]:
        """Turn an exception raised by the entry's code into an AssertionError naming ``what``;
        ``ConfigError`` and ``PluginError`` (already in the user's terms) pass unchanged."""
        try:
            yield
        except (AssertionError, ConfigError, PluginError):
            raise
        except Exception as error:  # any failure of the code under check
            raise AssertionError(f"{self.kind} {self.name!r}: {what} raised {type(error).__name__}: {error}") from error

    def conforms(self, obj: Any, protocol: type) -> None:
        """:func:`rlplat.registry.check_conforms`, failing with AssertionError."""
        try:
            check_conforms(self.kind, self.name, obj, protocol, distribution=self.distribution)
        except PluginError as error:
            raise AssertionError(str(error)) from None

    def target(self) -> Callable[..., Any]:
        """The constructor: the one passed, or the registered entry's (importing its plugin)."""
        return self.constructor if self.constructor is not None else REGISTRIES[self.kind].get(self.name)

    def build(self, kwargs: Mapping[str, Any] | None, *args: Any, key: str | None = None, **extra: Any) -> Any:
        """Build the entry as rlplat does: the YAML ``kwargs`` checked against the signature
        (``Registry.build`` for a registered name), plus the arguments rlplat supplies."""
        node = {k: v for k, v in (kwargs or {}).items() if k != "name"}
        key = key or self.kind
        if self.constructor is None:
            return REGISTRIES[self.kind].build(key, {"name": self.name, **node}, *args, **extra)
        check_kwargs(key, self.constructor, node, supplied=len(args), reserved=extra.keys())
        return self.constructor(*args, **node, **extra)


def subject(kind: str, entry: Entry) -> Subject:
    """The :class:`Subject` for ``entry`` of ``kind``.

    Args:
        kind: Registry kind: ``env``, ``transform``, ``network``, ``collector``, ``buffer``,
            ``loss``.
        entry: A name registered (by entry point) in that kind's registry, or a constructor,
            checked under its ``__name__``.

    Raises:
        TypeError: if ``entry`` is neither a string nor callable.
    """
    if isinstance(entry, str):
        return Subject(kind, entry, REGISTRIES[kind].distribution(entry) or "")
    if not callable(entry):
        raise TypeError(f"a {kind} entry is a registered name or a constructor, not {entry!r}")
    return Subject(kind, getattr(entry, "__name__", type(entry).__name__), "", entry)


def observation_batch(space: gymnasium.Space, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """``[*shape, *space.shape]`` float32 observations drawn from ``space`` (seeded)."""
    space.seed(seed)
    n = int(np.prod(shape))
    samples = np.stack([np.asarray(space.sample(), dtype=np.float32) for _ in range(n)])
    return torch.from_numpy(samples).reshape(*shape, *space_shape(space))


def savable(subject: Subject, state: Any, what: str) -> None:
    """Fail unless ``state`` is a mapping ``torch.save`` can write (a checkpoint holds it)."""
    subject.expect(isinstance(state, Mapping), f"{what} returned {type(state).__name__}, not a mapping")
    with subject.running(f"torch.save of {what}"):
        torch.save(state, io.BytesIO())


def shape_text(shape: Any) -> str:
    """``torch.Size([2, 3])`` -> ``[2, 3]``."""
    return str(list(shape))
