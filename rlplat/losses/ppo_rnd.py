"""PPO with Random Network Distillation (Burda et al. 2018, "Exploration by Random Network
Distillation", arXiv 1810.12894): an exploration bonus from the error of a trained predictor
at matching a fixed, randomly initialised target network on the next observation."""

from __future__ import annotations

from typing import Any, cast

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat import keys
from rlplat.envs.base import space_shape
from rlplat.functional import generalized_advantage_estimate
from rlplat.losses.actor_critic import check_unit_interval, value_diagnostics
from rlplat.losses.ppo import PPOLoss
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.registry import ConfigError, check_in_range, check_non_negative

INTRINSIC_REWARD = (keys.NEXT, "intrinsic_reward")
"""``[T, B, 1]`` float32: the normalised intrinsic reward of each transition (preprocess adds it)."""
INTRINSIC_VALUE_TARGET = "intrinsic_value_target"
"""``[T, B, 1]`` float32: the intrinsic head's TD(lambda) target, from non-episodic GAE."""
OBSERVATION_CLIP = 5.0
"""Bound of the target's and predictor's normalised inputs, in standard deviations (the paper's
section 2.4)."""


class PPORNDLoss(PPOLoss):
    """PPO-clip on the combined advantage of an extrinsic and an intrinsic reward (RND).

    A fixed random **target network** f and a trained **predictor** f^ embed the next
    observation s'; the intrinsic reward of a transition is the predictor's error
    ``i = mean_k (f^(x)_k - f(x)_k)^2`` on ``x = clip((s' - mu) / sigma, -5, 5)`` (running
    mean and std of the observations seen, per element). Rewards that a predictor has learned
    to predict fade: states seen often earn little.

    Per rollout (:meth:`preprocess`):

    1. the observation statistics take in the rollout's next observations (so the first rollout
       initialises them; the paper runs a random agent before training for that);
    2. ``i_t`` is divided by a running estimate of the standard deviation of the intrinsic
       discounted return ``R_t = gamma_int * R_{t-1} + i_t`` (one per env, never reset);
    3. two value heads, V_E and V_I, read the critic's features (the agent's value layer has
       two outputs, extrinsic first: ``agent.value`` gives ``[N, 2]``);
    4. GAE on each: the extrinsic one episodic, with ``gamma`` (cut at episode ends,
       bootstrapped at truncations, as PPO); the intrinsic one **non-episodic**, with
       ``gamma_int``, never cut at episode ends (the paper's section 2.3: a game over is
       just another state);
    5. the policy's advantage is ``A = ext_coef * A_E + int_coef * A_I``.

    Per minibatch (:meth:`forward`): PPO-clip on A with V_E's value loss (``loss_objective``,
    ``loss_critic``, ``loss_entropy``), V_I's value loss ``c_v * mean((V_I - R_I)^2) / 2``
    (``loss_intrinsic_critic``), and the predictor's MSE on a random ``update_proportion`` of
    the minibatch's next observations (``loss_predictor``); the diagnostic ``intrinsic_reward``
    is the mean normalised intrinsic reward of the latest rollout (``train/intrinsic_reward``).
    The predictor is its own parameter group, ``predictor`` (``optim.predictor.lr=...``).

    Networks: target and predictor are each a fresh torso of the configured network, so MLP,
    CNN and multi-input torsos all work, over the normalised inputs; the target adds a Linear
    output layer of ``rnd_features``, the predictor two more hidden layers (Linear + ReLU)
    before its Linear output, as in the paper's code. Observations: a Box of floats or of
    uint8 (images) is normalised as a float32 copy; other entries (Discrete, MultiDiscrete,
    MultiBinary, integer token ids) are codes the torso embeds, passed unchanged; a Dict
    observation is handled entry by entry. An image torso with ``normalize_images`` still
    divides its (normalised) input by 255: a fixed scale, which the intrinsic-return
    normalisation takes out. Statistics are buffers (and the per-env discounted returns
    extra state) of ``state_dict()``: a checkpoint holds them and a resume goes on exactly.
    No recurrent core (``network.core``).

    Defaults follow the paper's appendix A.4 (Table 5): ``ext_coef`` 2, ``int_coef`` 1,
    ``gamma`` (extrinsic) 0.999, ``gamma_int`` 0.99, ``gae_lambda`` 0.95, ``clip_epsilon``
    0.1, ``entropy_coef`` 0.001, ``update_proportion`` 0.25, ``rnd_features`` 512; and
    ``value_coef`` 1 (``vf_coef`` of the authors' code, openai/random-network-distillation).

    Args:
        observation_space: The env's single observation space (supplied by rlplat).
        action_space: The env's single action space (supplied by rlplat).
        network: Factory of the configured torso (supplied by rlplat).
        gamma: Discount factor gamma_E of the extrinsic reward.
        gamma_int: Discount factor gamma_I of the intrinsic reward.
        gae_lambda: GAE lambda of both advantages.
        ext_coef: Weight of the extrinsic advantage.
        int_coef: Weight of the intrinsic advantage.
        update_proportion: Proportion of each minibatch's samples the predictor trains on,
            drawn at random, in (0, 1].
        rnd_features: Width of the target's and predictor's embeddings (and torsos).
        clip_epsilon: Clip range eps of the probability ratio.
        normalize_advantage: Normalise the combined advantages per minibatch.
        entropy_coef: Weight c_e of the entropy bonus.
        value_coef: Weight c_v of each value loss.
        features: Width of the torso output the policy and value heads read.
        share_torso: One torso for actor and critic instead of two.
        log_std_init: Initial log std of the Gaussian policy (Box actions).

    Raises:
        ConfigError: naming ``loss.<key>``: gamma, gamma_int or gae_lambda outside [0, 1],
            update_proportion outside (0, 1], a negative coefficient, rnd_features < 1,
            clip_epsilon <= 0.
    """

    recurrent_cores = False

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float = 0.999,
        gamma_int: float = 0.99,
        gae_lambda: float = 0.95,
        ext_coef: float = 2.0,
        int_coef: float = 1.0,
        update_proportion: float = 0.25,
        rnd_features: int = 512,
        clip_epsilon: float = 0.1,
        normalize_advantage: bool = True,
        entropy_coef: float = 0.001,
        value_coef: float = 1.0,
        features: int = 64,
        share_torso: bool = False,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            network,
            gamma=gamma,
            gae_lambda=gae_lambda,
            clip_epsilon=clip_epsilon,
            value_clip=None,
            normalize_advantage=normalize_advantage,
            entropy_coef=entropy_coef,
            value_coef=value_coef,
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
        )
        _check_rnd_keys(
            gamma_int, update_proportion, rnd_features, ext_coef=ext_coef, int_coef=int_coef, value_coef=value_coef
        )
        self.gamma_int, self.ext_coef, self.int_coef = gamma_int, ext_coef, int_coef
        self.update_proportion = update_proportion

        # V_E and V_I: two outputs of the critic's value layer, so that its torso runs once for both
        self.agent.value_head = nn.Linear(features, 2)
        nn.init.orthogonal_(self.agent.value_head.weight, gain=1.0)
        nn.init.zeros_(self.agent.value_head.bias)

        self.observation_stats = ObservationStatistics(observation_space)
        rnd_space = self.observation_stats.space
        self.target, self.predictor = _target_and_predictor(network, rnd_features, rnd_space)
        self.intrinsic_return = DiscountedReturnStatistics(gamma_int)
        self.in_keys = (*self.in_keys, keys.NEXT_OBSERVATION, INTRINSIC_VALUE_TARGET)
        # the latest rollout's intrinsic diagnostics, logged beside the losses of its updates
        self.intrinsic_diagnostics: dict[str, Tensor] = {}

    def prediction_error(self, next_observation: Tensor | TensorDict) -> Tensor:
        """The predictor's error ``mean_k (f^(x)_k - f(x)_k)^2`` on the normalised
        observations, before the intrinsic-return normalisation.

        Args:
            next_observation: ``[N, *obs_shape]`` in the observation space's dtype (a
                TensorDict of entries for a Dict space).

        Returns:
            ``[N]`` float32, with gradients into the predictor (none into the target).
        """
        x = self.observation_stats.normalize(next_observation)
        return (self.predictor(x) - self.target(x)).pow(2).mean(-1)

    @torch.no_grad()
    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add ``("next", "intrinsic_reward")``, ``state_value`` (V_E), ``value_target``
        (extrinsic TD(lambda) return), ``intrinsic_value_target`` and ``advantage``
        (``ext_coef * A_E + int_coef * A_I``), each ``[T, B, 1]`` float32, to a ``[T, B]``
        rollout; the observation and intrinsic-return statistics take it in first."""
        T, B = rollout.batch_size
        next_observation = rollout[keys.NEXT_OBSERVATION]
        self.observation_stats.update(next_observation.flatten(0, 1))
        error = self.prediction_error(next_observation.flatten(0, 1)).view(T, B, 1)
        self.intrinsic_return.update(error)
        intrinsic_reward = error / (self.intrinsic_return.std + 1e-8)

        observations = torch.cat([rollout[keys.OBSERVATION], next_observation]).flatten(0, 1)
        values = self.agent.value(observations).view(2, T, B, 2)  # V(s_t), V(s_{t+1}); [..., 0] V_E, [..., 1] V_I
        value, next_value = values[0], values[1]
        advantage_ext, value_target_ext = generalized_advantage_estimate(
            rollout[keys.NEXT_REWARD],
            value[..., :1],
            next_value[..., :1],
            rollout[keys.NEXT_DONE],
            rollout[keys.NEXT_TERMINATED],
            self.gamma,
            self.gae_lambda,
        )
        never = torch.zeros_like(rollout[keys.NEXT_DONE])  # non-episodic: no episode end cuts the intrinsic return
        advantage_int, value_target_int = generalized_advantage_estimate(
            intrinsic_reward, value[..., 1:], next_value[..., 1:], never, never, self.gamma_int, self.gae_lambda
        )
        rollout[INTRINSIC_REWARD] = intrinsic_reward
        rollout[keys.STATE_VALUE] = value[..., :1]
        rollout[keys.VALUE_TARGET] = value_target_ext
        rollout[INTRINSIC_VALUE_TARGET] = value_target_int
        rollout[keys.ADVANTAGE] = self.ext_coef * advantage_ext + self.int_coef * advantage_int
        self.rollout_diagnostics = value_diagnostics(value[..., :1], value_target_ext)
        self.intrinsic_diagnostics = {"intrinsic_reward": intrinsic_reward.mean()}
        return rollout

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` minibatch -> PPO's ``loss_objective``, ``loss_critic`` (V_E) and
        ``loss_entropy``, ``loss_intrinsic_critic`` (V_I), ``loss_predictor``, PPO's
        diagnostics and ``intrinsic_reward``."""
        steps = self.policy_value_terms(batch)  # [N] each, value [N, 2]
        value_ext, value_int = steps.value[:, :1], steps.value[:, 1:]  # [N, 1] each
        output = self.terms(steps.batch, steps.log_prob, steps.entropy, steps.advantage, value_ext).output
        output["loss_intrinsic_critic"] = F.mse_loss(value_int, steps.batch[INTRINSIC_VALUE_TARGET]) * (
            0.5 * self.value_coef
        )
        output["loss_predictor"] = self.predictor_loss(steps.batch[keys.NEXT_OBSERVATION])
        output.update(self.intrinsic_diagnostics)
        return output

    def predictor_loss(self, next_observation: Tensor | TensorDict) -> Tensor:
        """The predictor's mean error on ``round(update_proportion * N)`` samples (at least
        one) drawn at random without replacement, 0-dim, with gradients into the predictor.
        A fixed count rather than the paper's coin per sample: the same expected share, and a
        fixed shape (``trainer.compile``) on which neither network runs for the samples left out.

        Args:
            next_observation: ``[N, *obs_shape]`` (a TensorDict for a Dict space).
        """
        n = next_observation.shape[0]
        kept = torch.randperm(n, device=self.predictor_device)[: max(1, round(self.update_proportion * n))]
        return self.prediction_error(next_observation[kept]).mean()

    @property
    def predictor_device(self) -> torch.device:
        """The device of the predictor's parameters (and of the minibatches)."""
        return next(self.predictor.parameters()).device

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """``actor`` and ``critic`` as PPO's (the critic with both value outputs), and
        ``predictor``; the target network takes no gradient and is in none."""
        return {**super().param_groups(), "predictor": list(self.predictor.parameters())}


def _linear(in_features: int, out_features: int) -> nn.Linear:
    """A Linear layer with orthogonal weights (gain sqrt 2) and zero biases, as the paper's code."""
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain=float(np.sqrt(2.0)))
    nn.init.zeros_(layer.bias)
    return layer


class RunningMeanStd(nn.Module):
    """Mean and variance over every sample seen, merged batch by batch (Chan et al. 1979);
    buffers on the loss's device, so that ``state_dict`` holds them.

    Args:
        shape: Shape of one sample.
    """

    mean: Tensor  # buffers: [*shape] float32, [*shape] float32, [] float64 (samples seen)
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: Tensor) -> None:
        """Merge ``[N, *shape]`` samples (any dtype; taken as float32) into the statistics."""
        x = batch.to(self.mean.dtype)
        n = x.shape[0]
        batch_var, batch_mean = torch.var_mean(x, dim=0, correction=0)
        total = self.count + n
        delta = batch_mean - self.mean
        weight = (n / total).to(x.dtype)  # of the new samples
        m2 = self.var * (1 - weight) + batch_var * weight + delta.square() * weight * (1 - weight)
        self.mean += delta * weight
        self.var.copy_(m2)
        self.count.copy_(total)

    @property
    def std(self) -> Tensor:
        """``[*shape]`` float32 standard deviation."""
        return self.var.sqrt()


def _normalized(space: gymnasium.Space) -> bool:
    """Whether RND normalises an observation (entry) of ``space``: a Box of floats or uint8."""
    return isinstance(space, gymnasium.spaces.Box) and (
        np.issubdtype(space.dtype, np.floating) or space.dtype == np.uint8
    )


class ObservationStatistics(nn.Module):
    """Running per-element mean and std of observations, and the normalised copies RND's
    networks read: ``clip((s - mu) / sqrt(var + 1e-8), -5, 5)`` float32 for each Box of floats
    or uint8; other entries (codes: Discrete, MultiDiscrete, MultiBinary, integer token ids)
    pass unchanged. A Dict observation is a TensorDict, normalised entry by entry.

    Args:
        observation_space: The env's single observation space.

    Attributes:
        space: The space of the normalised observations (float32 Boxes in [-5, 5] in place of
            the normalised ones), for building the torsos that read them.
    """

    def __init__(self, observation_space: gymnasium.Space) -> None:
        super().__init__()
        self.is_dict = isinstance(observation_space, gymnasium.spaces.Dict)
        entries: dict[str, gymnasium.Space] = (
            dict(observation_space.spaces)
            if isinstance(observation_space, gymnasium.spaces.Dict)
            else {keys.OBSERVATION: observation_space}
        )
        self.entries = nn.ModuleDict(
            {name: RunningMeanStd(space_shape(space)) for name, space in entries.items() if _normalized(space)}
        )
        spaces = {
            name: gymnasium.spaces.Box(-OBSERVATION_CLIP, OBSERVATION_CLIP, space.shape, np.float32)
            if name in self.entries
            else space
            for name, space in entries.items()
        }
        self.space: gymnasium.Space = gymnasium.spaces.Dict(spaces) if self.is_dict else spaces[keys.OBSERVATION]

    def statistics(self) -> dict[str, RunningMeanStd]:
        """The running statistics of each normalised entry (``observation`` for a non-Dict space)."""
        return {name: cast(RunningMeanStd, stats) for name, stats in self.entries.items()}

    def _items(self, observation: Tensor | TensorDict) -> dict[str, Any]:
        if self.is_dict:
            assert isinstance(observation, TensorDict), "a Dict observation space gives TensorDict observations"
            return dict(observation.items())
        return {keys.OBSERVATION: observation}

    def update(self, observation: Tensor | TensorDict) -> None:
        """Merge ``[N, *obs_shape]`` observations (a TensorDict for a Dict space)."""
        items = self._items(observation)
        for name, stats in self.statistics().items():
            stats.update(items[name])

    def normalize(self, observation: Tensor | TensorDict) -> Tensor | TensorDict:
        """``[N, *obs_shape]`` observations -> their normalised copies, in :attr:`space`."""
        items = self._items(observation)
        for name, stats in self.statistics().items():
            x = (items[name].to(stats.mean.dtype) - stats.mean) / (stats.var + 1e-8).sqrt()
            items[name] = x.clamp(-OBSERVATION_CLIP, OBSERVATION_CLIP)
        if isinstance(observation, TensorDict):
            return TensorDict(items, batch_size=observation.batch_size, device=observation.device)
        return items[keys.OBSERVATION]


class DiscountedReturnStatistics(nn.Module):
    """Running standard deviation of the discounted return of a reward stream, per env and
    never reset at episode ends: ``R_t = gamma * R_{t-1} + r_t``, the std taken over every
    ``R_t`` seen (the paper's section 2.4; the authors' ``RewardForwardFilter``).

    Args:
        gamma: Discount factor of the return.

    Attributes:
        moments: :class:`RunningMeanStd` of the returns (buffers).
        discounted_return: ``[B]`` float32, each env's return after the last step taken in;
            extra state of ``state_dict()`` (its size is the number of envs, known only at
            the first update).
    """

    def __init__(self, gamma: float) -> None:
        super().__init__()
        self.gamma = gamma
        self.moments = RunningMeanStd(())
        self.discounted_return = torch.zeros(0)

    @torch.no_grad()
    def update(self, reward: Tensor) -> None:
        """Take in a rollout's ``[T, B, 1]`` (or ``[T, B]``) rewards, continuing each env's return.

        Raises:
            ValueError: when B differs from the previous rollouts'.
        """
        reward = reward.reshape(reward.shape[0], -1)  # [T, B]
        running = self.discounted_return.to(reward)
        if running.numel() == 0:
            running = torch.zeros_like(reward[0])
        if running.shape != reward.shape[1:]:
            raise ValueError(f"rewards of {reward.shape[1]} envs; the returns so far are of {running.shape[0]}")
        returns = torch.empty_like(reward)
        for t in range(reward.shape[0]):
            running = self.gamma * running + reward[t]
            returns[t] = running
        self.discounted_return = running
        self.moments.update(returns.flatten())

    @property
    def std(self) -> Tensor:
        """0-dim float32 standard deviation of the returns seen."""
        return self.moments.std

    def get_extra_state(self) -> dict[str, Tensor]:
        """The per-env returns, for ``state_dict()``."""
        return {"discounted_return": self.discounted_return}

    def set_extra_state(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`get_extra_state`."""
        self.discounted_return = state["discounted_return"]


def _check_rnd_keys(gamma_int: float, update_proportion: float, rnd_features: int, **coefficients: float) -> None:
    """Raise ConfigError naming ``loss.<key>`` for an RND key out of range."""
    check_unit_interval(gamma_int=gamma_int)
    check_in_range("loss.update_proportion", update_proportion, 0, 1, low_open=True)
    for name, value in coefficients.items():
        check_non_negative(f"loss.{name}", value)
    if isinstance(rnd_features, bool) or not isinstance(rnd_features, int) or rnd_features < 1:
        raise ConfigError(f"loss.rnd_features={rnd_features!r}: must be an integer >= 1")


def _target_and_predictor(
    network: NetworkFactory, rnd_features: int, space: gymnasium.Space
) -> tuple[nn.Sequential, nn.Sequential]:
    """The fixed random target (a torso and a Linear output layer, no gradients) and the
    predictor (a torso, two Linear + ReLU layers and a Linear output), as the paper's code."""
    target = nn.Sequential(network(rnd_features, space), _linear(rnd_features, rnd_features))
    target.requires_grad_(False)  # fixed at its random initialisation
    predictor = nn.Sequential(
        network(rnd_features, space),
        _linear(rnd_features, rnd_features),
        nn.ReLU(),
        _linear(rnd_features, rnd_features),
        nn.ReLU(),
        _linear(rnd_features, rnd_features),
    )
    return target, predictor
