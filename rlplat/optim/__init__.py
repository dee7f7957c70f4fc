"""Optimizers per parameter group, optimizer entries and learning-rate schedules."""

from rlplat.optim.groups import Optimizers, OptimizerUnit, make_optimizers
from rlplat.optim.schedules import LR_SCHEDULES, lr_factor

__all__ = ["LR_SCHEDULES", "OptimizerUnit", "Optimizers", "lr_factor", "make_optimizers"]
