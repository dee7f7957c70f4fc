"""Synchronous collector: one process steps B envs and the policy in lockstep."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.collectors.base import EnvMaker, Policy
from rlplat.envs.base import Episode, space_shape
from rlplat.registry import ConfigError


class SyncCollector:
    """Collects rollouts of ``steps_per_env`` steps from ``num_envs`` envs, in-process.

    Implements :class:`rlplat.collectors.base.Collector`.

    Storage for one rollout is allocated once and written step by step; each iteration
    yields a copy with batch size ``[T, B]`` = ``[steps_per_env, num_envs]`` holding
    ``observation``, ``action``, ``action_log_prob`` and, under ``next``: ``observation``,
    ``reward``, ``done``, ``terminated``, ``truncated`` (shapes in :mod:`rlplat.keys`).
    Episodes continue across rollouts.

    Args:
        make_env: Factory for the training env (supplied by the trainer).
        policy: The agent acting during collection (supplied by the trainer).
        total_frames: Frames (env steps summed over envs) after which iteration stops.
        device: Device of the rollout tensors and the policy.
        seed: Seed of the envs' first reset (env i gets ``seed + i``).
        num_envs: Parallel envs B.
        steps_per_env: Env steps per env per rollout T; a rollout is ``T * B`` frames.
        vectorization: ``sync`` (one process) or ``async`` (a subprocess per env).

    Raises:
        ConfigError: if ``num_envs`` or ``steps_per_env`` < 1.
    """

    def __init__(
        self,
        make_env: EnvMaker,
        policy: Policy,
        total_frames: int,
        device: torch.device,
        seed: int,
        num_envs: int = 8,
        steps_per_env: int = 256,
        vectorization: str = "sync",
    ) -> None:
        if steps_per_env < 1:
            raise ConfigError(f"collector.steps_per_env={steps_per_env}: must be at least 1")
        if num_envs < 1:
            raise ConfigError(f"collector.num_envs={num_envs}: must be at least 1")
        self.env = make_env(num_envs, vectorization)
        self.policy = policy
        self.total_frames = int(total_frames)
        self.device = device
        self.seed = seed
        self.rollout_shape = (steps_per_env, num_envs)
        self.frames_per_batch = num_envs * steps_per_env
        self.frames = 0
        self._storage = self._allocate(steps_per_env, num_envs)
        self._observation: Tensor | None = None
        self._reset_seed = seed

    def _allocate(self, steps: int, num_envs: int) -> TensorDict:
        obs_shape = space_shape(self.env.observation_space)
        space = self.env.action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            action = torch.zeros(steps, num_envs, dtype=torch.int64)
        else:
            action = torch.zeros(steps, num_envs, *space_shape(space))
        flag = lambda: torch.zeros(steps, num_envs, 1, dtype=torch.bool)  # noqa: E731
        return TensorDict(
            {
                keys.OBSERVATION: torch.zeros(steps, num_envs, *obs_shape),
                keys.ACTION: action,
                keys.ACTION_LOG_PROB: torch.zeros(steps, num_envs),
                keys.NEXT: {
                    keys.OBSERVATION: torch.zeros(steps, num_envs, *obs_shape),
                    keys.REWARD: torch.zeros(steps, num_envs, 1),
                    keys.DONE: flag(),
                    keys.TERMINATED: flag(),
                    keys.TRUNCATED: flag(),
                },
            },
            batch_size=[steps, num_envs],
        ).to(self.device)

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            yield self.rollout()

    @torch.inference_mode()
    def rollout(self) -> TensorDict:
        """Collect one rollout ``[T, B]`` and advance :attr:`frames` by ``T * B``."""
        if self._observation is None:
            self._observation = self.env.reset(seed=self._reset_seed).to(self.device)
        td = self._storage
        observation_buf, action_buf = td[keys.OBSERVATION], td[keys.ACTION]
        log_prob_buf = td[keys.ACTION_LOG_PROB]
        next_observation_buf, reward_buf = td[keys.NEXT_OBSERVATION], td[keys.NEXT_REWARD]
        terminated_buf, truncated_buf = td[keys.NEXT_TERMINATED], td[keys.NEXT_TRUNCATED]
        observation = self._observation
        for t in range(td.batch_size[0]):
            action, log_prob = self.policy.act(observation)
            step = self.env.step(action)
            observation_buf[t] = observation
            action_buf[t] = action
            log_prob_buf[t] = log_prob
            next_observation_buf[t] = step.next_observation
            reward_buf[t] = step.reward
            terminated_buf[t] = step.terminated
            truncated_buf[t] = step.truncated
            observation = step.observation.to(self.device, non_blocking=True)
        self._observation = observation
        torch.logical_or(terminated_buf, truncated_buf, out=td[keys.NEXT_DONE])
        self.frames += self.frames_per_batch
        return td.clone()

    def pop_finished(self) -> list[Episode]:
        """Episodes (raw undiscounted return, length in env steps) finished since last call."""
        return self.env.pop_finished()

    def state_dict(self) -> dict[str, Any]:
        """Frames collected, the (transformed) observation to act on next, and the envs'
        states (:meth:`rlplat.envs.vector.VectorEnv.state_dict`)."""
        observation = None if self._observation is None else self._observation.cpu().clone()
        return {"frames": self.frames, "observation": observation, "env": self.env.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`: episodes go on where they were. Envs whose states
        were not saved (``async`` vectorization) start new episodes, reset with the seed
        ``seed + frames`` so that they do not replay the first ones."""
        self.frames = int(state["frames"])
        observation = state.get("observation")
        if observation is not None and self.env.load_state_dict(state.get("env") or {}):
            self._observation = observation.to(self.device)
        else:
            self._observation = None
            self._reset_seed = self.seed + self.frames

    def close(self) -> None:
        """Close the envs."""
        self.env.close()
