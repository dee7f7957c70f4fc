"""Running normalisation of observations; scaling and clipping of rewards."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from torch import Tensor

from rlplat.registry import ConfigError, check_in_range, check_positive
from rlplat.transforms.base import Transform


class RunningMeanStd(torch.nn.Module):
    """Mean and variance over every sample seen, merged batch by batch (Chan et al. 1979).

    The statistics are float64 buffers (checkpointed with ``state_dict``), updated in place
    through numpy views: the env adapter calls this once per env step with a few rows, where
    numpy's per-call cost is a fraction of torch's.

    Args:
        shape: Shape of one sample.
    """

    mean: Tensor  # buffers, float64 on the CPU: [*shape], [*shape] and [] (samples seen)
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self._views: tuple[Tensor, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """numpy views of ``mean``, ``var`` and ``count``, made again only when the buffers
        were replaced (``.to()`` and kin replace them; loading a state copies in place)."""
        mean = self.mean
        if self._views is None or self._views[0] is not mean:
            self._views = (mean, (mean.numpy(), self.var.numpy(), self.count.numpy()))
        return self._views[1]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and deep-copied without the numpy views: a copy's arrays would be copies too,
        no longer views of its buffers (its updates would be lost)."""
        state = self.__dict__.copy()
        state["_views"] = None
        return state

    def update(self, batch: Tensor | np.ndarray) -> None:
        """Merge ``[N, *shape]`` samples (a CPU tensor or an array) into the statistics."""
        x = (batch.numpy() if isinstance(batch, Tensor) else np.asarray(batch)).astype(np.float64)
        mean, var, count_array = self.arrays
        n, count = x.shape[0], float(count_array)
        batch_mean = np.add.reduce(x, 0) / n
        x -= batch_mean
        batch_var = np.add.reduce(x * x, 0) / n
        total = count + n
        delta = batch_mean - mean
        m2 = var * count + batch_var * n + delta * delta * (count * n / total)
        mean += delta * (n / total)
        np.divide(m2, total, out=var)
        count_array[...] = total


class ObservationNorm(Transform):
    """Normalise observations by a mean and std, then clip.

    ``(obs - mean) / sqrt(var + eps)`` clipped to ``[-clip, clip]``. The statistics are either
    running ones, updated from every training observation (as Stable-Baselines3's
    VecNormalize), or fixed: given in YAML (``mean``, ``std``), or gathered by :meth:`fit`
    over ``init_steps`` env steps of random actions before training (TorchRL's
    ``ObservationNorm.init_stats``); fixed statistics never move. Observations are the env
    adapter's CPU tensors ``[B, *obs_shape]`` float32; the arithmetic runs on numpy views.

    YAML keys: ``clip``, ``epsilon``, ``mean``, ``std``, ``init_steps``.

    Args:
        observation_space: The env's single observation space (after the env transforms): a
            Box of floats.
        clip: Bound on the normalised observation, in standard deviations.
        epsilon: Added to the variance before the square root.
        mean: Fixed mean: a number, or a (nested) list of the observation's shape; needs ``std``.
        std: Fixed standard deviation (> 0), a number or a list as ``mean``; needs ``mean``.
        init_steps: Fix the statistics to those of this many env steps of uniformly random
            actions (:meth:`fit`); None (and no ``mean``/``std``): running statistics.

    Raises:
        ConfigError: naming ``transforms.obs_norm`` if the observation space is not a Box of
            floats (uint8 images and Dict observations: set ``transforms.obs_norm=null``), if
            ``clip`` or ``epsilon`` <= 0, for only one of ``mean``/``std``, for values that do
            not broadcast to the observation's shape, a std <= 0, ``init_steps`` < 1, or both
            ``init_steps`` and ``mean``/``std``.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        mean: float | list[Any] | None = None,
        std: float | list[Any] | None = None,
        init_steps: int | None = None,
    ) -> None:
        super().__init__()
        _check_float_box(observation_space)
        check_positive("transforms.obs_norm.clip", clip, allow_inf=True)  # inf: unclipped
        check_positive("transforms.obs_norm.epsilon", epsilon)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        shape = tuple(observation_space.shape or ())
        self.stats = RunningMeanStd(shape)
        self.init_steps = _check_init_steps(init_steps, given=mean is not None or std is not None)
        self.fixed = mean is not None or std is not None or init_steps is not None
        if mean is not None or std is not None:
            mean_array, std_array = _fixed_statistics(mean, std, shape)
            self.stats.mean.copy_(torch.from_numpy(mean_array))
            self.stats.var.copy_(torch.from_numpy(std_array * std_array))
        self._refresh()
        self.register_load_state_dict_post_hook(lambda module, _: module._refresh())

    def _refresh(self) -> None:
        mean, var, _ = self.stats.arrays
        var = var + self.epsilon
        self._mean = mean.astype(np.float32)
        self._inv_std = np.reciprocal(np.sqrt(var, out=var), out=var).astype(np.float32)

    def fit(self, env: gymnasium.Env, seed: int) -> None:
        """Fix the statistics to the mean and variance of the observations of ``init_steps``
        env steps of uniformly random actions (the reset observations included, the env reset
        whenever an episode ends); nothing without ``init_steps``.

        Args:
            env: One env with every env transform applied (its observations are this
                transform's inputs). Left as the steps left it; the caller closes it.
            seed: Seeds the env's first reset and the action sampling.
        """
        if self.init_steps is None:
            return
        observation, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        observations = [np.asarray(observation, dtype=np.float64)]
        for _ in range(self.init_steps):
            observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                observations.append(np.asarray(observation, dtype=np.float64))
                observation, _ = env.reset()
            observations.append(np.asarray(observation, dtype=np.float64))
        samples = np.stack(observations)
        mean, var, count = self.stats.arrays
        mean[...] = samples.mean(0)
        var[...] = samples.var(0)
        count[...] = len(samples)
        self._refresh()

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        if update and not self.fixed:
            self.stats.update(observation)
            self._refresh()
        normalised = observation.numpy() - self._mean
        normalised *= self._inv_std
        return torch.from_numpy(np.clip(normalised, -self.clip, self.clip, out=normalised))


def _check_float_box(space: gymnasium.Space) -> None:
    """ConfigError naming ``transforms.obs_norm`` and ``space`` unless it is a Box of floats."""
    if isinstance(space, gymnasium.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return
    what = "uint8 pixels" if isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8 else "not a float Box"
    raise ConfigError(
        f"transforms.obs_norm normalises float vectors; the observation space {space} is {what}. "
        "Set transforms.obs_norm=null (the cnn network scales pixels itself)"
    )


def _check_init_steps(init_steps: int | None, given: bool) -> int | None:
    if init_steps is None:
        return None
    if isinstance(init_steps, bool) or not isinstance(init_steps, int) or init_steps < 1:
        raise ConfigError(f"transforms.obs_norm.init_steps={init_steps!r}: must be an integer >= 1, or null")
    if given:
        raise ConfigError(
            f"transforms.obs_norm.init_steps={init_steps}: statistics are gathered or given (mean and std), not both"
        )
    return init_steps


def _fixed_statistics(mean: Any, std: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``mean`` and ``std`` from YAML as float64 arrays of ``shape``.

    Raises:
        ConfigError: for only one given, values that are not numbers or do not broadcast to
            ``shape``, or a std <= 0.
    """
    if mean is None or std is None:
        missing = "std" if std is None else "mean"
        raise ConfigError(f"transforms.obs_norm.{missing} is not set: fixed statistics need both mean and std")
    arrays = []
    for key, value in (("mean", mean), ("std", std)):
        try:
            arrays.append(np.broadcast_to(np.asarray(value, dtype=np.float64), shape).copy())
        except (TypeError, ValueError) as error:
            raise ConfigError(
                f"transforms.obs_norm.{key}={value!r}: must be a number or a list of the observation's shape "
                f"{list(shape)} ({error})"
            ) from error
    if not np.all(arrays[1] > 0):
        raise ConfigError(f"transforms.obs_norm.std={std!r}: every std must be > 0")
    return arrays[0], arrays[1]


class RewardScale(Transform):
    """Divide rewards by the running std of the discounted return (Engstrom et al. 2020).

    The return ``R <- gamma * R + r`` is accumulated per env, reset at episode ends, and
    its running variance scales the reward: ``r / sqrt(var(R) + eps)``, clipped to
    ``[-clip, clip]``. Rewards keep their sign and their mean is not subtracted.

    Args:
        observation_space: Unused; part of the transform constructor interface.
        gamma: Discount of the accumulated return; use the loss's gamma.
        clip: Bound on the scaled reward.
        epsilon: Added to the variance before the square root.

    Raises:
        ConfigError: if ``gamma`` is outside [0, 1], or ``clip`` or ``epsilon`` <= 0.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        gamma: float = 0.99,
        clip: float = 10.0,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__()
        check_in_range("transforms.reward_scale.gamma", gamma, 0, 1)
        check_positive("transforms.reward_scale.clip", clip, allow_inf=True)  # inf: unclipped
        check_positive("transforms.reward_scale.epsilon", epsilon)
        self.gamma = float(gamma)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStd(())
        self._discounted: Tensor | None = None
        self.register_load_state_dict_pre_hook(_returns_default)

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        if update:
            if self._discounted is None or self._discounted.shape != reward.shape:
                self._discounted = torch.zeros_like(reward, dtype=torch.float64)
            self._discounted = self._discounted * self.gamma + reward
            self.stats.update(self._discounted.flatten())
            self._discounted[done] = 0.0
        scale = float(np.sqrt(self.stats.var.item() + self.epsilon))
        return (reward / scale).clamp_(-self.clip, self.clip)

    def get_extra_state(self) -> dict[str, Tensor | None]:
        """The per-env discounted returns (float64 ``[B, 1]``, None before the first
        reward), checkpointed with the statistics: a resumed run scales as one that never
        stopped."""
        return {"discounted": None if self._discounted is None else self._discounted.clone()}

    def set_extra_state(self, state: dict[str, Tensor | None]) -> None:
        """Restore :meth:`get_extra_state`."""
        discounted = state["discounted"]
        self._discounted = None if discounted is None else discounted.clone()


def _returns_default(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """A checkpoint written before :class:`RewardScale` saved its returns has none: they
    start from zero (a load-state pre-hook; ``load_state_dict`` hands it its own copy)."""
    state_dict.setdefault(prefix + "_extra_state", {"discounted": None})


class RewardClip(Transform):
    """Clip rewards to ``[-bound, bound]`` (Mnih et al. 2015, for every Atari game alike).

    With the default bound of 1, Atari's integer rewards become their sign. Episode returns
    reported by rlplat stay the raw ones (transforms apply after they are summed).

    Args:
        observation_space: Unused; part of the transform constructor interface.
        bound: The clip bound, > 0.

    Raises:
        ConfigError: if ``bound`` <= 0.
    """

    def __init__(self, observation_space: gymnasium.Space, bound: float = 1.0) -> None:
        super().__init__()
        check_positive("transforms.reward_clip.bound", bound, show=repr, allow_inf=True)  # inf: unclipped
        self.bound = float(bound)

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        return reward.clamp(-self.bound, self.bound)
