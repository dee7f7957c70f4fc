"""The run's own settings (the ``trainer`` and ``checkpoint`` nodes; ``tracking`` in
:mod:`rlplat.tracking.settings`), checked right after composition, before torch is imported.
Their defaults live in conf/config.yaml only, with each key's meaning and unit; frames are env
steps summed over all envs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Self, cast

from omegaconf import OmegaConf

from rlplat.metrics import FINAL_METRICS
from rlplat.registry import ConfigError, check_kwargs, preset_node

DEVICES = ("cpu", "cuda", "auto")
LR_SCHEDULES = ("constant", "linear")
NONFINITE = ("raise", "skip_update")


def check_int(key: str, value: Any, minimum: int) -> None:
    """Raise ConfigError unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")


def check_choice(key: str, value: Any, valid: tuple[str, ...]) -> None:
    """Raise ConfigError unless ``value`` is one of ``valid``."""
    if value not in valid:
        raise ConfigError(f"{key}={value!r}: valid: {', '.join(valid)}")


def check_bool(key: str, value: Any) -> None:
    """Raise ConfigError unless ``value`` is true or false."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: must be true or false")


def at_least(minimum: int) -> Any:
    """A settings field that holds an integer >= ``minimum``."""
    return field(metadata={"at_least": minimum})


def one_of(valid: tuple[str, ...]) -> Any:
    """A settings field that holds one of ``valid``."""
    return field(metadata={"one_of": valid})


class SettingsNode:
    """A config node checked against its dataclass: keys (naming the valid ones), then each
    field as declared (:func:`at_least`, :func:`one_of`, ``bool``); the rest in the subclass's
    ``__post_init__``, after this one's."""

    NODE = ""

    @classmethod
    def from_node(cls, node: Any) -> Self:
        """Build from the node (a DictConfig or a mapping); raises ConfigError for an unknown or
        missing key, or a bad value."""
        values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        if not isinstance(values, Mapping):
            names = ", ".join(f.name for f in fields(cast(Any, cls)))
            raise ConfigError(f"{cls.NODE}={values!r}: must be a mapping of {names}")
        kwargs = {str(k): v for k, v in values.items()}
        check_kwargs(cls.NODE, cls, kwargs)
        return cls(**kwargs)

    def __post_init__(self) -> None:
        for f in fields(cast(Any, self)):
            key, value = f"{self.NODE}.{f.name}", getattr(self, f.name)
            if "at_least" in f.metadata:
                check_int(key, value, f.metadata["at_least"])
            elif "one_of" in f.metadata:
                check_choice(key, value, f.metadata["one_of"])
            elif f.type in (bool, "bool"):  # the annotation, a string under postponed evaluation
                check_bool(key, value)


@dataclass(frozen=True)
class TrainerConfig(SettingsNode):
    """The ``trainer`` node: budget, device, schedules of evaluation, logging and videos."""

    NODE = "trainer"
    total_frames: int = at_least(1)
    device: str = one_of(DEVICES)
    num_threads: int = at_least(1)
    lr_schedule: str = one_of(LR_SCHEDULES)
    eval_every_frames: int = at_least(0)
    eval_episodes: int = at_least(1)
    log_every_frames: int = at_least(0)
    objective: str = one_of(FINAL_METRICS)
    nonfinite: str = one_of(NONFINITE)
    record_every_frames: int = at_least(0)
    compile: bool = False
    target_return: float | None = None
    accel: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        target = self.target_return
        if target is not None and (isinstance(target, bool) or not isinstance(target, int | float) or target != target):
            raise ConfigError(f"trainer.target_return={target!r}: must be a number, or null to train for total_frames")
        # videos are recorded at log steps: every log_every_frames, and at each evaluation
        cadence = min(self.log_every_frames, self.eval_every_frames or self.log_every_frames)
        if 0 < self.record_every_frames < cadence:
            raise ConfigError(
                f"trainer.record_every_frames={self.record_every_frames}: videos are recorded at log steps, which "
                f"come every {cadence} frames (trainer.log_every_frames={self.log_every_frames}, and at "
                f"evaluations: trainer.eval_every_frames={self.eval_every_frames}); give at least {cadence}, or "
                "lower trainer.log_every_frames"
            )


@dataclass(frozen=True)
class CheckpointConfig(SettingsNode):
    """The ``checkpoint`` node: when checkpoints are written and how many are kept."""

    NODE = "checkpoint"
    save_buffer: bool
    every_frames: int = at_least(0)
    keep: int = at_least(1)


def resolve_config(cfg: Any) -> dict[str, Any]:
    """The composed config as plain containers, resolved, without its ``hydra`` node: what the
    checks before torch and :func:`rlplat.build.build` read.

    Raises:
        ConfigError: when an interpolation does not resolve.
    """
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
    except Exception as error:  # omegaconf's InterpolationResolutionError and kin
        raise ConfigError(f"the config does not resolve: {error}") from error
    assert isinstance(config, dict), "a DictConfig resolves to a dict"
    config.pop("hydra", None)
    return cast(dict[str, Any], config)  # a composed config's keys are strings


MAX_SEED = 2**32 - 1
"""The largest seed numpy's generators take."""


def check_seed(seed: Any) -> int:
    """The run's seed; raises ConfigError unless it is an integer in [0, 2^32 - 1]."""
    check_int("seed", seed, 0)
    if seed > MAX_SEED:
        raise ConfigError(f"seed={seed}: must be at most 2^32 - 1 = {MAX_SEED}")
    return int(seed)


def group_optimizer_settings(shared: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The settings, ``name`` included, of a parameter group's optimizer: its sub-node
    ``own`` (``optim.<group>``) over ``shared`` (``optim``'s other keys); but a sub-node that
    names another optimizer (``optim.critic.name=rmsprop`` under Adam) starts from that
    optimizer's defaults (``conf/optim/<name>.yaml``): Adam's betas mean nothing to RMSprop."""
    name = own.get("name", shared.get("name"))
    if name == shared.get("name"):
        return {**shared, **own}
    return {**(preset_node("optim", str(name)) or {}), **own}
