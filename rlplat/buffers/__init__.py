"""Buffers: hold collected data and hand the trainer its minibatches."""

from rlplat.buffers import rollout  # noqa: F401  (registers the built-in entries)
from rlplat.buffers.rollout import RolloutBuffer

__all__ = ["RolloutBuffer"]
