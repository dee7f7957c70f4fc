"""What a transform entry implements (entry-point group ``rlplat.transforms``).

A transform maps the observations and rewards of the training and evaluation envs inside
rlplat's env adapter (:class:`rlplat.envs.vector.VectorEnv`), before the collector sees
them: running observation normalisation, reward scaling, ... The YAML node ``transforms``
is an ordered map ``name -> kwargs`` (kwargs null: left out); they are applied in that order, and one instance of
each is shared by the training envs (which update its statistics) and the evaluation envs
(which do not). Its state is saved with the checkpoint.

* :class:`TransformFactory`: what the entry point names, ``(observation_space, **yaml)``.
* :class:`TransformLike`: what the built transform provides.
* :class:`Transform`: an identity ``nn.Module`` base to subclass; overriding one method is
  enough, and running statistics kept as buffers are checkpointed and moved with ``.to()``.
* :class:`EnvTransform`: a transform applied inside each env, before vectorisation, as a
  gymnasium wrapper (pixels rendered from the env, resizing, frame stacking, time limits,
  action rescaling, text tokenisation): it may change the observation space, its dtype, and
  the action space. rlplat applies every ``EnvTransform`` of the ``transforms`` node first,
  in their order, then the others (over the batch of envs) in theirs.

Each transform entry is built with the observation space its input has: the env's, after
the env transforms before it; the transforms over the batch get the space after all env
transforms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium
from torch import Tensor, nn


class TransformFactory(Protocol):
    """A transform entry: ``(observation_space, **yaml_kwargs) -> TransformLike``.

    rlplat supplies ``observation_space``, the single env's (untransformed) observation
    space, as the first positional argument; the YAML supplies every other keyword
    argument (the kwargs under ``transforms.<name>``, checked against the signature).

    Raises:
        ConfigError: for a bad YAML value or an observation space it cannot handle, naming
            ``transforms.<name>.<key>`` (``rlplat.registry.ConfigError``).
    """

    def __call__(self, observation_space: gymnasium.Space, /, **kwargs: Any) -> TransformLike:
        """Build the transform for observations of ``observation_space``."""
        ...


@runtime_checkable
class TransformLike(Protocol):
    """A built transform, as the env adapter and the checkpoint use it.

    Shapes use ``B`` for the number of parallel envs. Both methods return new tensors of
    the same shape and dtype as their input (float32); ``update`` is True only in the
    training envs: with ``update=False`` (evaluation) the state must not change.
    """

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        """Map observations.

        Args:
            observation: ``[B, *obs_shape]``, the envs' observations (already transformed
                by the earlier transforms); float32 for the built-in transforms over the
                batch, which refuse other spaces at construction.
            update: Whether running statistics may be updated from this batch.

        Returns:
            ``[B, *obs_shape]``, of the input's dtype.
        """
        ...

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        """Map rewards.

        Args:
            reward: ``[B, 1]`` float32 rewards of one vector step.
            done: ``[B, 1]`` bool, where an episode ended (terminated or truncated) at
                this step, e.g. to reset a per-env discounted return.
            update: Whether running statistics may be updated from this batch.

        Returns:
            ``[B, 1]`` float32.
        """
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """Everything needed to resume (e.g. running statistics), ``torch.save``-able."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> Any:
        """Restore :meth:`state_dict`: afterwards the transform maps inputs as it did then."""
        ...


class Transform(nn.Module):
    """Base of env transforms; identity on both observations and rewards.

    A transform is an ``nn.Module`` so that its running statistics are buffers: they move
    with ``.to(device)`` and are saved with the checkpoint through ``state_dict()``.
    Constructors receive ``observation_space`` as their first argument, then the YAML keys
    (:class:`TransformFactory`); subclasses implement :class:`TransformLike`.
    """

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        """Map ``[B, *obs_shape]`` observations; ``update`` allows updating statistics."""
        return observation

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        """Map ``[B, 1]`` rewards given ``[B, 1]`` bool episode ends."""
        return reward

    def fit(self, env: gymnasium.Env, seed: int) -> None:
        """Set statistics from an env before training (nothing here).

        rlplat calls it once, when the run is built (not on resume, whose state comes from the
        checkpoint), with a probe env that has every env transform applied and is not reset
        yet; ``seed`` is the run's seed. For example observation normalisation from the
        statistics of N random steps.
        """


class EnvTransform(Transform):
    """Base of transforms applied inside each env, as gymnasium wrappers, before vectorisation.

    rlplat builds the transform once with the observation space of its input (the env's, after
    the env transforms listed before it), then calls :meth:`wrap` on every env it makes: the
    training envs (also in subprocesses with ``collector.vectorization=async``: the transform
    must pickle), the evaluation envs, the envs of ``rlplat-eval`` and ``rlplat-record``, and one
    probe env from which the spaces after the transform are read. State that lives in the
    wrapper (a frame stack, a step count) is saved with the envs' states in the checkpoint.

    Attributes:
        render_mode: The gymnasium render mode the env must be made with for this transform
            (``"rgb_array"`` for pixels rendered from the env), or None.
    """

    render_mode: str | None = None

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        """Return ``env`` wrapped (one or more gymnasium wrappers); the identity here."""
        return env
