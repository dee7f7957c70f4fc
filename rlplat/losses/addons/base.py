"""What a loss add-on entry implements (entry-point group ``rlplat.loss_addons``): an extra
term of an on-policy loss's policy objective, chosen in YAML.

    loss:
      addons:
        kl_to_reference: {source: <run id, run directory or checkpoint>, coef: 0.1}

Each key of ``loss.addons`` names a registered add-on; its node holds ``coef``, the term's
weight, which rlplat reads itself, and the add-on's own keyword arguments. For every
minibatch the loss adds, beside its own terms,

* ``loss_<name>`` = ``coef * term`` (summed with the other ``loss_*`` terms, so autograd
  trains the policy on it; logged as ``loss/<name>``);
* ``<name>`` = ``term`` unweighted and detached (logged as ``train/<name>``, also with
  ``coef: 0``: a run can measure the term without optimising it).

The losses that take add-ons are the on-policy actor-critic losses
(:class:`rlplat.losses.actor_critic.ActorCriticLoss`: ``a2c``, ``ppo``, ``ppo_kl``,
``reinforce`` and their subclasses), with a feed-forward policy (no ``network.core``).

* :class:`LossAddonFactory`: what the entry point names; which arguments rlplat supplies.
* :class:`LossAddon`: what the built add-on computes.
* :class:`PolicyLoader`: how an add-on gets another run's policy (a reference).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium
import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor

from rlplat.keys import LOSS_PREFIX
from rlplat.networks.actor_critic import ActorCritic
from rlplat.registry import LOSS_ADDONS, ConfigError, PluginError, check_conforms, check_kwargs, closest

COEF = "coef"
"""The key of every add-on node that rlplat reads itself: the term's weight (>= 0)."""


class PolicyLoader(Protocol):
    """Loads the policy of another run, as rlplat supplies it to an add-on (``load_policy``).

    rlplat's loader (:class:`rlplat.build.PolicyFromRun`) takes a run id (looked up in the run's
    own ``tracking.uri``, as ``rlplat-eval`` does), a run directory (its ``final.pt``, else its
    newest checkpoint) or a checkpoint file; rebuilds that run's agent from the checkpoint's own
    config and weights; checks that it reads this run's observations and acts in its action
    space; and returns it frozen (``requires_grad`` false, eval mode), on this run's device. It
    is not a parameter of the loss: no optimizer steps it and no checkpoint holds it.
    """

    def __call__(self, source: str, key: str) -> ActorCritic:
        """The policy of the run ``source`` names.

        Args:
            source: A run id, a run directory or a checkpoint file.
            key: The add-on's YAML key that ``source`` was given under (``source``); rlplat's
                errors name it in full (``loss.addons.<name>.source``).

        Raises:
            ConfigError: naming the key, for a source that does not exist or cannot be read,
                or whose policy does not fit this run (spaces, observation transforms, a
                recurrent or non-actor-critic agent).
        """
        ...


class LossAddonFactory(Protocol):
    """A loss add-on entry: ``(observation_space, action_space, *, load_policy, **yaml) -> LossAddon``.

    rlplat supplies, positionally, the env's single ``observation_space`` and ``action_space``
    (transforms applied), and by keyword ``load_policy``, a :class:`PolicyLoader`. The add-on's
    node in ``loss.addons`` supplies every other keyword argument, checked against the
    signature; its ``coef`` is rlplat's and never passed.

    Raises:
        ConfigError: for a bad YAML value, naming ``loss.addons.<name>.<key>``.
    """

    def __call__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        /,
        *,
        load_policy: PolicyLoader,
        **kwargs: Any,
    ) -> LossAddon:
        """Build the add-on (loading what it needs once, here)."""
        ...


@runtime_checkable
class LossAddon(Protocol):
    """An extra policy-loss term, as the loss calls it on every minibatch.

    An add-on holds no trainable parameters (none of the loss's optimizers would step them)
    and no state a checkpoint must keep: it is built again from its YAML when a run resumes.
    """

    def __call__(self, policy: ActorCritic, batch: TensorDict) -> Tensor:
        """The unweighted term of one minibatch.

        Args:
            policy: The loss's agent (``pi``, with gradients): ``policy.actor_torso`` maps
                observations to features, ``policy.head`` features to the action distribution.
            batch: ``[N]`` transitions holding the loss's ``in_keys`` (``observation``,
                ``action``, ``advantage``, ``value_target``, ...), the steps the loss
                averages over.

        Returns:
            A 0-dim float tensor whose gradient reaches the policy's parameters; rlplat
            multiplies it by ``coef`` (``loss_<name>``) and logs it as ``<name>``.
        """
        ...


@dataclass(frozen=True)
class WeightedAddon:
    """A built add-on with its name (its key under ``loss.addons``) and weight ``coef``."""

    name: str
    term: LossAddon
    coef: float


def addon_names(node: Any) -> list[str]:
    """The names of a ``loss.addons`` node (empty for null or ``{}``), each a registered add-on.

    Raises:
        ConfigError: for a node that is not a mapping of name -> settings, or a name no add-on
            is registered as (listing those that are and the closest).
    """
    if node is None:
        return []
    if not isinstance(node, Mapping):
        raise ConfigError(
            f"loss.addons={node!r}: must be a mapping of add-on name -> its settings, e.g. "
            "{kl_to_reference: {source: <run id>, coef: 0.1}}"
        )
    names = LOSS_ADDONS.names()
    for name, settings in node.items():
        if name not in names:
            suggestion = closest(name, names)
            hint = f" Did you mean {suggestion!r}?" if suggestion else ""
            raise ConfigError(
                f"loss.addons.{name}: no loss add-on is named {name!r}. Valid: {', '.join(names) or '(none)'}.{hint}"
            )
        if not isinstance(settings, Mapping):
            raise ConfigError(f"loss.addons.{name}={settings!r}: must be a mapping of its keys, e.g. {{coef: 0.1}}")
    return list(node)


def check_coef(name: str, settings: Mapping[str, Any]) -> float:
    """The ``coef`` of add-on ``name``: a finite number >= 0.

    Raises:
        ConfigError: naming ``loss.addons.<name>.coef`` when it is missing or not such a number.
    """
    key = f"loss.addons.{name}.{COEF}"
    if COEF not in settings:
        raise ConfigError(f"{key} is required and not set: the term's weight, a number >= 0 (0 logs it only)")
    coef = settings[COEF]
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef) or coef < 0:
        raise ConfigError(f"{key}={coef!r}: must be a finite number >= 0 (0 logs the term without training on it)")
    return float(coef)


def build_addons(
    node: Any,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    load_policy: PolicyLoader,
) -> tuple[WeightedAddon, ...]:
    """The ``loss.addons`` node -> the add-ons, built through :data:`rlplat.registry.LOSS_ADDONS`.

    Args:
        node: ``{name: {coef: c, **kwargs}}``; null or ``{}`` builds none.
        observation_space: The env's single observation space (transforms applied).
        action_space: The env's single action space.
        load_policy: What an add-on loads another run's policy with (:class:`PolicyLoader`).

    Raises:
        ConfigError: for an unknown name, a bad ``coef``, keys the add-on does not take, or
            what the add-on itself refuses, each naming ``loss.addons.<name>...``.
        PluginError: for an add-on's plugin that fails to import or builds something that is
            not a :class:`LossAddon`.
    """
    addons = []
    for name in addon_names(node):
        settings = dict(node[name])
        coef = check_coef(name, settings)
        kwargs = {k: v for k, v in settings.items() if k != COEF}
        target = LOSS_ADDONS.get(name)
        key = f"loss.addons.{name}"
        check_kwargs(key, target, kwargs, supplied=2, reserved=("load_policy",), also_valid=(COEF,), name_key=False)
        term = target(observation_space, action_space, **kwargs, load_policy=_named_keys(load_policy, name))
        check_conforms(LOSS_ADDONS.kind, name, term, LossAddon)
        addons.append(WeightedAddon(name, term, coef))
    return tuple(addons)


def _named_keys(load_policy: PolicyLoader, name: str) -> PolicyLoader:
    """``load_policy`` whose ``key`` is given in full: ``source`` -> ``loss.addons.<name>.source``."""

    def load(source: str, key: str) -> ActorCritic:
        return load_policy(source, f"loss.addons.{name}.{key}")

    return load


def addon_terms(
    addons: Sequence[WeightedAddon], policy: ActorCritic, batch: TensorDict, own: Collection[NestedKey]
) -> dict[str, Tensor]:
    """Each add-on's ``loss_<name>`` (``coef * term``) and ``<name>`` (the term, detached) on a
    minibatch. With ``coef`` 0 the term is computed without gradients and ``loss_<name>`` is a
    constant 0, so that the backward pass skips it.

    Args:
        addons: The loss's add-ons.
        policy: The loss's agent, with gradients.
        batch: The ``[N]`` minibatch.
        own: The keys of the loss's own output, which no add-on may replace.

    Raises:
        PluginError: when an add-on's keys are among ``own`` (an add-on named ``entropy``).
    """
    terms: dict[str, Tensor] = {}
    for addon in addons:
        loss_key = LOSS_PREFIX + addon.name
        clash = [key for key in (loss_key, addon.name) if key in own]
        if clash:
            raise PluginError(
                f"loss add-on {addon.name!r} would replace the loss's own output {', '.join(clash)}; "
                "register the add-on under another name"
            )
        if addon.coef == 0:
            with torch.no_grad():
                value = addon.term(policy, batch)
            terms[loss_key] = torch.zeros_like(value)
        else:
            value = addon.term(policy, batch)
            terms[loss_key] = addon.coef * value
        terms[addon.name] = value.detach()
    return terms
