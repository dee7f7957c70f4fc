"""Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods", algorithm 1)."""

from __future__ import annotations

import gymnasium
import torch
from tensordict import TensorDict
from torch import nn

from rlplat import keys
from rlplat.losses.actor_critic import check_unit_interval
from rlplat.losses.base import LossModule
from rlplat.losses.targets import TargetSchedule, frozen_copy
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.networks.actors import DeterministicActor
from rlplat.networks.exploration import NoisyDeterministicPolicy
from rlplat.networks.q import ContinuousQEnsemble, encodes_observations, state_action_space
from rlplat.registry import check_at_least, check_non_negative


class TD3Loss(LossModule):
    """Clipped double-Q learning, target policy smoothing and delayed actor updates.

    ``a' = clip(mu_target(s') + clip(eps, -c, c), -1, 1)``, ``eps ~ N(0, sigma)``;
    ``y = r + gamma (1 - terminated) min_k Q_target_k(s', a')``;
    ``loss_qvalue = sum_k mean((Q_k(s, a) - y)^2)`` (with a prioritized replay's importance
    weights ``sum_k mean(w (Q_k(s, a) - y)^2)``, Schaul et al. 2016); every ``policy_delay`` updates
    ``loss_actor = -mean(Q_1(s, mu(s)))`` (critics frozen) and the targets move by Polyak tau.

    Args:
        observation_space: Box, supplied by rlplat.
        action_space: Box, supplied by rlplat.
        network: Torso factory, supplied by rlplat (critics get the state-action space).
        gamma: Discount factor.
        tau: Polyak coefficient of the target networks.
        policy_delay: Critic updates per actor (and target) update.
        target_policy_noise: Std sigma of the target policy smoothing noise.
        target_noise_clip: Clip c of that noise.
        num_critics: Critics K; the target takes their minimum.
        exploration_noise: Std of the acting noise, in normalised action units.
        noise_type: ``gaussian`` or ``ou``.
        warmup_frames: Frames of uniform random actions at the start.
        features: Width of each torso output.

    Raises:
        ConfigError: for a non-Box action space or an invalid coefficient.
    """

    action_spaces = (gymnasium.spaces.Box,)
    on_policy = False
    sequence_length = 1

    def __init__(
        self,
        observation_space: gymnasium.spaces.Box,
        action_space: gymnasium.spaces.Box,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        tau: float = 0.005,
        policy_delay: int = 2,
        target_policy_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        num_critics: int = 2,
        exploration_noise: float = 0.1,
        noise_type: str = "gaussian",
        warmup_frames: int = 1000,
        features: int = 256,
    ) -> None:
        super().__init__()
        check_unit_interval(gamma=gamma)
        check_at_least("loss.policy_delay", policy_delay)
        check_at_least("loss.num_critics", num_critics)
        action_dim = int(action_space.shape[0])
        self.actor = DeterministicActor(network, action_dim, features)
        if encodes_observations(observation_space):  # images, dictionaries: encoded, then the action joins
            self.critics = ContinuousQEnsemble(network, num_critics, features, action_dim)
        else:
            critic_space = state_action_space(observation_space, action_space)
            self.critics = ContinuousQEnsemble(lambda out: network(out, critic_space), num_critics, features)
        self.actor_target = frozen_copy(self.actor)
        self.critics_target = frozen_copy(self.critics)
        self.policy = NoisyDeterministicPolicy(self.actor, action_dim, noise_type, exploration_noise, warmup_frames)
        self.targets = TargetSchedule(
            tau, policy_delay, (self.actor_target, self.actor), (self.critics_target, self.critics)
        )
        self.gamma = gamma
        self.policy_delay = policy_delay
        # the actor is stepped on delayed updates only (LossModule.delayed_groups); delayed_due,
        # a bool set after each update, says whether the next is one: a compiled forward has
        # two variants rather than one per value of the update count
        self.delayed_groups = ("actor",) if policy_delay > 1 else ()
        self._set_delayed_due()
        check_non_negative("loss.target_policy_noise", target_policy_noise)
        check_non_negative("loss.target_noise_clip", target_noise_clip, allow_inf=True)  # inf: unclipped
        self.target_policy_noise = target_policy_noise
        self.target_noise_clip = target_noise_clip

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """``actor``: the deterministic policy; ``critic``: the Q ensemble."""
        return {"actor": list(self.actor.parameters()), "critic": list(self.critics.parameters())}

    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Nothing to add: targets are computed from the sampled transitions."""
        return rollout

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` transitions -> ``loss_qvalue``, ``loss_actor`` (0 between delayed updates),
        ``q_mean``; ``td_error``, ``[N]`` float32 ``max_k |Q_k(s, a) - y|`` (detached), for a
        prioritized replay. A batch with ``weight`` (``[N]``) weights each sample's critic loss."""
        observation, action = batch[keys.OBSERVATION], batch[keys.ACTION]
        next_observation = batch[keys.NEXT_OBSERVATION]
        with torch.no_grad():
            next_action = self.actor_target(next_observation)
            if self.target_policy_noise > 0:
                noise = (torch.randn_like(next_action) * self.target_policy_noise).clamp(
                    -self.target_noise_clip, self.target_noise_clip
                )
                next_action = (next_action + noise).clamp(-1.0, 1.0)
            next_q = self.critics_target(next_observation, next_action).min(0).values  # [N, 1]
            not_terminated = (~batch[keys.NEXT_TERMINATED]).float()
            target = batch[keys.NEXT_REWARD] + self.gamma * not_terminated * next_q
        q = self.critics(observation, action)  # [K, N, 1]
        weight = batch.get(keys.IMPORTANCE_WEIGHT, None)
        if weight is None:
            loss_qvalue = (q - target).pow(2).mean((1, 2)).sum()
        else:  # importance-weighted: sum_k mean_n(w_n (Q_k - y)^2)
            loss_qvalue = ((q - target).pow(2).squeeze(-1) * weight).mean(1).sum()

        if self.delayed_due:  # this update is a delayed one
            # the actor's loss must not move the critics
            loss_actor = -self.critics(observation, self.actor(observation), frozen=True, first=1)[0].mean()
        else:
            loss_actor = torch.zeros((), device=q.device)
        return TensorDict(
            {
                "loss_qvalue": loss_qvalue,
                "loss_actor": loss_actor,
                "q_mean": q.detach().mean(),
                keys.TD_ERROR: (q.detach() - target).abs().amax(0).squeeze(-1),  # [N]
            },
            batch_size=[],
        )

    def get_extra_state(self) -> dict[str, int]:
        """Gradient updates counted by the target schedule (checkpointed with the networks)."""
        return {"target_updates": self.targets.updates}

    def set_extra_state(self, state: dict[str, int]) -> None:
        """Restore :meth:`get_extra_state`."""
        self.targets.updates = int(state["target_updates"])
        self._set_delayed_due()

    def after_update(self) -> None:
        """Polyak-update actor and critic targets every ``policy_delay`` updates."""
        self.targets.step()
        self._set_delayed_due()

    def _set_delayed_due(self) -> None:
        """Whether the coming update is a delayed one, from the updates counted so far."""
        self.delayed_due = (self.targets.updates + 1) % self.policy_delay == 0
