"""Conformance check of a network entry (:class:`rlplat.networks.base.TorsoFactory`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import torch
from torch import nn

from rlplat.testing._common import (
    OBSERVATION_SPACE,
    Entry,
    Subject,
    observation_batch,
    shape_text,
    subject,
)


def check_network(
    entry: Entry,
    kwargs: Mapping[str, Any] | None = None,
    *,
    observation_space: gymnasium.Space = OBSERVATION_SPACE,
    out_features: int = 8,
    batch_size: int = 5,
    seed: int = 0,
) -> None:
    """Check a network (torso) entry the way rlplat uses it.

    Builds the torso through the registry as a loss does, ``(observation_space,
    out_features, **kwargs)``, at ``out_features`` and at ``out_features + 3`` (a torso
    must honour the width it is given), and checks:

    * it is a ``torch.nn.Module`` with trainable parameters;
    * observations ``[N, *obs_shape]`` float32 drawn from ``observation_space`` map to
      features ``[N, out_features]`` float32, finite, for ``N = batch_size`` and ``N = 1``
      (a single env's observation);
    * gradients flow: a random projection of the features back-propagates a finite
      gradient into every trainable parameter, not all zero.

    Args:
        entry: Registered network name, or the factory itself.
        kwargs: The YAML keyword arguments (a ``name`` key is ignored).
        observation_space: The input space rlplat would supply (default a ``Box`` of 4).
        out_features: The feature width rlplat would ask for.
        batch_size: N of the batched forward.
        seed: Seed of torch's global generator (initial weights), the observations and the
            projection.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the factory's signature, as in a run.
    """
    torso = subject("network", entry)
    torch.manual_seed(seed)
    for width in (out_features, out_features + 3):
        with torso.running(f"the factory (observation_space={observation_space}, out_features={width})"):
            module = torso.build(kwargs, observation_space, width)
        torso.expect(
            isinstance(module, nn.Module), f"the factory returned {type(module).__name__}, not a torch.nn.Module"
        )
        for n in (batch_size, 1):
            _check_forward(torso, module, observation_batch(observation_space, (n,), seed), width)
    _check_gradients(torso, module, observation_batch(observation_space, (batch_size,), seed), seed)


def _check_forward(torso: Subject, module: nn.Module, observation: torch.Tensor, width: int) -> torch.Tensor:
    what = f"forward of observations {shape_text(observation.shape)} float32"
    with torso.running(what):
        features = module(observation)
    torso.expect(isinstance(features, torch.Tensor), f"{what} returned {type(features).__name__}, not a Tensor")
    expected = [observation.shape[0], width]
    torso.expect(
        list(features.shape) == expected,
        f"{what} returned features of shape {shape_text(features.shape)}; expected {expected} "
        f"([N, out_features] with out_features={width})",
    )
    torso.expect(features.dtype == torch.float32, f"{what} returned {features.dtype} features; expected float32")
    torso.expect(bool(torch.isfinite(features).all()), f"{what} returned NaN or inf features")
    return features


def _check_gradients(torso: Subject, module: nn.Module, observation: torch.Tensor, seed: int) -> None:
    trainable = {name: p for name, p in module.named_parameters() if p.requires_grad}
    torso.expect(trainable, "the module has no trainable parameters; rlplat's optimizers would train nothing")
    module.zero_grad(set_to_none=True)
    with torso.running("forward"):
        features = module(observation)
    torso.expect(
        features.requires_grad,
        "its features carry no gradient (detached, or computed under no_grad): no parameter would be trained",
    )
    with torso.running("backward through the features"):
        projection = torch.randn(features.shape, generator=torch.Generator().manual_seed(seed))
        (features * projection).sum().backward()
    grads = {name: p.grad for name, p in trainable.items() if p.grad is not None}
    without = [name for name in trainable if name not in grads]
    torso.expect(not without, f"no gradient reaches the parameters {without} from the features")
    torso.expect(all(bool(torch.isfinite(g).all()) for g in grads.values()), "a parameter's gradient holds NaN or inf")
    torso.expect(
        any(bool(g.any()) for g in grads.values()),
        "every parameter's gradient is zero: the features do not depend on the parameters",
    )
