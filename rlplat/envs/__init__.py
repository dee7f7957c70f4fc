"""Environments: registered single-env constructors and the vector-env adapter."""

from rlplat.envs.vector import VectorEnv

__all__ = ["VectorEnv"]
