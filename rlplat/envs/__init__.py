"""Environments: registered single-env constructors and the vector-env adapter."""

from rlplat.envs import gym  # noqa: F401  (registers the built-in entries)
from rlplat.envs.vector import VectorEnv

__all__ = ["VectorEnv"]
