"""Conformance check of a loss add-on entry (:class:`rlplat.losses.addons.LossAddonFactory`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.losses.actor_critic import ActorCriticLoss
from rlplat.losses.addons import LossAddon, PolicyLoader, WeightedAddon, build_addons
from rlplat.losses.base import Loss
from rlplat.networks.actor_critic import ActorCritic
from rlplat.registry import check_kwargs
from rlplat.testing._common import (
    BOX_ACTIONS,
    DISCRETE_ACTIONS,
    OBSERVATION_SPACE,
    Entry,
    Subject,
    shape_text,
    subject,
)
from rlplat.testing.losses import DEFAULT_NETWORK, _build, _minibatch, _rollout, check_loss_output

MULTI_DISCRETE_ACTIONS = gymnasium.spaces.MultiDiscrete([3, 2])
"""The third action space the kit checks an add-on in: independent categorical dims."""

ATOL = 1e-6
"""Tolerance of the kit's comparisons of terms (float32 arithmetic)."""


def check_loss_addon(
    entry: Entry,
    kwargs: Mapping[str, Any] | None = None,
    *,
    coef: float = 0.5,
    host: Entry = "ppo",
    host_kwargs: Mapping[str, Any] | None = None,
    action_spaces: Sequence[gymnasium.Space] = (BOX_ACTIONS, DISCRETE_ACTIONS, MULTI_DISCRETE_ACTIONS),
    observation_space: gymnasium.Space = OBSERVATION_SPACE,
    network: tuple[Entry, Mapping[str, Any]] | None = None,
    batch_size: int = 16,
    zero_at_reference: bool = False,
    seed: int = 0,
) -> None:
    """Check a loss add-on entry the way rlplat builds it and a loss adds its term.

    For each action space, builds the ``host`` loss (an :class:`ActorCriticLoss` entry, PPO by
    default, over ``network``) as :func:`rlplat.testing.check_loss` does, and a reference
    policy: the agent of the same loss initialised from another seed, frozen. Builds the
    add-on as rlplat does (a registered name through ``loss.addons``, with ``coef``), its
    ``load_policy`` returning that reference whatever the source, and checks:

    * it implements :class:`rlplat.losses.addons.LossAddon` and holds no trainable parameter
      (none of the loss's optimizers would step it);
    * on a ``[N]`` minibatch of a preprocessed rollout (N = ``batch_size`` and 1), the term is
      a finite 0-dim float tensor with gradients; back-propagated, it gives finite gradients
      that reach the policy's parameters, and none that reach the reference's;
    * attached to the host loss (:meth:`ActorCriticLoss.attach_addons`), the loss output is
      what the trainer logs and sums (:func:`rlplat.testing.losses.check_loss_output`), with
      ``loss_<name>`` = ``coef * term`` and ``<name>`` = the term, detached, the loss's own
      outputs unchanged; with ``coef`` 0, ``loss_<name>`` is a constant 0 without gradients
      and ``<name>`` still the term;
    * with ``zero_at_reference`` (a divergence from the reference, e.g. ``kl_to_reference``):
      the term is 0 where the reference is the policy itself.

    Args:
        entry: Registered add-on name, or the constructor itself.
        kwargs: The add-on's YAML keyword arguments, ``coef`` aside (it is the next argument).
        coef: The weight the host multiplies the term by (> 0).
        host: The loss entry the add-on joins (an :class:`ActorCriticLoss`).
        host_kwargs: The host's YAML keyword arguments.
        action_spaces: Action spaces to check in: ``Box(2)``, ``Discrete(3)`` and
            ``MultiDiscrete([3, 2])`` by default.
        observation_space: The env observation space rlplat would supply.
        network: ``(network entry, its YAML kwargs)`` of the host's torso; None: a small MLP
            (:data:`rlplat.testing.losses.DEFAULT_NETWORK`).
        batch_size: N, samples per minibatch.
        zero_at_reference: Whether the term must be 0 when the policy is the reference.
        seed: Seed of torch's generator (initial weights) and of the data.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the constructor's signature, as in a run.
    """
    addon_entry = subject("loss_addon", entry)
    addon_entry.expect(coef > 0, f"the kit's coef must be > 0, got {coef}")
    host_entry = subject("loss", host)
    torso = DEFAULT_NETWORK if network is None else network
    for host_in in ((host_entry, host_kwargs, observation_space, space) for space in action_spaces):
        _check_in(addon_entry, kwargs, coef, host_in, torso, batch_size, zero_at_reference, seed)


def _check_in(
    addon_entry: Subject,
    kwargs: Mapping[str, Any] | None,
    coef: float,
    host_in: tuple[Subject, Mapping[str, Any] | None, gymnasium.Space, gymnasium.Space],
    network: tuple[Entry, Mapping[str, Any]],
    batch_size: int,
    zero_at_reference: bool,
    seed: int,
) -> None:
    """Every check of :func:`check_loss_addon` with the host ``(entry, kwargs, observation
    space, action space)`` of ``host_in``."""
    host_entry, host_kwargs, observation_space, action_space = host_in
    what = f" (action_space={action_space})"
    reference = _host(host_entry, host_kwargs, observation_space, action_space, network, seed + 1).agent
    reference.requires_grad_(False)
    loss = _host(host_entry, host_kwargs, observation_space, action_space, network, seed)
    addon = _build_addon(addon_entry, kwargs, coef, observation_space, action_space, _returning(reference), what)
    rollout = _rollout(cast(Loss, loss), observation_space, (8, 4), seed)
    processed = loss.preprocess(rollout.clone()).select(*loss.in_keys)
    generator = torch.Generator().manual_seed(seed)
    for n in (batch_size, 1):
        batch = _minibatch(processed, n, 1, generator)
        _check_term(addon_entry, addon.term, loss.agent, reference, batch, f"{what} on a batch of {n}")
    _check_in_host(addon_entry, loss, addon, _minibatch(processed, batch_size, 1, generator), what)
    if zero_at_reference:
        itself = copy.deepcopy(loss.agent).requires_grad_(False)
        same = _build_addon(addon_entry, kwargs, coef, observation_space, action_space, _returning(itself), what)
        value = same.term(loss.agent, _minibatch(processed, batch_size, 1, generator)).detach()
        addon_entry.expect(
            abs(float(value)) <= ATOL,
            f"the term is {float(value)} where the policy is the reference; expected 0{what}",
        )


def _host(
    host_entry: Subject, kwargs: Any, observation_space: Any, action_space: Any, network: Any, seed: int
) -> ActorCriticLoss:
    torch.manual_seed(seed)
    loss = _build(host_entry, kwargs, observation_space, action_space, network)
    host_entry.expect(
        isinstance(loss, ActorCriticLoss),
        f"built a {type(loss).__name__}, not an ActorCriticLoss: only those take loss add-ons",
    )
    assert isinstance(loss, ActorCriticLoss)  # for the type checker: expect() has failed otherwise
    return loss


def _returning(reference: ActorCritic) -> PolicyLoader:
    """A ``load_policy`` that returns ``reference`` whatever the source."""

    def load(source: str, key: str) -> ActorCritic:
        return reference

    return load


def _build_addon(
    addon_entry: Subject,
    kwargs: Mapping[str, Any] | None,
    coef: float,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    load_policy: PolicyLoader,
    what: str,
) -> WeightedAddon:
    """The add-on as rlplat builds it: a registered name through ``loss.addons``
    (:func:`rlplat.losses.addons.build_addons`), a constructor with the same arguments."""
    node = dict(kwargs or {})
    with addon_entry.running(f"the constructor{what}"):
        if addon_entry.constructor is None:
            node = {addon_entry.name: {**node, "coef": coef}}
            (addon,) = build_addons(node, observation_space, action_space, load_policy)
        else:
            key = f"loss.addons.{addon_entry.name}"
            check_kwargs(key, addon_entry.constructor, node, supplied=2, reserved=("load_policy",), name_key=False)
            term = addon_entry.constructor(observation_space, action_space, **node, load_policy=load_policy)
            addon_entry.conforms(term, LossAddon)
            addon = WeightedAddon(addon_entry.name, term, coef)
    if isinstance(addon.term, nn.Module):
        trainable = [name for name, p in addon.term.named_parameters() if p.requires_grad]
        addon_entry.expect(
            not trainable,
            f"holds trainable parameters {trainable}, which no optimizer of the loss steps; freeze them "
            f"(requires_grad_(False)){what}",
        )
    return addon


def _check_term(
    entry: Subject, term: LossAddon, policy: ActorCritic, reference: ActorCritic, batch: TensorDict, what: str
) -> Tensor:
    """The term on ``batch``: a finite 0-dim float tensor whose gradient reaches ``policy``
    and not ``reference``; returns it (detached)."""
    for module in (policy, reference):
        module.zero_grad(set_to_none=True)
    call = f"the term{what}"
    with entry.running(call):
        value = term(policy, batch)
    entry.expect(
        isinstance(value, Tensor) and value.shape == () and value.is_floating_point(),
        f"{call} is {type(value).__name__} {shape_text(getattr(value, 'shape', []))} "
        f"{getattr(value, 'dtype', '')}; expected a 0-dim float tensor",
    )
    entry.expect(bool(torch.isfinite(value)), f"{call} is {value.item()}")
    entry.expect(value.requires_grad, f"{call} carries no gradient: the policy could not be trained on it")
    with entry.running(f"the backward of {call}"):
        value.backward()
    grads = {name: p.grad for name, p in policy.named_parameters() if p.grad is not None}
    entry.expect(grads, f"no gradient of {call} reaches the policy's parameters")
    bad = [name for name, grad in grads.items() if not bool(torch.isfinite(grad).all())]
    entry.expect(not bad, f"the gradients of {call} in {bad} hold NaN or inf")
    leaked = [name for name, p in reference.named_parameters() if p.grad is not None]
    entry.expect(not leaked, f"{call} sends gradients into the reference policy's {leaked}")
    policy.zero_grad(set_to_none=True)
    return value.detach()


def _check_in_host(entry: Subject, loss: ActorCriticLoss, addon: WeightedAddon, batch: TensorDict, what: str) -> None:
    """The host loss's output with ``addon`` attached, at its ``coef`` and at 0 (see
    :func:`check_loss_addon`)."""
    name, loss_key = addon.name, keys.LOSS_PREFIX + addon.name
    torch.manual_seed(0)
    alone = loss(batch).detach()
    with entry.running(f"the term on the same batch{what}"):
        term = addon.term(loss.agent, batch).detach()
    for weight in (addon.coef, 0.0):
        loss.attach_addons((WeightedAddon(name, addon.term, weight),))
        torch.manual_seed(0)
        with entry.running(f"the loss with the add-on at coef={weight}{what}"):
            output = loss(batch)
        check_loss_output(entry, output)
        entry.expect(
            {loss_key, name} <= set(output.keys()),
            f"the loss output at coef={weight} lacks {loss_key!r} or {name!r}: it has {sorted(output.keys())}{what}",
        )
        own = list(alone.keys())  # noqa: SIM118  (iter(td) walks the batch dim)
        changed = [key for key in own if not torch.allclose(output[key].detach(), alone[key], atol=ATOL)]
        entry.expect(not changed, f"the add-on changed the loss's own outputs {changed}{what}")
        want, got = torch.tensor(weight) * term, output[loss_key].detach()
        entry.expect(
            torch.allclose(got, want, atol=ATOL) and torch.allclose(output[name], term, atol=ATOL),
            f"at coef={weight}, {loss_key}={float(got)} and {name}={float(output[name])}; "
            f"expected {float(want)} and the term, {float(term)}{what}",
        )
        entry.expect(
            weight != 0 or not output[loss_key].requires_grad,
            f"at coef=0, {loss_key} carries gradients: the backward pass would go through it{what}",
        )
    loss.attach_addons(())
