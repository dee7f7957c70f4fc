"""Networks: registered torsos (observation -> features) and the heads rlplat puts on top."""

from rlplat.networks import mlp  # noqa: F401  (registers the built-in entries)
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.heads import CategoricalHead, GaussianHead

__all__ = ["ActorCritic", "CategoricalHead", "GaussianHead"]
