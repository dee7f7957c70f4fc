"""Collectors: run the policy in vector envs and yield rollouts [T, B]."""

from rlplat.collectors.base import Collector, Policy
from rlplat.collectors.sync import SyncCollector

__all__ = ["Collector", "Policy", "SyncCollector"]
