"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, "Continuous control with deep
reinforcement learning")."""

from __future__ import annotations

import gymnasium

from rlplat.losses.td3 import TD3Loss
from rlplat.networks.actor_critic import NetworkFactory


class DDPGLoss(TD3Loss):
    """DDPG: TD3 without its three additions (one critic, no target smoothing, no delay).

    ``y = r + gamma (1 - terminated) Q_target(s', mu_target(s'))``;
    ``loss_qvalue = mean((Q(s, a) - y)^2)``; ``loss_actor = -mean(Q(s, mu(s)))``; targets
    move by Polyak tau after every update. Exploration adds Ornstein-Uhlenbeck noise, as in
    the paper, or Gaussian noise.

    Args:
        observation_space: Box, supplied by rlplat.
        action_space: Box, supplied by rlplat.
        network: Torso factory, supplied by rlplat.
        gamma: Discount factor.
        tau: Polyak coefficient of the target networks.
        exploration_noise: Std of the acting noise, in normalised action units.
        noise_type: ``ou`` or ``gaussian``.
        warmup_frames: Frames of uniform random actions at the start.
        features: Width of each torso output.

    Raises:
        ConfigError: for a non-Box action space or an invalid coefficient.
    """

    def __init__(
        self,
        observation_space: gymnasium.spaces.Box,
        action_space: gymnasium.spaces.Box,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        tau: float = 0.005,
        exploration_noise: float = 0.1,
        noise_type: str = "ou",
        warmup_frames: int = 1000,
        features: int = 256,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            network,
            gamma=gamma,
            tau=tau,
            policy_delay=1,
            target_policy_noise=0.0,
            target_noise_clip=0.0,
            num_critics=1,
            exploration_noise=exploration_noise,
            noise_type=noise_type,
            warmup_frames=warmup_frames,
            features=features,
        )
