"""Transforms applied by the env adapter to observations and rewards."""

from rlplat.transforms.base import Transform

__all__ = ["Transform"]
