"""Losses: one algorithm per file; each owns its networks and returns loss_* terms."""

from rlplat.losses import a2c, ddpg, dqn, ppo, ppo_kl, reinforce, sac, td3  # noqa: F401  (registers the built-in entries)
from rlplat.losses.base import Loss
from rlplat.losses.ppo import PPOLoss

__all__ = ["Loss", "PPOLoss"]
