"""Collectors: run the policy in vector envs and yield rollouts [T, B]."""

from rlplat.collectors import sync  # noqa: F401  (registers the built-in entries)
from rlplat.collectors.sync import Policy, SyncCollector

__all__ = ["Policy", "SyncCollector"]
