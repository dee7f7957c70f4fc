"""Learning-rate schedules over frames."""

from __future__ import annotations

from rlplat.registry import ConfigError
from rlplat.settings import LR_SCHEDULES

__all__ = ["LR_SCHEDULES", "lr_factor"]


def lr_factor(schedule: str, frames: int, total_frames: int) -> float:
    """Multiplier of the initial learning rate after ``frames`` of ``total_frames``.

    ``constant`` keeps 1; ``linear`` decays from 1 to 0 at ``total_frames`` (as
    Stable-Baselines3's linear schedule over the remaining progress).

    Raises:
        ConfigError: for an unknown schedule.
    """
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(0.0, 1.0 - frames / total_frames)
    raise ConfigError(f"trainer.lr_schedule={schedule!r}: valid: {', '.join(LR_SCHEDULES)}")
