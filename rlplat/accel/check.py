"""Accelerated paths checked against the definitions they stand in for: a fast update
against autograd's back-propagation of the loss's forward, a fast act function against the
policy's own ``act``.

Tolerances (float32; the fast paths sum in other orders than torch's kernels):

* a gradient agrees when, for each parameter, the largest elementwise difference is at
  most ``1e-3`` of that parameter's largest autograd gradient plus ``1e-6`` of the largest
  autograd gradient of any parameter (so a gradient that is zero under autograd may differ by
  rounding alone);
* a loss output agrees when each value differs by at most ``1e-3`` of its magnitude plus
  ``1e-5``;
* an action or log-probability agrees when it differs by at most ``1e-4`` of its magnitude
  plus ``1e-4``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple, cast

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat.collectors.base import ActFunction

GRAD_RTOL, GRAD_SCALE_ATOL = 1e-3, 1e-6
OUTPUT_RTOL, OUTPUT_ATOL = 1e-3, 1e-5
ACT_RTOL, ACT_ATOL = 1e-4, 1e-4


@contextmanager
def same_draws(devices: set[torch.device]) -> Iterator[Callable[[], None]]:
    """Yields ``rewind()``, which sets torch's generators (the CPU's and those of the CUDA
    devices among ``devices``) back to their state on entry: code run after it draws the
    random numbers that code run before it drew."""
    cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})
    cpu_state = torch.get_rng_state()
    cuda_states = [torch.cuda.get_rng_state(i) for i in cuda]

    def rewind() -> None:
        torch.set_rng_state(cpu_state)
        for index, state in zip(cuda, cuda_states):
            torch.cuda.set_rng_state(state, index)

    yield rewind


class Comparison(NamedTuple):
    """:func:`compare_gradients`' result."""

    fast_output: TensorDict  # the accelerated update's loss output
    fast_grads: dict[str, Tensor | None]  # the gradients it set, by parameter name
    output: TensorDict  # the definition's loss output (its gradients are in .grad)
    difference: str | None  # None when they agree, else the first difference


def compare_gradients(
    fast: Callable[[TensorDict], TensorDict],
    reference: Callable[[TensorDict], TensorDict],
    batch: TensorDict,
    named: Mapping[str, nn.Parameter],
) -> Comparison:
    """Run ``fast`` and then ``reference`` on ``batch`` from the same random state, and compare
    the loss outputs and gradients they leave (tolerances in the module's docstring).

    Args:
        fast: The accelerated update.
        reference: The definition (:class:`rlplat.trainer.Autograd`).
        batch: A minibatch.
        named: The trainable parameters by name.

    Returns:
        Both results, ``reference``'s gradients left in ``.grad``, and None when they agree,
        else a description of the first difference (a parameter or an output key, the
        largest difference and what was allowed).
    """
    with same_draws({p.device for p in named.values()}) as rewind:
        fast_output = fast(batch)
        fast_grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in named.items()}
        rewind()
        output = reference(batch)
    difference = _output_difference(fast_output, output) or _gradient_difference(fast_grads, named)
    return Comparison(fast_output, fast_grads, output, difference)


@torch.no_grad()
def set_gradients(named: Mapping[str, nn.Parameter], grads: Mapping[str, Tensor | None]) -> None:
    """Write ``grads`` into the parameters' ``.grad``, in place where one exists (a view of a
    flat buffer stays one); None zeroes it."""
    for name, p in named.items():
        grad = grads[name]
        if p.grad is None:
            p.grad = None if grad is None else grad.clone()
        elif grad is None:
            p.grad.zero_()
        else:
            p.grad.copy_(grad)


def _output_difference(fast: TensorDict, reference: TensorDict) -> str | None:
    if set(fast.keys()) != set(reference.keys()):
        return f"its loss output has the keys {sorted(fast.keys())}, the loss's {sorted(reference.keys())}"
    for key, value in reference.items():
        value = cast(Tensor, value)
        difference = _difference(cast(Tensor, fast[key]).to(value.dtype), value)
        allowed = OUTPUT_RTOL * _largest(value) + OUTPUT_ATOL
        if not difference <= allowed:
            return f"output {key!r} (differs by {difference:.3g}, allowed {allowed:.3g})"
    return None


def _largest(tensor: Tensor) -> float:
    """The largest finite ``|value|`` of ``tensor`` (0 for none)."""
    return float(tensor.abs().nan_to_num(0.0, 0.0, 0.0).max()) if tensor.numel() else 0.0


def _difference(got: Tensor, want: Tensor) -> float:
    """The largest elementwise ``|got - want|``, where equal values count 0 (the same infinity,
    or NaN in both: a non-finite loss is the trainer's to report, not a disagreement) and a
    value non-finite in one alone counts inf."""
    same = (got == want) | (got.isnan() & want.isnan())
    gap = (got - want).abs().nan_to_num(float("inf"), float("inf"), float("inf"))
    return float(torch.where(same, 0.0, gap).max()) if got.numel() else 0.0


def _gradient_difference(fast: Mapping[str, Tensor | None], named: Mapping[str, nn.Parameter]) -> str | None:
    reference = {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in named.items()}
    largest = {
        name: float(g.abs().nan_to_num(0.0, 0.0, 0.0).max()) if g.numel() else 0.0 for name, g in reference.items()
    }
    scale = max(largest.values(), default=0.0)
    for name, grad in reference.items():
        got = fast[name]
        difference = _difference(torch.zeros_like(grad) if got is None else got, grad)
        allowed = GRAD_RTOL * largest[name] + GRAD_SCALE_ATOL * scale
        if not difference <= allowed:
            return f"parameter {name} (its gradient differs by {difference:.3g}, allowed {allowed:.3g})"
    return None


def compare_acting(fast: ActFunction, reference: ActFunction, observation: Tensor) -> str | None:
    """Act with ``fast`` and ``reference`` on ``observation`` from the same random state
    (torch's generators left as they were) and compare actions and log-probabilities.

    Returns:
        None when they agree (tolerance in the module's docstring), else which differs.
    """
    with same_draws({observation.device}) as rewind, torch.inference_mode():
        action, log_prob = fast(observation)
        rewind()
        want_action, want_log_prob = reference(observation)
        rewind()
    for what, got, want in (("action", action, want_action), ("log_prob", log_prob, want_log_prob)):
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"its {what} is {list(got.shape)} {got.dtype}, the policy's {list(want.shape)} {want.dtype}"
        difference = (got.double() - want.double()).abs()
        allowed = ACT_RTOL * want.double().abs() + ACT_ATOL
        if not bool((difference <= allowed).all()):
            return f"its {what} differs by {float(difference.max()):.3g} from the policy's"
    return None
