"""A loss add-on: a hinge penalty on the policy's entropy. rlplat entry ``entropy_floor``.

rlplat calls the entry point as ``EntropyFloor(observation_space, action_space,
load_policy=..., **yaml_kwargs)`` with the keys under ``loss.addons.entropy_floor`` (all but
``coef``, the term's weight, which rlplat reads itself), then calls the add-on on every
minibatch of an on-policy loss (a2c, ppo, ppo_kl, reinforce) and adds ``coef * term`` to
the loss as ``loss_entropy_floor``, logged as ``loss/entropy_floor``, and the term itself as
``train/entropy_floor``.
"""

from __future__ import annotations

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat.losses.addons import PolicyLoader
from rlplat.networks.actor_critic import ActorCritic
from rlplat.registry import ConfigError


class EntropyFloor:
    """``mean_s max(0, floor - H(pi(.|s)))``, in nats: zero while the policy's entropy stays
    above ``floor`` at every state of the minibatch, and a push back up where it falls below
    (unlike an entropy bonus, which pushes at every state).

    Args:
        observation_space: The env's single observation space (rlplat supplies it).
        action_space: The env's single action space (rlplat supplies it).
        load_policy: Loads another run's policy (rlplat supplies it; unused here).
        floor: The entropy, in nats, below which the term grows.

    Raises:
        ConfigError: naming ``loss.addons.entropy_floor.floor`` when it is negative.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        *,
        load_policy: PolicyLoader,
        floor: float = 0.5,
    ) -> None:
        if floor < 0:
            raise ConfigError(f"loss.addons.entropy_floor.floor={floor}: must be >= 0 nats")
        self.floor = float(floor)

    def __call__(self, policy: ActorCritic, batch: TensorDict) -> Tensor:
        """``[N]`` minibatch -> the 0-dim mean hinge over its states, with gradients into the policy."""
        _, entropy = policy.log_prob_entropy(batch["observation"], batch["action"])  # [N]
        return torch.relu(self.floor - entropy).mean()
