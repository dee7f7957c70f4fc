"""Buffers: hold collected data and hand the trainer its minibatches."""

from rlplat.buffers.replay import ReplayBuffer
from rlplat.buffers.rollout import RolloutBuffer

__all__ = ["ReplayBuffer", "RolloutBuffer"]
