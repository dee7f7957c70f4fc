"""One run's metric history as read back from the tracking store: what the report compares."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RunCurve:
    """One run's history of the compared metric.

    Attributes:
        run_id: The MLflow run.
        group: The group's label, e.g. ``algo=ppo``: runs compared as one.
        task: The stratum inside the group, e.g. ``env=cartpole``; "" when the group has one.
        seed: The run's seed (-1 when unknown).
        frames: int64 (n,): frames at which the metric was logged, increasing.
        seconds: float64 (n,): wall seconds from the run's start to each value, less the time
            a resumed run was down before it.
        values: float64 (n,): the metric's values.
        wall_seconds: The run's whole wall time (end - start, less the time a resumed run was
            down), seconds.
    """

    run_id: str
    group: str
    task: str
    seed: int
    frames: np.ndarray
    seconds: np.ndarray
    values: np.ndarray
    wall_seconds: float

    @property
    def final(self) -> float:
        """The last value (the final evaluation for ``eval/*``); nan when there is none."""
        return float(self.values[-1]) if len(self.values) else math.nan
