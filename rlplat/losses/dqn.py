"""Deep Q-Network (Mnih et al. 2015, "Human-level control through deep reinforcement
learning"), with double DQN (van Hasselt et al. 2016), a dueling head (Wang et al. 2016)
and n-step returns (Sutton 1988) as options."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.functional import n_step_return
from rlplat.losses.actor_critic import check_unit_interval
from rlplat.losses.base import LossModule
from rlplat.losses.targets import TargetSchedule, frozen_copy
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.networks.exploration import EpsilonGreedy
from rlplat.networks.q import DiscreteQ
from rlplat.registry import check_at_least


class DQNLoss(LossModule):
    """TD regression of Q(s, a) on an n-step target with a target network.

    ``y = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) Q_target(s_{t+m}, a*)`` with
    ``a* = argmax_a Q_target(s_{t+m}, a)``, or with ``double`` ``argmax_a Q(s_{t+m}, a)``
    from the online network; ``L = mean_n huber(Q(s_t, a_t) - y)``, or with a prioritized
    replay's importance weights ``mean_n(w_n huber_n)`` (Schaul et al. 2016). With ``n_step`` >
    1 the buffer must sample windows of that length (``buffer.sequence_length``).

    Args:
        observation_space: Supplied by rlplat.
        action_space: Discrete, supplied by rlplat.
        network: Torso factory, supplied by rlplat.
        gamma: Discount factor.
        n_step: Steps of the return before bootstrapping.
        double: Double DQN's action selection by the online network.
        dueling: Dueling value/advantage head.
        tau: Polyak coefficient of target updates; 1 copies.
        target_update_interval: Gradient updates between target updates.
        epsilon_start: Exploration epsilon at frame 0.
        epsilon_end: Epsilon after ``exploration_frames``.
        exploration_frames: Frames over which epsilon decays linearly.
        features: Width of the torso output.

    Raises:
        ConfigError: for a non-Discrete action space or an invalid coefficient.
    """

    action_spaces = (gymnasium.spaces.Discrete,)
    on_policy = False

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.spaces.Discrete,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        n_step: int = 1,
        double: bool = True,
        dueling: bool = False,
        tau: float = 1.0,
        target_update_interval: int = 1000,
        epsilon_start: float = 1.0,
        epsilon_end: float = 0.05,
        exploration_frames: int = 10_000,
        features: int = 64,
    ) -> None:
        super().__init__()
        check_unit_interval(gamma=gamma)
        check_at_least("loss.n_step", n_step)
        num_actions = int(action_space.n)
        self.q = DiscreteQ(network, num_actions, features, dueling)
        self.q_target = frozen_copy(self.q)
        self.policy = EpsilonGreedy(self.q, num_actions, epsilon_start, epsilon_end, exploration_frames)
        self.targets = TargetSchedule(tau, target_update_interval, (self.q_target, self.q))
        self.gamma = gamma
        self.n_step = n_step
        self.sequence_length = n_step  # the buffer samples windows of n_step steps
        self.double_q = double  # not `double`, which would hide nn.Module.double()

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """``q``: the online Q-network (the target network takes no gradient)."""
        return {"q": list(self.q.parameters())}

    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Nothing to add: targets are computed from the sampled transitions."""
        return rollout

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` (n_step 1) or ``[N, n_step]`` windows -> ``loss_qvalue``; diagnostics
        ``q_mean``, ``target_mean``, ``epsilon``; ``td_error``, ``[N]`` float32 ``|Q(s_t, a_t) -
        y|`` (detached), for a prioritized replay. A batch with ``weight`` (``[N]``, or ``[N,
        n_step]`` the same along the window) weights each sample's loss by it."""
        windows = batch.batch_dims == 2

        def time_first(key: Any) -> Tensor:  # [L, N, ...]: the window's steps first
            value = batch[key]
            return value.transpose(0, 1) if windows else value.unsqueeze(0)

        with torch.no_grad():
            next_observation = time_first(keys.NEXT_OBSERVATION)
            L, N = next_observation.shape[:2]
            next_observation = next_observation.flatten(0, 1)  # [L * N, *obs]
            next_q_target = self.q_target(next_observation)
            chooser = self.q(next_observation) if self.double_q else next_q_target
            next_value = next_q_target.gather(-1, chooser.argmax(-1, keepdim=True)).view(L, N, 1)
            target = n_step_return(
                time_first(keys.NEXT_REWARD),
                next_value,
                time_first(keys.NEXT_DONE),
                time_first(keys.NEXT_TERMINATED),
                self.gamma,
                self.n_step,
            )[0]  # [N, 1]
        observation, action = batch[keys.OBSERVATION], batch[keys.ACTION]
        if windows:  # the loss is on each window's first step
            observation, action = observation[:, 0], action[:, 0]
        q_taken = self.q(observation).gather(-1, action.unsqueeze(-1))  # [N, 1]
        weight = batch.get(keys.IMPORTANCE_WEIGHT, None)
        if weight is None:
            loss = F.smooth_l1_loss(q_taken, target)
        else:  # importance-weighted: mean_n(w_n huber_n)
            weight = weight[:, 0] if windows else weight  # [N]
            loss = (F.smooth_l1_loss(q_taken, target, reduction="none").squeeze(-1) * weight).mean()
        return TensorDict(
            {
                "loss_qvalue": loss,
                keys.TD_ERROR: (q_taken.detach() - target).abs().squeeze(-1),  # [N]
                "q_mean": q_taken.detach().mean(),
                "target_mean": target.mean(),
                "epsilon": self.policy.epsilon_tensor(),
            },
            batch_size=[],
        )

    def get_extra_state(self) -> dict[str, int]:
        """Gradient updates counted by the target schedule (checkpointed with the networks)."""
        return {"target_updates": self.targets.updates}

    def set_extra_state(self, state: dict[str, int]) -> None:
        """Restore :meth:`get_extra_state`."""
        self.targets.updates = int(state["target_updates"])

    def after_update(self) -> None:
        """Update the target network when due."""
        self.targets.step()
