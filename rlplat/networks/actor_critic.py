"""Actor-critic agent: torsos from the network registry, policy and value heads on top."""

from __future__ import annotations

import gymnasium
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.networks.base import NetworkFactory
from rlplat.networks.heads import CategoricalHead, GaussianHead, MultiCategoricalHead
from rlplat.registry import ConfigError


class ActorCritic(nn.Module):
    """Policy pi(a|s) and state value V(s) over torsos built by the network registry.

    Args:
        observation_space: The env's single observation space.
        action_space: ``Box`` (Gaussian head), ``Discrete`` (categorical head), or a
            one-dimensional ``MultiDiscrete`` or ``MultiBinary`` (a categorical per dim).
        network: Factory for the configured torso given its output width.
        features: Width of each torso's output, the input of the heads.
        share_torso: One torso for both heads (as in Atari A2C) instead of two.
        log_std_init: Initial log std of the Gaussian head (Box actions only).
        head_features: Width of the heads' input when something other than the torsos
            feeds them (a recurrent core: :mod:`rlplat.networks.recurrent`); None: ``features``.

    Raises:
        ConfigError: for an action space that is neither Box nor Discrete.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        features: int = 64,
        share_torso: bool = False,
        log_std_init: float = 0.0,
        head_features: int | None = None,
    ) -> None:
        super().__init__()
        self.actor_torso = network(features)
        self.critic_torso = self.actor_torso if share_torso else network(features)
        features = features if head_features is None else head_features
        if isinstance(action_space, gymnasium.spaces.Box):
            self.head: GaussianHead | CategoricalHead | MultiCategoricalHead = GaussianHead(
                features, int(action_space.shape[0]), log_std_init
            )
        elif isinstance(action_space, gymnasium.spaces.Discrete):
            self.head = CategoricalHead(features, int(action_space.n))
        elif isinstance(action_space, gymnasium.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
            self.head = MultiCategoricalHead(features, [int(n) for n in action_space.nvec])
        elif isinstance(action_space, gymnasium.spaces.MultiBinary) and len(action_space.shape) == 1:
            self.head = MultiCategoricalHead(features, [2] * int(action_space.shape[0]))
        else:
            raise ConfigError(
                "actor-critic supports Box, Discrete, and one-dimensional MultiDiscrete and MultiBinary action "
                f"spaces, got {action_space}"
            )
        self.value_head = nn.Linear(features, 1)
        nn.init.orthogonal_(self.value_head.weight, gain=1.0)
        nn.init.zeros_(self.value_head.bias)

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Sample (or, deterministic, take the mode of) pi(.|s). Called under
        ``torch.inference_mode`` (the :class:`rlplat.collectors.base.Policy` contract).

        Args:
            observation: ``[N, *obs_shape]`` float32.
            deterministic: Take the distribution's mode instead of sampling.

        Returns:
            ``(action, log_prob)``: action ``[N, action_dim]`` float (Box) or ``[N]`` int64
            (Discrete), log_prob ``[N]``.
        """
        return self.head.sample(self.actor_torso(observation), deterministic)

    def log_prob_entropy(self, observation: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``[N]`` log pi(a|s) and ``[N]`` entropy of pi(.|s), with gradients."""
        return self.head.log_prob_entropy(self.actor_torso(observation), action)

    def log_prob_entropy_value(self, observation: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`log_prob_entropy` and :meth:`value` together, with gradients: ``[N]``
        log pi(a|s), ``[N]`` entropy and ``[N, 1]`` V(s). A shared torso runs once (for a
        CNN, half the arithmetic of calling both)."""
        features = self.actor_torso(observation)
        log_prob, entropy = self.head.log_prob_entropy(features, action)
        critic = features if self.critic_torso is self.actor_torso else self.critic_torso(observation)
        return log_prob, entropy, F.linear(critic, self.value_head.weight, self.value_head.bias)

    def value(self, observation: Tensor) -> Tensor:
        """``[N, *obs_shape]`` -> ``[N, 1]`` V(s), with gradients."""
        return F.linear(self.critic_torso(observation), self.value_head.weight, self.value_head.bias)
