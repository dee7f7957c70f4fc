"""Actor-critic agent: torsos from the network registry, policy and value heads on top."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import gymnasium
import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.networks.backward import linear_backward, weight_and_bias
from rlplat.networks.base import NetworkFactory
from rlplat.networks.heads import CategoricalHead, GaussianHead, HeadSaved, NumpySaved
from rlplat.networks.mlp import MLP
from rlplat.networks.numpy_passes import NUMPY_IN_PLACE, numpy_linear, numpy_linear_backward, on_cpu_float32
from rlplat.registry import ConfigError


class ActorCritic(nn.Module):
    """Policy pi(a|s) and state value V(s) over torsos built by the network registry.

    Args:
        observation_space: The env's single observation space.
        action_space: ``Box`` (Gaussian head) or ``Discrete`` (categorical head).
        network: Factory for the configured torso given its output width.
        features: Width of each torso's output, the input of the heads.
        share_torso: One torso for both heads (as in Atari A2C) instead of two.
        log_std_init: Initial log std of the Gaussian head (Box actions only).

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
    ) -> None:
        super().__init__()
        self.actor_torso = network(features)
        self.critic_torso = self.actor_torso if share_torso else network(features)
        if isinstance(action_space, gymnasium.spaces.Box):
            self.head: GaussianHead | CategoricalHead = GaussianHead(features, int(action_space.shape[0]), log_std_init)
        elif isinstance(action_space, gymnasium.spaces.Discrete):
            self.head = CategoricalHead(features, int(action_space.n))
        else:
            raise ConfigError(f"actor-critic supports Box and Discrete action spaces, got {action_space}")
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
        return self.act_function(deterministic)(observation)

    def act_function(self, deterministic: bool = False) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
        """:meth:`act` with ``deterministic`` bound, for a stretch of steps over which the
        parameters do not change (see :func:`rlplat.collectors.base.act_function`); :meth:`act`
        calls it, so both return the same values from the same random draws.

        On the CPU, with an :class:`rlplat.networks.mlp.MLP` torso (tanh or ReLU), it computes
        in numpy (the torso's ``numpy_forward_function()``, the head's
        ``numpy_act_function``), drawing its random numbers from torch as the torch path
        does: at one env step's batch a small network's forward pass is a dozen operations of
        a few microseconds' overhead each, numpy's a third of torch's, and more so with envs
        stepped in between, whose code evicts torch's from the CPU's caches (the collection
        row of ``benchmarks/peers.py`` measures the collector with it). Elsewhere, in torch: the
        torso's ``forward_function()`` when it has one, the head's :meth:`act_function`.
        """
        numpy_forward = getattr(self.actor_torso, "numpy_forward_function", None)
        numpy_features = None if numpy_forward is None else numpy_forward()
        numpy_head = None if numpy_features is None else self.head.numpy_act_function(deterministic)
        if numpy_features is not None and numpy_head is not None:
            on_arrays, from_arrays = numpy_head, numpy_features

            def act_in_numpy(observation: Tensor) -> tuple[Tensor, Tensor]:
                return on_arrays(from_arrays(observation.numpy()))

            return act_in_numpy
        forward_function = getattr(self.actor_torso, "forward_function", None)
        features = self.actor_torso if forward_function is None else forward_function()
        head = self.head.act_function(deterministic)

        def act(observation: Tensor) -> tuple[Tensor, Tensor]:
            return head(features(observation))

        return act

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

    @property
    def has_backward(self) -> bool:
        """Whether the written-out backward passes below apply: two torsos (not shared), each
        an :class:`rlplat.networks.mlp.MLP` with tanh or ReLU."""
        torsos = (self.actor_torso, self.critic_torso)
        return self.critic_torso is not self.actor_torso and all(type(t) is MLP and t.has_backward for t in torsos)

    def log_prob_entropy_saving(
        self, observation: Tensor, action: Tensor
    ) -> tuple[Tensor, Tensor, tuple[list[Tensor], HeadSaved]]:
        """:meth:`log_prob_entropy` without autograd (when :attr:`has_backward`): ``[N]``
        log pi(a|s), ``[N]`` entropy, and what :meth:`policy_backward` needs."""
        outputs = cast(MLP, self.actor_torso).forward_saving(observation)
        log_prob, entropy, head_saved = self.head.log_prob_entropy_saving(outputs[-1], action)
        return log_prob, entropy, (outputs, head_saved)

    def policy_backward(
        self, saved: tuple[list[Tensor], HeadSaved], grad_log_prob: Tensor, grad_entropy: float = 0.0
    ) -> None:
        """Set the ``.grad`` of the policy's parameters (actor torso and head; replaced) from
        ``[N]`` dL/d log pi(a_n|s_n) and dL/dH(pi(.|s_n)) (one value for every n)."""
        outputs, head_saved = saved
        cast(MLP, self.actor_torso).backward(outputs, self.head.backward(head_saved, grad_log_prob, grad_entropy))

    def value_saving(self, observation: Tensor) -> tuple[Tensor, list[Tensor]]:
        """:meth:`value` without autograd (when :attr:`has_backward`): ``[N, 1]`` V(s) and
        what :meth:`value_backward` needs."""
        outputs = cast(MLP, self.critic_torso).forward_saving(observation)
        weight, bias = weight_and_bias(self.value_head)
        return torch.addmm(bias, outputs[-1], weight.t()), outputs

    def value_backward(self, outputs: list[Tensor], grad_value: Tensor) -> None:
        """Set the ``.grad`` of the critic torso's and value head's parameters (replaced) from
        ``[N, 1]`` dL/dV(s_n)."""
        cast(MLP, self.critic_torso).backward(outputs, linear_backward(self.value_head, outputs[-1], grad_value))

    @property
    def numpy_passes(self) -> bool:
        """Whether the ``numpy_*`` passes below apply: :attr:`has_backward`, with tanh or ReLU
        torsos and every parameter float32 on the CPU (:mod:`rlplat.networks.numpy_passes`)."""
        torsos = (self.actor_torso, self.critic_torso)
        # every parameter moves with the module (.to()): the value head's weight stands for them
        return (
            self.has_backward
            and all(cast(MLP, t).activation in NUMPY_IN_PLACE for t in torsos)
            and on_cpu_float32(weight_and_bias(self.value_head)[0])
        )

    def numpy_log_prob_entropy_saving(
        self, observation: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, tuple[list[np.ndarray], NumpySaved]]:
        """:meth:`log_prob_entropy_saving` on arrays (when :attr:`numpy_passes`)."""
        outputs = cast(MLP, self.actor_torso).numpy_forward_saving(observation)
        log_prob, entropy, head_saved = self.head.numpy_log_prob_entropy_saving(outputs[-1], action)
        return log_prob, entropy, (outputs, head_saved)

    def numpy_policy_backward(
        self, saved: tuple[list[np.ndarray], NumpySaved], grad_log_prob: np.ndarray, grad_entropy: float = 0.0
    ) -> None:
        """:meth:`policy_backward` on arrays."""
        outputs, head_saved = saved
        grad_features = self.head.numpy_backward(head_saved, grad_log_prob, grad_entropy)
        cast(MLP, self.actor_torso).numpy_backward(outputs, grad_features)

    def numpy_value_saving(self, observation: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """:meth:`value_saving` on arrays: ``[N, 1]`` V(s) and what :meth:`numpy_value_backward` needs."""
        outputs = cast(MLP, self.critic_torso).numpy_forward_saving(observation)
        weight, bias = cast(tuple[np.ndarray, np.ndarray], numpy_linear(self.value_head))
        value = outputs[-1] @ weight
        value += bias
        return value, outputs

    def numpy_value_backward(self, outputs: list[np.ndarray], grad_value: np.ndarray) -> None:
        """:meth:`value_backward` on arrays, from ``[N, 1]`` dL/dV(s_n)."""
        grad_features = numpy_linear_backward(self.value_head, outputs[-1], grad_value)
        cast(MLP, self.critic_torso).numpy_backward(outputs, grad_features)
