"""Q-networks over torsos from the network registry: discrete (optionally dueling) and
continuous-action critics, and the twin-critic ensemble of TD3 and SAC."""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from torch import Tensor, nn

from rlplat.networks.actor_critic import NetworkFactory
from rlplat.networks.ensemble import StackedMLP, stackable


def _head(in_features: int, out_features: int) -> nn.Linear:
    linear = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(linear.weight, gain=1.0)
    nn.init.zeros_(linear.bias)
    return linear


class DiscreteQ(nn.Module):
    """Q(s, .) for Discrete actions: ``[N, *obs] -> [N, num_actions]``.

    With ``dueling`` (Wang et al. 2016) ``Q = V(s) + A(s, a) - mean_a A(s, a)``.

    Args:
        network: Torso factory for the observation space.
        num_actions: Number of discrete actions.
        features: Width of the torso output.
        dueling: Separate value and advantage streams.
    """

    def __init__(self, network: NetworkFactory, num_actions: int, features: int, dueling: bool) -> None:
        super().__init__()
        self.torso = network(features)
        self.dueling = dueling
        self.advantage = _head(features, num_actions)
        self.value = _head(features, 1) if dueling else None

    def forward(self, observation: Tensor) -> Tensor:
        h = self.torso(observation)
        advantage = self.advantage(h)
        if self.value is None:
            return advantage
        return self.value(h) + advantage - advantage.mean(-1, keepdim=True)


def state_action_space(
    observation_space: gymnasium.spaces.Box, action_space: gymnasium.spaces.Box
) -> gymnasium.spaces.Box:
    """The flat Box of ``concat(observation, action)``, the input of a continuous critic."""
    size = int(np.prod(observation_space.shape)) + int(np.prod(action_space.shape))
    return gymnasium.spaces.Box(-np.inf, np.inf, (size,), np.float32)


def encodes_observations(observation_space: gymnasium.Space) -> bool:
    """Whether a continuous critic over ``observation_space`` encodes the observation with its
    torso before the action joins (images, frame stacks, dictionaries: :class:`EncodedCritic`)
    rather than taking ``concat(observation, action)`` (flat vectors)."""
    return isinstance(observation_space, gymnasium.spaces.Dict) or (
        isinstance(observation_space, gymnasium.spaces.Box) and len(observation_space.shape) > 1
    )


class EncodedCritic(nn.Module):
    """``Q(s, a) = head(concat(torso(s), a))``: the torso (a CNN, a multi-input network)
    encodes the observation, then a Linear + ReLU layer of ``features`` units and a Linear
    output take the features with the action (as Stable-Baselines3's critics over a features
    extractor). ``[N, *obs], [N, A] -> [N, 1]``.

    Args:
        torso: The observation encoder, ``[N, *obs] -> [N, features]``.
        features: Width of the torso's output and of the hidden layer.
        action_dim: A.
    """

    def __init__(self, torso: nn.Module, features: int, action_dim: int) -> None:
        super().__init__()
        self.torso = torso
        self.hidden = _head(features + action_dim, features)
        self.out = _head(features, 1)

    def forward(self, observation: Tensor, action: Tensor) -> Tensor:
        h = torch.relu(self.hidden(torch.cat([self.torso(observation), action], -1)))
        return self.out(h)


class ContinuousQEnsemble(nn.Module):
    """K independent critics Q_k(s, a) for Box actions: ``[N, *obs], [N, A] -> [K, N, 1]``.

    Critics over torsos that are exactly :class:`rlplat.networks.mlp.MLP` run together as one
    :class:`rlplat.networks.ensemble.StackedMLP`; other torsos run one after the other. With
    ``action_dim`` each critic is an :class:`EncodedCritic` (image or dictionary observations).

    Args:
        network: Torso factory, called with the concatenated state-action space; with
            ``action_dim``, with the observation space.
        num_critics: K (2 for the twin critics of TD3 and SAC, 1 for DDPG).
        features: Width of each torso output.
        action_dim: A, for critics that encode the observation before the action joins;
            None: critics over ``concat(observation, action)``.
    """

    def __init__(self, network: NetworkFactory, num_critics: int, features: int, action_dim: int | None = None) -> None:
        super().__init__()
        if action_dim is not None:
            self.stacked = None
            encoded = [EncodedCritic(network(features), features, action_dim) for _ in range(num_critics)]
            self.critics: nn.ModuleList | None = nn.ModuleList(encoded)
            self.encoded = True
            return
        self.encoded = False
        pairs = [(network(features), _head(features, 1)) for _ in range(num_critics)]
        torsos, heads = [t for t, _ in pairs], [h for _, h in pairs]
        self.stacked = StackedMLP(torsos, heads) if stackable(torsos) else None
        self.critics = None if self.stacked else nn.ModuleList(nn.Sequential(t, h) for t, h in pairs)

    def forward(self, observation: Tensor, action: Tensor, frozen: bool = False, first: int | None = None) -> Tensor:
        """Q-values ``[K, N, 1]``.

        Args:
            observation: ``[N, *obs]`` float32.
            action: ``[N, A]`` float32.
            frozen: No gradient reaches the critics' parameters (an actor's loss); it still
                reaches ``action``.
            first: Only the first ``first`` critics (``[first, N, 1]``), e.g. TD3's actor loss.
        """
        if self.encoded:
            inputs: tuple[Tensor, ...] = (observation, action)
        else:
            x = torch.cat([observation.flatten(1), action], dim=-1)
            if self.stacked is not None:
                return self.stacked(x, detach=frozen, first=first)
            inputs = (x,)
        assert self.critics is not None
        critics = list(self.critics)[:first]
        if not frozen:
            return torch.stack([critic(*inputs) for critic in critics])
        parameters = [p for critic in critics for p in critic.parameters() if p.requires_grad]
        for p in parameters:
            p.requires_grad_(False)
        try:
            return torch.stack([critic(*inputs) for critic in critics])
        finally:
            for p in parameters:
                p.requires_grad_(True)
