"""Networks: registered torsos (observation -> features) and the heads rlplat puts on top."""

from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.heads import CategoricalHead, GaussianHead

__all__ = ["ActorCritic", "CategoricalHead", "GaussianHead"]
