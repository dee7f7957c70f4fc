"""Transforms applied by the env adapter to observations and rewards."""

from rlplat.transforms import normalize  # noqa: F401  (registers the built-in entries)
from rlplat.transforms.base import Transform

__all__ = ["Transform"]
