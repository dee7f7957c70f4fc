"""What an optimizer entry implements (entry-point group ``rlplat.optimizers``), and the flat
layout of parameters that an elementwise optimizer may be given."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor, nn


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


class FlatLayout(Protocol):
    """Parameters laid out in contiguous buffers, one per device and dtype; each parameter
    a view into its buffer and its ``.grad`` a view into the matching gradient buffer. Built
    by :mod:`rlplat.accel.flat` for the exact built-in classes; an optimizer entry marked
    ``elementwise`` then steps the buffers instead of the parameters one by one.

    Attributes:
        leaves: The buffers, as leaf tensors whose ``.grad`` is the gradient buffer: what the
            optimizer steps.
    """

    leaves: Sequence[Tensor]

    def zero_grad(self) -> None:
        """Zero the gradient buffers in place."""
        ...

    def clip_gradients(self, max_norm: float | None) -> Tensor:
        """Scale the gradients so that their joint L2 norm is at most ``max_norm`` (None: no
        clip), as ``torch.nn.utils.clip_grad_norm_`` does.

        Returns:
            The norm before clipping, 0-dim float.

        Raises:
            RuntimeError: naming a parameter whose ``.grad`` is no longer its view of the
                gradient buffer (set to None, or replaced): its gradient would be lost.
        """
        ...


Flatten = Callable[[list[nn.Parameter]], FlatLayout]
"""Lays out a list of parameters in flat buffers (each parameter in one list only)."""
