"""What an optimizer entry implements (entry-point group ``rlplat.optimizers``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch
from torch import nn


class OptimizerFactory(Protocol):
    """Builds a ``torch.optim.Optimizer`` for one set of parameters.

    rlplat supplies ``params`` (the trainable parameters of one or more parameter groups of
    the loss, see :meth:`rlplat.losses.base.Loss.param_groups`); the YAML node ``optim``
    supplies every other keyword argument (``lr`` and the optimizer's own settings) and
    holds the defaults: entries declare no defaults of their own, so ``conf/optim/<name>.yaml``
    is the one place a default lives. ``max_grad_norm`` is rlplat's, never passed here.
    The learning rate of each of the optimizer's ``param_groups`` is rescaled by the
    schedule (``trainer.lr_schedule``) from the value the optimizer was built with.
    """

    def __call__(self, params: Iterable[nn.Parameter], /, **settings: Any) -> torch.optim.Optimizer:
        """``params`` -> an optimizer over them; raises ConfigError for bad settings."""
        ...
