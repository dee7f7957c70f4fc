"""Which accelerated paths a run takes, and why: chosen once per run by
:func:`rlplat.build.build` from the built loss.

Each path applies only to the exact classes it was written and tested for, with settings it
covers; anything else (a subclass, a plugin, an uncovered setting) runs the definition, and
``Acceleration.summary`` says which path runs and why, for the console:

* update: PPO's and SAC's closed-form gradients (:mod:`rlplat.accel.ppo`,
  :mod:`rlplat.accel.sac`), checked against autograd on the run's first minibatch
  (:class:`CheckedGradients`); else :class:`rlplat.trainer.Autograd`;
* acting: the actor-critic agent's and SAC's actor in numpy on the CPU
  (:class:`rlplat.accel.actor_critic.NumpyActingPolicy`, :class:`rlplat.accel.sac.NumpySACPolicy`),
  checked against the policy's ``act`` when built; else the policy itself;
* parameters: flat buffers for an elementwise optimizer (:mod:`rlplat.accel.flat`) when every
  module of the loss is rlplat's or ``torch.nn``'s own class; else one by one.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from tensordict import TensorDict
from torch import nn

from rlplat.accel.actor_critic import NumpyActingPolicy, NumpyActorCritic
from rlplat.accel.arrays import NUMPY_IN_PLACE, on_cpu_float32
from rlplat.accel.check import compare_acting, compare_gradients, set_gradients
from rlplat.accel.flat import FlatParameters
from rlplat.accel.mlp import ACTIVATIONS
from rlplat.accel.ppo import NumpyPPOGradients, PPOGradients
from rlplat.accel.sac import NumpySACPolicy, SACGradients
from rlplat.collectors.base import Policy
from rlplat.losses.base import Loss
from rlplat.losses.ppo import PPOLoss
from rlplat.losses.sac import SACLoss
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.actors import SquashedGaussianActor
from rlplat.networks.ensemble import StackedMLP
from rlplat.networks.exploration import SquashedGaussianPolicy
from rlplat.networks.heads import CategoricalHead, GaussianHead
from rlplat.networks.mlp import MLP
from rlplat.networks.q import ContinuousQEnsemble
from rlplat.networks.recurrent import RecurrentActorCritic
from rlplat.optim import Optimizers
from rlplat.optim.base import Flatten
from rlplat.trainer import Autograd, Gradients

Warn = Callable[[str], None]
"""Shows the user a one-line warning."""
Update = Callable[[TensorDict], TensorDict]
"""Computes one minibatch's loss output (and the gradients, in place)."""

OWN_MODULES = ("rlplat.", "torch.nn.")
"""Where the classes of a loss's modules must be defined for its parameters to go in flat buffers."""


def warn_on_stderr(message: str) -> None:
    """``rlplat: warning: <message>`` on standard error."""
    print(f"rlplat: warning: {message}", file=sys.stderr)


def _class_name(obj: object) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__.startswith("rlplat.") else f"{cls.__module__}.{cls.__qualname__}"


def _not_exactly(obj: object, cls: type, what: str) -> str | None:
    """None when ``obj`` is exactly ``cls``; else why not, in the user's terms."""
    if type(obj) is cls:
        return None
    if isinstance(obj, RecurrentActorCritic) and type(obj) is RecurrentActorCritic:  # said as the config says it
        return f"network.core={obj.actor_core.kind}, a recurrent core"
    kind = f"a subclass of {cls.__qualname__}" if isinstance(obj, cls) else f"not {cls.__qualname__}"
    return f"{what} is {_class_name(obj)}, {kind}"


def _mlp_torso(torso: object, what: str, activations: tuple[str, ...] = ACTIVATIONS) -> str | None:
    """None when ``torso`` is exactly rlplat's MLP with an activation in ``activations``."""
    if (reason := _not_exactly(torso, MLP, what)) is not None:
        return reason
    activation = cast(MLP, torso).activation
    if activation not in activations:
        return f"network.activation={activation!r} (the closed form covers {', '.join(activations)})"
    if not cast(MLP, torso).float_input:
        return f"{what} takes {cast(MLP, torso).input_dtype} observations (the fast paths take floats)"
    return None


def _head(agent: ActorCritic) -> str | None:
    if type(agent.head) not in (GaussianHead, CategoricalHead) or type(agent.value_head) is not nn.Linear:
        return f"the agent's head is {_class_name(agent.head)}"
    return None


def ppo_closed_form(loss: Loss) -> str | None:
    """None when :mod:`rlplat.accel.ppo` covers ``loss``; else why not."""
    if (reason := _not_exactly(loss, PPOLoss, "the loss")) is not None:
        return reason
    if cast(PPOLoss, loss).addons:  # their terms are not in the closed form
        return "loss.addons is set"
    agent = cast(PPOLoss, loss).agent
    if (reason := _not_exactly(agent, ActorCritic, "the agent")) is not None:
        return reason
    if agent.critic_torso is agent.actor_torso:
        return "loss.share_torso=true"
    return (
        _mlp_torso(agent.actor_torso, "the actor's network")
        or _mlp_torso(agent.critic_torso, "the critic's network")
        or _head(agent)
    )


def sac_closed_form(loss: Loss) -> str | None:
    """None when :mod:`rlplat.accel.sac` covers ``loss``; else why not."""
    if (reason := _not_exactly(loss, SACLoss, "the loss")) is not None:
        return reason
    sac = cast(SACLoss, loss)
    reason = (
        _not_exactly(sac.actor, SquashedGaussianActor, "the actor")
        or _mlp_torso(sac.actor.torso, "the actor's network")
        or _not_exactly(sac.critics, ContinuousQEnsemble, "the critics")
        or _not_exactly(sac.policy, SquashedGaussianPolicy, "the policy")
    )
    if reason is not None:
        return reason
    if type(sac.critics.stacked) is not StackedMLP:  # stacked only over exact MLP torsos
        return "the critics' networks are not rlplat's MLP"
    if sac.critics.stacked.activation not in ACTIVATIONS:
        return (
            f"network.activation={sac.critics.stacked.activation!r} (the closed form covers {', '.join(ACTIVATIONS)})"
        )
    return None


def own_modules(loss: Loss) -> str | None:
    """None when every module of ``loss`` (itself included) is a class of rlplat's or
    ``torch.nn``'s; else which one is not."""
    if not isinstance(loss, nn.Module):
        return f"the loss is {_class_name(loss)}, not an nn.Module"
    for name, module in loss.named_modules():
        if not type(module).__module__.startswith(OWN_MODULES):
            return f"{'module ' + name if name else 'the loss'} is {_class_name(module)}"
    return None


def numpy_acting(policy: Policy) -> str | None:
    """None when ``policy`` can act in numpy (:mod:`rlplat.accel.actor_critic`,
    :mod:`rlplat.accel.sac`); else why not."""
    if type(policy) is ActorCritic:
        reason = _mlp_torso(policy.actor_torso, "the actor's network", tuple(NUMPY_IN_PLACE)) or _head(policy)
        parameters = [*policy.actor_torso.parameters(), *policy.head.parameters()]
    elif type(policy) is SquashedGaussianPolicy:
        actor = policy.actor
        reason = _not_exactly(actor, SquashedGaussianActor, "the actor") or _mlp_torso(
            actor.torso, "the actor's network", tuple(NUMPY_IN_PLACE)
        )
        parameters = list(actor.parameters())
    elif isinstance(policy, RecurrentActorCritic):
        return _not_exactly(policy, ActorCritic, "the policy")
    else:
        return f"the policy is {_class_name(policy)}"
    if reason is None and not on_cpu_float32(*parameters):
        reason = "the policy's parameters are not float32 on the CPU"
    return reason


class CheckedGradients:
    """A fast update that stands in for :class:`rlplat.trainer.Autograd` once it has agreed
    with it on the run's first minibatch (:func:`rlplat.accel.check.compare_gradients`).

    On that minibatch both run, from the same random draws; where they agree, the fast
    path's result is used, as on every later minibatch (so that a resumed run computes what
    one that never stopped did). On a difference, a one-line warning names the parameter (or
    output), and the run goes on with autograd, from that minibatch's autograd result.

    Args:
        fast: The accelerated update.
        autograd: The definition.
        named: The loss's trainable parameters by name.
        name: The fast path's name, for the warning.
        warn: Called with the warning.
    """

    def __init__(
        self, fast: Update, autograd: Autograd, named: Mapping[str, nn.Parameter], name: str, warn: Warn
    ) -> None:
        self.fast, self.autograd, self.named, self.name, self.warn = fast, autograd, dict(named), name, warn
        self._update: Update = self._first
        self.agreed: bool | None = None  # None until the first minibatch

    def __call__(self, batch: TensorDict) -> TensorDict:
        """See :meth:`rlplat.trainer.Gradients.__call__`."""
        return self._update(batch)

    def _first(self, batch: TensorDict) -> TensorDict:
        comparison = compare_gradients(self.fast, self.autograd, batch, self.named)
        self.agreed = comparison.difference is None
        if comparison.difference is None:
            set_gradients(self.named, comparison.fast_grads)
            self._update = self.fast
            return comparison.fast_output
        self.warn(f"{self.name} disagrees with autograd on {comparison.difference}: training on with autograd")
        self._update = self.autograd
        return comparison.output


class Acceleration:
    """The accelerated paths of one run (see the module's docstring).

    Args:
        loss: The built loss, on its device.
        enabled: ``trainer.accel``: False runs every definition.
        compiled: ``trainer.compile``: the closed form runs in torch, to be compiled.
        warn: Called with a one-line warning when a fast path disagrees with its definition.
        acts_elsewhere: Why the policy acts in other processes (a collector's workers, which
            load its weights), or None: then no accelerated acting path.

    Attributes:
        closed_form: ``"numpy"``, ``"torch"`` or None (autograd).
        acting: ``"numpy"`` or None (the policy's own ``act``).
        flat: Whether an elementwise optimizer gets the parameters in flat buffers.
        summary: One line: which path runs for the update, acting and the parameters, and why.
    """

    def __init__(
        self,
        loss: Loss,
        *,
        enabled: bool = True,
        compiled: bool = False,
        warn: Warn = warn_on_stderr,
        acts_elsewhere: str | None = None,
    ):
        self.loss, self.warn, self.compiled = loss, warn, compiled
        off = "trainer.accel=false"
        if not enabled:
            update_reason: str | None = off
        else:
            update_reason = sac_closed_form(loss) if isinstance(loss, SACLoss) else ppo_closed_form(loss)
        self.closed_form: str | None = None
        if update_reason is None:
            numpy_update = isinstance(loss, PPOLoss) and loss.value_clip is None and not compiled
            numpy_update = numpy_update and on_cpu_float32(*cast(nn.Module, loss).parameters())
            self.closed_form = "numpy" if numpy_update else "torch"
        acting_reason = off if not enabled else acts_elsewhere or numpy_acting(loss.policy)
        self.acting: str | None = "numpy" if acting_reason is None else None
        flat_reason = off if not enabled else own_modules(loss)
        self.flat = flat_reason is None
        if self.closed_form:
            update = f"closed-form gradients in {self.closed_form}, checked against autograd on the first minibatch"
        else:  # why not, where a closed form exists for the algorithm
            update = "autograd" + _why(update_reason if not enabled or isinstance(loss, PPOLoss | SACLoss) else None)
        acting = "numpy" if self.acting else "the policy's own act" + _why(acting_reason)
        parameters = "flat buffers" if self.flat else "one by one" + _why(flat_reason)
        self.summary = f"accel: update by {update}; acting by {acting}; parameters {parameters}"

    @property
    def flatten(self) -> Flatten | None:
        """How an elementwise optimizer lays out the parameters (None: one by one)."""
        if not self.flat:
            return None
        names = {id(p): name for name, p in cast(nn.Module, self.loss).named_parameters()}
        return cast(Flatten, functools.partial(FlatParameters, names=names))

    def gradients(self, optimizers: Optimizers, compile_options: dict[str, Any] | None = None) -> Gradients:
        """The run's :class:`rlplat.trainer.Gradients`, over ``optimizers`` (built with
        :attr:`flatten`): the checked closed form, or :class:`rlplat.trainer.Autograd`.

        Args:
            optimizers: The loss's optimizers.
            compile_options: ``torch.compile``'s options when the closed form is to be
                compiled (``trainer.compile=true``); None runs it eagerly.
        """
        autograd = Autograd(self.loss, optimizers)
        if self.closed_form is None:
            return autograd
        fast = self._closed_form(self.closed_form)
        if compile_options is None:
            fast = torch.inference_mode()(fast)
        else:  # compiled under no_grad: dynamo cannot trace inference mode (the version counters of its tensors)
            fast = torch.compile(torch.no_grad()(fast), dynamic=False, options=compile_options)
        named = {name: p for name, p in cast(nn.Module, self.loss).named_parameters() if p.requires_grad}
        return CheckedGradients(fast, autograd, named, f"the closed-form update in {self.closed_form}", self.warn)

    def fast_updates(self) -> dict[str, Update]:
        """Every closed-form update that covers the loss (``numpy`` and ``torch``, where each
        applies), unchecked and eager: for :func:`rlplat.testing.check_loss` to compare each
        with autograd."""
        if self.closed_form is None:
            return {}
        kinds = ("numpy", "torch") if self.closed_form == "numpy" else ("torch",)
        return {kind: torch.inference_mode()(self._closed_form(kind)) for kind in kinds}

    def _closed_form(self, kind: str) -> Update:
        loss = self.loss
        if isinstance(loss, SACLoss):
            return SACGradients(loss)
        return NumpyPPOGradients(cast(PPOLoss, loss)) if kind == "numpy" else PPOGradients(cast(PPOLoss, loss))

    def policy(self) -> Policy:
        """The policy the collector and evaluation act with: the loss's own, or the numpy one
        standing in for it when it agrees with it on a batch of observations (else with a
        warning, the loss's own)."""
        policy = self.loss.policy
        if self.acting is None:
            return policy
        if isinstance(policy, SquashedGaussianPolicy):
            sac = NumpySACPolicy(policy)
            numpy_policy: Policy = sac
            fast, reference = sac.actor_function(False), functools.partial(policy.actor, deterministic=False)
            torso = policy.actor.torso
        else:
            agent = cast(ActorCritic, policy)
            numpy_agent = NumpyActorCritic(agent, policy_only=True)
            numpy_policy = NumpyActingPolicy(numpy_agent.act_function)
            fast, reference = numpy_agent.act_function(False), functools.partial(agent.act, deterministic=False)
            torso = agent.actor_torso
        inputs = cast(MLP, torso).linears[0].in_features
        observation = torch.randn(8, inputs, generator=torch.Generator().manual_seed(0))
        difference = compare_acting(fast, reference, observation)
        if difference is not None:
            self.warn(f"acting in numpy disagrees with the policy: {difference}; acting with the policy itself")
            self.acting = None
            return policy
        return numpy_policy


def _why(reason: str | None) -> str:
    return "" if reason is None else f" ({reason})"
