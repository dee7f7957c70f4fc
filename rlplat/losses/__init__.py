"""Losses: one algorithm per file; each owns its networks and returns loss_* terms."""

from rlplat.losses.base import Loss, LossModule
from rlplat.losses.ppo import PPOLoss

__all__ = ["Loss", "LossModule", "PPOLoss"]
