"""What a loss entry implements (entry-point group ``rlplat.losses``): an algorithm as the
trainer drives it.

A loss builds the networks it needs from the configured torso, owns no optimizer and
computes no rollout. The trainer's loop, for every algorithm::

    for rollout in collector:                  # [T, B]
        rollout = loss.preprocess(rollout)      # e.g. GAE; nothing for off-policy losses
        buffer.extend(rollout)
        for batch in buffer.batches():          # [N], or [N, L] windows
            losses = loss(batch)                # TensorDict of loss_* terms + diagnostics
            sum(loss_* terms).backward(); step one optimizer per param group
            loss.after_update()                 # e.g. target networks

* :class:`LossFactory`: what the entry point names; which arguments rlplat supplies.
* :class:`Loss`: what the built loss provides to the trainer, the collector and the checkpoint.
* :class:`LossModule`: the ``nn.Module`` every built-in loss subclasses, which declares the
  optional members (``in_keys``, ``delayed_groups`` ...) at their defaults; a plugin loss
  subclasses it to set any of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import gymnasium
from tensordict import NestedKey, TensorDict
from torch import nn

from rlplat.collectors.base import Policy
from rlplat.networks.base import NetworkFactory


class LossFactory(Protocol):
    """A loss entry: ``(observation_space, action_space, network, **yaml_kwargs) -> Loss``.

    rlplat supplies the first three arguments, positionally:

    * ``observation_space``: the env's single observation space, transforms applied (a
      ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, or a ``Dict`` of these);
    * ``action_space``: the env's single action space, ``Box`` or ``Discrete``; a loss
      class that acts in only some declares them in ``LossModule.action_spaces`` (read
      before construction; default both), so a bad pairing such as ``algo=dqn env=pendulum``
      fails with a message listing the losses that fit;
    * ``network``: a :data:`rlplat.networks.base.NetworkFactory`, the configured torso:
      ``network(out_features)`` for observations, ``network(out_features, space)`` for
      another input space (e.g. a critic's state-action space); call it once per torso.

    The ``loss`` YAML node supplies every other keyword argument (``gamma``, coefficients,
    ``features`` ...), checked against the signature.

    Raises:
        ConfigError: for a bad YAML value, naming ``loss.<key>``.
    """

    def __call__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        /,
        **kwargs: Any,
    ) -> Loss:
        """Build the loss and the networks it owns (on the CPU; rlplat moves it with ``.to``)."""
        ...


@runtime_checkable
class Loss(Protocol):
    """An algorithm as the trainer sees it (usually an ``nn.Module``).

    Key names follow :mod:`rlplat.keys`; the rollout's keys, shapes and dtypes are listed in
    :mod:`rlplat.collectors.base`.

    Attributes:
        policy: The :class:`rlplat.collectors.base.Policy` the collector and evaluation act
            with; its parameters are among the loss's.
        on_policy: True when the loss learns only from the latest rollout (it needs a buffer
            that serves that, e.g. ``rollout``); False when it learns from replayed data.
        sequence_length: Steps per sample: 1 for single transitions ``[N]``, L > 1 for
            windows ``[N, L]`` of consecutive steps (e.g. n-step returns); the buffer's
            ``sequence_length`` must match.

    The optional members (``in_keys``, ``delayed_groups`` and ``delayed_due``, ``recurrent``,
    and the class attributes ``action_spaces``, ``recurrent_cores`` and
    ``corrects_policy_lag``) are declared, with their defaults, by :class:`LossModule`: a loss
    that sets any of them subclasses it. A loss that only has the members above (structural
    typing) is trained with the defaults.
    """

    policy: Policy
    on_policy: bool
    sequence_length: int

    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add what the loss needs to a fresh rollout, once, before it is buffered.

        Args:
            rollout: ``[T, B]`` rollout from the collector, without gradients.

        Returns:
            The rollout (batch size ``[T, B]``, every input key kept), with added keys such
            as ``state_value`` ``[T, B, 1]``, ``advantage`` ``[T, B, 1]`` and
            ``value_target`` ``[T, B, 1]`` float32 (GAE); may be returned unchanged
            (off-policy losses compute targets from sampled batches).
        """
        ...

    def __call__(self, batch: TensorDict) -> TensorDict:
        """The loss terms of one minibatch, with gradients.

        Args:
            batch: ``[N]`` samples from the buffer, or ``[N, L]`` windows when
                ``sequence_length`` is L > 1, with the keys the rollout and ``preprocess``
                gave it; from a prioritized replay also ``index`` and ``weight``
                (:data:`rlplat.keys.IMPORTANCE_WEIGHT`, ``[N]`` float32 importance weights, by
                which a value-based loss weights its per-sample TD losses).

        Returns:
            A TensorDict with batch size ``[]``: scalar (0-dim) float ``loss_<term>`` tensors,
            which the trainer sums and back-propagates (logged as ``loss/<term>``), and
            scalar diagnostics without gradients (e.g. ``entropy``, ``approx_kl``; logged
            as ``train/<key>``). New keys need no trainer change. One key may be per sample:
            ``td_error`` (:data:`rlplat.keys.TD_ERROR`, ``[N]`` float32 ``|Q(s, a) - y|``,
            detached), which the trainer hands to a prioritized replay and logs as its mean
            ``train/td_error``; a loss for a prioritized replay must return it.

        This is the one definition of the algorithm: the trainer back-propagates the summed
        ``loss_*`` terms with autograd (:class:`rlplat.trainer.Autograd`). For some exact
        built-in losses :mod:`rlplat.accel` computes the same gradients faster, checked
        against this at the start of each run; a subclass always trains through its own
        ``forward``.
        """
        ...

    def after_update(self) -> None:
        """Called after every optimizer step: target-network updates, update counters."""
        ...

    def parameters(self) -> Iterator[nn.Parameter]:
        """Every parameter the loss owns (``nn.Module.parameters``); target networks' take no
        gradient (``requires_grad=False``)."""
        ...

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """The named parameter groups, each stepped by its own optimizer.

        Returns:
            ``{group: parameters}`` with names such as ``actor``, ``critic``, ``q``,
            ``temperature``; every trainable parameter of :meth:`parameters` is in exactly
            one group (a shared torso in one of them). The YAML node ``optim.<group>`` sets
            that group's optimizer and gradient clip; groups without one share the default.
        """
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """Network weights and any other state (exploration counters, adaptive
        coefficients, target-update counters) for the checkpoint, as tensors and plain data
        (``torch.load(weights_only=True)`` must read it back)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any:
        """Restore :meth:`state_dict` (``nn.Module``'s strict loading)."""
        ...


class LossModule(nn.Module):
    """The base of rlplat's losses, and of a plugin loss that sets an optional member: an
    ``nn.Module`` that declares the members rlplat reads beside those of :class:`Loss`, at
    their defaults. A subclass overrides what applies to it, as a class attribute or in its
    ``__init__``; it still implements :class:`Loss` itself.

    A loss that only implements :class:`Loss` (structural typing, not a subclass) is read as
    having every default here; one that defines any of these members without subclassing is
    refused when it is built (:func:`undeclared_reason`), since rlplat would not read it.

    Attributes:
        action_spaces: Class attribute, read before construction: the action-space types
            the loss acts in (a tuple of ``gymnasium.spaces`` classes). Default ``Box`` and
            ``Discrete``. A pairing outside it (``algo=dqn env=pendulum``) fails with a
            message listing the losses that fit.
        recurrent_cores: Class attribute, read before construction: True when
            ``network.core`` (``lstm``, ``gru``) may put a recurrent core after the loss's
            torsos. Default False: a configured core is refused.
        corrects_policy_lag: Class attribute: True when the loss learns correctly from
            rollouts whose ``action_log_prob`` is that of a policy some updates older than its
            own (IMPALA's V-trace: Espeholt et al. 2018). Default False: an on-policy loss
            refuses an asynchronous collector, whose actions lag behind the learner's
            parameters.
        in_keys: The keys its batches are read for (after ``preprocess``), a tuple of
            :data:`tensordict.NestedKey`; the trainer then buffers only these, so that
            shuffling and splitting minibatches moves nothing else (rlplat's on-policy losses
            and SAC declare it). Default None: the buffer holds every key.
        recurrent: True when this loss's agent has a recurrent core: its batches are then
            ``[N, P]`` sequences of any length of at least 2 (``buffer.sequence_length``),
            whatever ``sequence_length`` says. Default False.
        delayed_groups: Parameter groups (names of :meth:`Loss.param_groups`) stepped only on
            some updates (TD3's actor, every ``policy_delay`` updates: Fujimoto et al. 2018).
            Each gets an optimizer of its own, which the trainer does not step on the other
            updates: a step with a zero gradient would still move the parameters by Adam's
            momentum. Default ``()``.
        delayed_due: Whether the coming update is one that steps ``delayed_groups``; read
            before each optimizer step. Default True (every update).
    """

    action_spaces: ClassVar[tuple[type[gymnasium.Space], ...]] = (gymnasium.spaces.Box, gymnasium.spaces.Discrete)
    recurrent_cores: ClassVar[bool] = False
    corrects_policy_lag: ClassVar[bool] = False
    in_keys: tuple[NestedKey, ...] | None = None
    recurrent: bool = False
    delayed_groups: tuple[str, ...] = ()
    delayed_due: bool = True


def declared(loss: object) -> LossModule | type[LossModule]:
    """Where the optional members of ``loss`` (a built loss, or a loss entry's class) are
    read: ``loss`` itself when it is a :class:`LossModule` or a subclass, else the class
    ``LossModule``, whose class attributes are the defaults."""
    if isinstance(loss, LossModule) or (isinstance(loss, type) and issubclass(loss, LossModule)):
        return loss
    return LossModule


def undeclared_reason(loss: object) -> str | None:
    """Why rlplat would not read some members of ``loss`` (a built loss, or a loss entry's
    class): it defines optional members of :class:`LossModule` without subclassing it, so the
    defaults would be read instead. None for a ``LossModule``, and for a loss that defines
    none of them."""
    if declared(loss) is loss:
        return None
    undeclared = [name for name in inspect.get_annotations(LossModule) if hasattr(loss, name)]
    if not undeclared:
        return None
    what = loss.__name__ if isinstance(loss, type) else type(loss).__name__
    return (
        f"{what} defines {', '.join(undeclared)} without subclassing rlplat.losses.base.LossModule, which "
        "declares them, so rlplat would not read them; subclass LossModule (in place of nn.Module)"
    )
