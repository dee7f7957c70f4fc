"""Shared part of the on-policy actor-critic losses: the agent and GAE preprocessing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import gymnasium
import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.hooks import RemovableHandle

from rlplat import keys
from rlplat.functional import generalized_advantage_estimate
from rlplat.functional.sequences import episode_sequences
from rlplat.losses.addons.base import WeightedAddon, addon_terms
from rlplat.losses.base import LossModule
from rlplat.networks.actor_critic import ActorCritic, NetworkFactory
from rlplat.networks.base import network_core
from rlplat.networks.recurrent import RecurrentActorCritic
from rlplat.registry import ConfigError, check_in_range


def check_unit_interval(**values: float) -> None:
    """Raise ConfigError naming ``loss.<key>`` for any value outside [0, 1] (or null)."""
    for name, value in values.items():
        check_in_range(f"loss.{name}", value, 0, 1)


class Steps(NamedTuple):
    """A minibatch's steps and the networks' outputs on them (:meth:`ActorCriticLoss.policy_value_terms`).

    Attributes:
        batch: ``[M]`` the steps a loss averages over: the minibatch itself (``[N]``
            transitions), or a recurrent policy's sequences ``[N, P]`` without padding and
            burn-in (M = ``mask.sum()``).
        log_prob: ``[M]`` log pi(a|s), with gradients.
        entropy: ``[M]`` entropy of pi(.|s), with gradients.
        advantage: ``[M]`` advantages, normalised when ``normalize_advantage``.
        value: ``[M, 1]`` V(s), with gradients.
    """

    batch: TensorDict
    log_prob: Tensor
    entropy: Tensor
    advantage: Tensor
    value: Tensor


class ActorCriticLoss(LossModule):
    """Base of on-policy losses: owns an :class:`ActorCritic` and adds GAE to rollouts.

    With a recurrent core configured (``network.core=lstm|gru``) the agent is a
    :class:`RecurrentActorCritic`: the loss then reads sequences ``[N, P]`` (the buffer's
    ``sequence_length``, with ``mask`` and ``burn_in``), starts each from the state the
    collector stored (``recurrent_state``), and averages over the masked steps.

    Args:
        observation_space: The env's single observation space (supplied by rlplat).
        action_space: Box, Discrete, or one-dimensional MultiDiscrete or MultiBinary
            (supplied by rlplat).
        network: Factory of the configured torso (supplied by rlplat).
        gamma: Discount factor.
        gae_lambda: GAE lambda (1 gives Monte-Carlo advantages with bootstraps).
        features: Width of the torso output the heads read.
        share_torso: One torso for actor and critic.
        log_std_init: Initial log std of the Gaussian policy (Box actions).
        normalize_advantage: Normalise advantages per minibatch.
        entropy_coef: Weight of the entropy bonus.
        value_coef: Weight of the value loss.

    Attributes:
        on_policy: True: learns from the latest rollout only (a rollout buffer).
        action_spaces: The action-space types it acts in.
        sequence_length: 1: samples are single transitions (a recurrent agent takes
            sequences of any length: ``recurrent``).
        in_keys: The keys of a batch the loss reads; the trainer buffers only these.
        recurrent_cores: True: ``network.core`` may put a recurrent core after the torsos.
        recurrent: Whether this loss's agent has one.
        takes_addons: True: ``loss.addons`` may add policy-loss terms
            (:mod:`rlplat.losses.addons`), to a feed-forward agent.
        addons: The add-ons :meth:`attach_addons` gave it (none by default). Each adds
            ``loss_<name>`` and ``<name>`` to the output of every call, after ``forward``
            (a forward hook), whatever the subclass's ``forward`` returns.

    Raises:
        ConfigError: if gamma or gae_lambda is outside [0, 1].
    """

    on_policy = True
    sequence_length = 1
    recurrent_cores = True
    takes_addons = True
    in_keys: tuple[NestedKey, ...] = (keys.OBSERVATION, keys.ACTION, keys.ADVANTAGE, keys.VALUE_TARGET)
    action_spaces = (
        gymnasium.spaces.Box,
        gymnasium.spaces.Discrete,
        gymnasium.spaces.MultiDiscrete,
        gymnasium.spaces.MultiBinary,
    )

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float,
        gae_lambda: float,
        features: int,
        share_torso: bool,
        log_std_init: float,
        normalize_advantage: bool,
        entropy_coef: float,
        value_coef: float,
    ) -> None:
        super().__init__()
        check_unit_interval(gamma=gamma, gae_lambda=gae_lambda)
        core = network_core(network)
        self.agent: ActorCritic = (
            ActorCritic(
                observation_space,
                action_space,
                network,
                features=features,
                share_torso=share_torso,
                log_std_init=log_std_init,
            )
            if core is None
            else RecurrentActorCritic(
                observation_space,
                action_space,
                network,
                core,
                features=features,
                share_torso=share_torso,
                log_std_init=log_std_init,
            )
        )
        self.recurrent = core is not None
        if self.recurrent:  # sequences are cut at episode ends and start from the collector's state
            self.in_keys = (*self.in_keys, keys.RECURRENT_STATE, keys.NEXT_DONE)
        self.policy = self.agent
        # the latest rollout's value diagnostics, logged beside the losses of its updates
        self.rollout_diagnostics: dict[str, Tensor] = {}
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.normalize_advantage = normalize_advantage
        self.entropy_coef = entropy_coef
        self.value_coef = value_coef
        self.addons: tuple[WeightedAddon, ...] = ()
        self._addons_hook: RemovableHandle | None = None

    def check_addons(self, names: Sequence[str]) -> None:
        """Raise ConfigError when the add-ons ``names`` cannot join this loss: its agent is
        recurrent, its minibatches sequences, and add-ons compare single-step policies."""
        if names and self.recurrent:
            raise ConfigError(
                f"loss.addons ({', '.join(names)}): add-ons compare single-step policies, and this policy is "
                "recurrent (network.core); set network.core=null, or leave loss.addons empty"
            )

    def attach_addons(self, addons: Sequence[WeightedAddon]) -> None:
        """Add the terms of ``addons`` to every later call's output (after ``forward``): each
        ``loss_<name>`` (``coef * term``, trained on) and ``<name>`` (the term, a diagnostic),
        computed on the minibatch with ``agent`` (:func:`rlplat.losses.addons.base.addon_terms`).

        Raises:
            ConfigError: as :meth:`check_addons`.
        """
        self.check_addons([addon.name for addon in addons])
        self.addons = tuple(addons)
        if self.addons and self._addons_hook is None:
            self._addons_hook = self.register_forward_hook(_with_addon_terms)

    def policy_value_terms(self, batch: TensorDict) -> Steps:
        """A minibatch's steps with their log pi(a|s), entropy and V(s) (with gradients; a
        shared torso runs once) and advantages, normalised over those steps when
        ``normalize_advantage``.

        Args:
            batch: ``[N]`` transitions, or ``[N, P]`` sequences for a recurrent agent.
        """
        if not self.recurrent:
            log_prob, entropy, value = self.agent.log_prob_entropy_value(batch[keys.OBSERVATION], batch[keys.ACTION])
            return Steps(batch, log_prob, entropy, self.advantages(batch), value)
        mask = batch[keys.MASK]
        log_prob, entropy, value = self.recurrent_agent.sequence_log_prob_entropy_value(
            batch[keys.OBSERVATION],
            batch[keys.ACTION],
            batch[keys.RECURRENT_STATE][:, 0],
            batch[keys.BURN_IN],
            mask,
        )
        steps = batch[mask]
        return Steps(steps, log_prob, entropy, self.advantages(steps), value)

    @property
    def recurrent_agent(self) -> RecurrentActorCritic:
        """The agent, when :attr:`recurrent`."""
        assert isinstance(self.agent, RecurrentActorCritic), "only a recurrent loss has a recurrent agent"
        return self.agent

    @torch.no_grad()
    def rollout_log_prob(self, rollout: TensorDict) -> tuple[TensorDict, Tensor]:
        """The current policy's log pi(a|s) of a whole ``[T, B]`` rollout's actions.

        Returns:
            ``(steps [T * B], log_prob [T * B])``: the steps in the order of ``log_prob``
            (a recurrent agent runs over the rollout's episodes from the collector's state at
            the rollout's start, and orders them by env, then time).
        """
        if not self.recurrent:
            data = rollout.reshape(-1)
            return data, self.agent.log_prob_entropy(data[keys.OBSERVATION], data[keys.ACTION])[0]
        T, B = rollout.batch_size
        sequences = episode_sequences(rollout[keys.NEXT_DONE], T)
        data = rollout.reshape(-1)[sequences.steps]  # [S, T]
        data[keys.MASK], data[keys.BURN_IN] = sequences.mask, sequences.burn_in
        log_prob, _, _ = self.recurrent_agent.sequence_log_prob_entropy_value(
            data[keys.OBSERVATION],
            data[keys.ACTION],
            data[keys.RECURRENT_STATE][:, 0],
            data[keys.BURN_IN],
            data[keys.MASK],
        )
        return data[sequences.mask], log_prob

    def advantages(self, batch: TensorDict) -> Tensor:
        """A minibatch's ``[N]`` advantages, normalised when ``normalize_advantage``."""
        advantage = batch[keys.ADVANTAGE].squeeze(-1)
        return normalize(advantage) if self.normalize_advantage else advantage

    def policy_gradient_terms(self, batch: TensorDict, value_scale: float) -> TensorDict:
        """The loss output of a vanilla policy gradient with a regressed value (A2C, REINFORCE,
        IMPALA): ``loss_objective = -mean(log pi(a|s) * A)``, ``loss_critic = value_coef *
        value_scale * mean((V(s) - value_target)^2)``, ``loss_entropy``; diagnostics ``entropy``
        and the rollout's (``rollout_diagnostics``).

        Args:
            batch: ``[N]`` minibatch (``[N, P]`` sequences for a recurrent agent) with
                ``advantage`` and ``value_target``.
            value_scale: The loss's own factor of the squared error (0.5 for a half MSE).
        """
        batch, log_prob, entropy, advantage, value = self.policy_value_terms(batch)  # [M] each, value [M, 1]
        pg_loss = -(log_prob * advantage).mean()
        return self.loss_output(pg_loss, value_scale * F.mse_loss(value, batch[keys.VALUE_TARGET]), entropy)

    def loss_output(self, pg_loss: Tensor, v_loss: Tensor, entropy: Tensor, **diagnostics: Tensor) -> TensorDict:
        """The loss's output TensorDict (batch size ``[]``): ``loss_objective`` = ``pg_loss``,
        ``loss_critic`` = ``value_coef * v_loss``, ``loss_entropy`` and ``entropy`` from the
        ``[M]`` per-step ``entropy`` (:meth:`entropy_terms`), the rollout's diagnostics, then
        ``diagnostics``."""
        loss_entropy, entropy = self.entropy_terms(entropy)
        terms = {"loss_objective": pg_loss, "loss_critic": self.value_coef * v_loss, "loss_entropy": loss_entropy}
        return TensorDict({**terms, "entropy": entropy, **self.rollout_diagnostics, **diagnostics}, batch_size=[])

    def entropy_terms(self, entropy: Tensor) -> tuple[Tensor, Tensor]:
        """``[N]`` entropies -> ``loss_entropy = -c_e * mean(H)`` (0-dim) and the mean entropy,
        detached (the diagnostic). With ``entropy_coef = 0`` the term is a constant zero, so
        that the backward pass does not go through the entropy's graph (its gradient would
        be zero)."""
        if self.entropy_coef == 0:
            mean = entropy.detach().mean()
            return torch.zeros_like(mean), mean
        mean = entropy.mean()
        return -self.entropy_coef * mean, mean.detach()

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """``actor``: the policy's torso, core and head (and the shared torso and core when
        ``share_torso``); ``critic``: the value torso, core and head."""
        agent = self.agent
        actor = [*agent.actor_torso.parameters(), *agent.head.parameters()]
        critic_torso = [] if agent.critic_torso is agent.actor_torso else [*agent.critic_torso.parameters()]
        if isinstance(agent, RecurrentActorCritic):  # each core goes with its torso
            actor += agent.actor_core.parameters()
            if agent.critic_core is not agent.actor_core:
                critic_torso += agent.critic_core.parameters()
        return {"actor": actor, "critic": [*critic_torso, *agent.value_head.parameters()]}

    def after_update(self) -> None:
        """Nothing to do after a gradient step: on-policy losses have no target networks."""

    @torch.no_grad()
    def state_values(self, rollout: TensorDict) -> tuple[Tensor, Tensor]:
        """V(s_t) and V(s_{t+1}), each ``[T, B, 1]``, from one batched forward; a truncated
        step's V(s_{t+1}) is the value of its true final observation. A recurrent agent
        values s_t from the state the collector acted from, and s_{t+1} from the state after
        that step (before the reset at an episode's end)."""
        T, B = rollout.batch_size
        if self.recurrent:
            data = rollout.reshape(-1)
            value, state = self.recurrent_agent.step_values(data[keys.OBSERVATION], data[keys.RECURRENT_STATE])
            next_value, _ = self.recurrent_agent.step_values(data[keys.NEXT_OBSERVATION], state)
            return value.view(T, B, 1), next_value.view(T, B, 1)
        observations = torch.cat([rollout[keys.OBSERVATION], rollout[keys.NEXT_OBSERVATION]]).flatten(0, 1)
        values = self.agent.value(observations).view(2 * T, B, 1)
        return values[:T], values[T:]

    @torch.no_grad()
    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add ``state_value``, ``advantage`` (GAE) and ``value_target`` to a ``[T, B]`` rollout."""
        state_value, next_state_value = self.state_values(rollout)
        advantage, value_target = generalized_advantage_estimate(
            rollout[keys.NEXT_REWARD],
            state_value,
            next_state_value,
            rollout[keys.NEXT_DONE],
            rollout[keys.NEXT_TERMINATED],
            self.gamma,
            self.gae_lambda,
        )
        rollout[keys.STATE_VALUE] = state_value
        rollout[keys.ADVANTAGE] = advantage
        rollout[keys.VALUE_TARGET] = value_target
        self.rollout_diagnostics = value_diagnostics(state_value, value_target)
        return rollout


def _with_addon_terms(loss: nn.Module, args: tuple[TensorDict], output: TensorDict) -> TensorDict:
    """Forward hook of :meth:`ActorCriticLoss.attach_addons`: the loss's output with its
    add-ons' terms on the minibatch ``args[0]``."""
    actor_critic = cast(ActorCriticLoss, loss)
    own = list(output.keys())
    output.update(addon_terms(actor_critic.addons, actor_critic.agent, args[0], own))
    return output


def value_diagnostics(value: Tensor, value_target: Tensor) -> dict[str, Tensor]:
    """A rollout's ``explained_variance``, 1 - Var[V_target - V] / Var[V_target] (1: the
    values explain the targets; 0: no better than their mean; nan for constant targets), and
    ``value_mean``, the mean V(s): 0-dim float32, computed once per rollout from the values
    before its updates, as Stable-Baselines3's ``train/explained_variance``.

    Args:
        value: ``[T, B, 1]`` V(s_t) of the rollout.
        value_target: ``[T, B, 1]`` the targets V is regressed on.
    """
    variance = value_target.var(correction=0)
    return {
        "explained_variance": 1.0 - (value_target - value).var(correction=0) / variance,
        "value_mean": value.mean(),
    }


def normalize(advantage: Tensor) -> Tensor:
    """Zero mean, unit std (unbiased) over the minibatch; unchanged for a single sample."""
    if advantage.numel() < 2:
        return advantage
    std, mean = torch.std_mean(advantage)  # one pass for both
    return (advantage - mean) / (std + 1e-8)
