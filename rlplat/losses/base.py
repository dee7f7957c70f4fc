"""The loss interface the trainer drives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from tensordict import TensorDict
from torch import nn

from rlplat.collectors.sync import Policy


class Loss(Protocol):
    """An algorithm as the trainer sees it.

    A loss is built with ``(observation_space, action_space, network)`` supplied by rlplat
    and its YAML keys; it builds the networks it needs and owns no optimizer.

    Attributes:
        policy: The module the collector and evaluation act with.
    """

    policy: Policy

    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add what the loss needs to a ``[T, B]`` rollout (e.g. GAE); may return it as is."""
        ...

    def __call__(self, batch: TensorDict) -> TensorDict:
        """``[N]`` batch -> TensorDict of scalar ``loss_*`` terms plus detached diagnostics."""
        ...

    def after_update(self) -> None:
        """Called after every optimizer step: target-network updates and the like."""
        ...

    def parameters(self) -> Iterator[nn.Parameter]:
        """Every trainable parameter; the trainer's optimizer steps them."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Network weights (and any other state) for the checkpoint."""
        ...
