"""Flat parameter buffers: a loss's parameters laid out in one contiguous buffer per device
and dtype, their gradients in a second one (:class:`rlplat.optim.base.FlatLayout`).

The modules keep their ``nn.Parameter`` objects, now views into the buffer (``param.data``);
each ``.grad`` is a view into the gradient buffer, into which autograd accumulates in place
(and the closed-form passes write). Zeroing, the gradient norm, the clip and an elementwise
optimizer's step (Adam, RMSprop) are then one operation each instead of one per parameter
tensor: for the small networks of RL, where the per-operation overhead dominates, the step
costs a fraction.

This holds only while nothing replaces a ``.grad``: a module that calls ``zero_grad()``
(torch's default sets every ``.grad`` to None) or assigns one would leave the buffer behind,
and its gradients would silently never reach the optimizer. So the layout is used only for
losses and networks whose every module is rlplat's or ``torch.nn``'s own class
(:mod:`rlplat.accel.plan`), and :meth:`FlatParameters.clip_gradients`, called before every
step, checks each ``.grad`` is still its view and otherwise fails naming the parameter.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from rlplat.trainer import ParameterError


class FlatParameters:
    """Lay ``params`` out in flat buffers (the module's docstring).

    Args:
        params: Trainable parameters, each in this list once.
        names: Each parameter's name by ``id``, for messages (a parameter without one is
            named by its position).

    Attributes:
        leaves: The parameter buffers, leaf tensors each with its ``.grad`` set to the
            matching gradient buffer.
        grads: The gradient buffers.
    """

    @torch.no_grad()
    def __init__(self, params: list[nn.Parameter], names: dict[int, str] | None = None) -> None:
        layouts: dict[tuple[torch.device, torch.dtype], list[nn.Parameter]] = {}
        for p in params:
            layouts.setdefault((p.device, p.dtype), []).append(p)
        self.leaves: list[Tensor] = []
        self.grads: list[Tensor] = []
        self._views: list[tuple[nn.Parameter, Tensor]] = []  # each parameter and its gradient's view
        for (device, dtype), members in layouts.items():
            flat = torch.empty(sum(p.numel() for p in members), device=device, dtype=dtype)
            grad = torch.zeros_like(flat)
            offset = 0
            for p in members:
                n = p.numel()
                flat[offset : offset + n].copy_(p.reshape(-1))
                p.data = flat[offset : offset + n].view_as(p)
                p.grad = grad[offset : offset + n].view_as(p)
                self._views.append((p, p.grad))
                offset += n
            leaf = nn.Parameter(flat)
            leaf.grad = grad
            self.leaves.append(leaf)
            self.grads.append(grad)
        names = names or {}
        self._names = [names.get(id(p), f"parameter {i}") for i, (p, _) in enumerate(self._views)]
        self._max_norm: Tensor | None = None  # max_grad_norm as a tensor on the gradients' device

    def zero_grad(self) -> None:
        """Zero the gradient buffers in place."""
        for grad in self.grads:
            grad.zero_()

    def check(self) -> None:
        """Raise unless every parameter's ``.grad`` is still its view of the gradient buffer.

        Raises:
            ParameterError: naming the first parameter whose ``.grad`` was set to None or
                replaced.
        """
        for index, (p, view) in enumerate(self._views):
            if p.grad is not view:
                raise ParameterError(
                    f"parameter {self._names[index]}: its .grad was "
                    f"{'set to None' if p.grad is None else 'replaced'} (zero_grad() or an assignment), but the "
                    "optimizer steps rlplat's flat gradient buffer, which would no longer hold its gradient; "
                    "leave .grad to the trainer, or run with trainer.accel=false"
                )

    def clip_gradients(self, max_norm: float | None) -> Tensor:
        """:meth:`check`, then clip the joint gradient norm to ``max_norm`` as
        ``torch.nn.utils.clip_grad_norm_`` does (scale by ``max_norm / (norm + 1e-6)`` when
        below 1). One float32 CPU buffer is clipped in numpy: a norm (one BLAS dot product)
        and, only when it clips, a scaling, against torch's four operations of a few
        microseconds' overhead each.

        Returns:
            The norm before clipping, 0-dim float.
        """
        self.check()
        if len(self.grads) == 1 and self.grads[0].device.type == "cpu" and self.grads[0].dtype == torch.float32:
            array = self.grads[0].numpy()
            norm = np.sqrt(np.dot(array, array), dtype=np.float32)
            if max_norm is not None:
                coefficient = max_norm / (float(norm) + 1e-6)
                if coefficient < 1.0:
                    array *= np.float32(coefficient)
            return torch.from_numpy(np.asarray(norm))
        if len(self.grads) == 1:
            total = torch.linalg.vector_norm(self.grads[0])
        else:
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in self.grads]))
        if max_norm is not None:
            if self._max_norm is None:  # the bound as a tensor: a number over a tensor is two operations
                self._max_norm = torch.tensor(max_norm, dtype=total.dtype, device=total.device)
            coefficient_tensor = torch.div(self._max_norm, total + 1e-6).clamp_(max=1.0)
            for grad in self.grads:
                grad.mul_(coefficient_tensor)
        return total
