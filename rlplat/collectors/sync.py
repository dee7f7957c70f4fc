"""Synchronous collector: one process steps B envs and the policy in lockstep."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.collectors.base import Acting, EnvMaker, Policy
from rlplat.envs.base import Episode, Observation, action_zeros, observation_leaves, observation_zeros
from rlplat.registry import check_at_least


class SyncCollector:
    """Collects rollouts of ``steps_per_env`` steps from ``num_envs`` envs, in-process.

    Implements :class:`rlplat.collectors.base.Collector`.

    Storage for one rollout is allocated once, in CPU memory, and written step by step
    through numpy views (a numpy row assignment costs a fraction of a torch one); each
    iteration yields a copy with batch size ``[T, B]`` = ``[steps_per_env, num_envs]``,
    moved to ``device`` in one transfer, holding ``observation``, ``action``,
    ``action_log_prob`` and, under ``next``: ``observation``, ``reward``, ``done``,
    ``terminated``, ``truncated`` (shapes in :mod:`rlplat.keys`); for a recurrent policy
    (:class:`rlplat.collectors.base.RecurrentPolicy`) also ``recurrent_state``, the state each
    step acted from, zeroed where an episode ended. The policy acts on ``device``. Episodes
    (and a recurrent policy's states) continue across rollouts.

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
        check_at_least("collector.steps_per_env", steps_per_env)
        check_at_least("collector.num_envs", num_envs)
        self.env = make_env(num_envs, vectorization)
        self.policy = policy
        self.acting = Acting(policy, num_envs)
        self.total_frames = int(total_frames)
        self.device = device
        self.seed = seed
        self.rollout_shape = (steps_per_env, num_envs)
        self.frames_per_batch = num_envs * steps_per_env
        self.frames = 0
        self._storage = self._allocate(steps_per_env, num_envs)
        self._arrays = tuple(
            self._storage[key].numpy()
            for key in (
                keys.ACTION,
                keys.ACTION_LOG_PROB,
                keys.NEXT_REWARD,
                keys.NEXT_TERMINATED,
                keys.NEXT_TRUNCATED,
                keys.NEXT_DONE,
            )
        )
        # numpy views of the observations' storage, one per tensor (one per key of a Dict space)
        self._observation_arrays = [leaf.numpy() for leaf in observation_leaves(self._storage[keys.OBSERVATION])]
        self._next_observation_arrays = [
            leaf.numpy() for leaf in observation_leaves(self._storage[keys.NEXT_OBSERVATION])
        ]
        self._states = self._storage[keys.RECURRENT_STATE].numpy() if self.acting.state is not None else None
        self._observation: Observation | None = None  # on the CPU, as the envs return it
        self._reset_seed = seed

    def _allocate(self, steps: int, num_envs: int) -> TensorDict:
        space = self.env.observation_space
        flag = lambda: torch.zeros(steps, num_envs, 1, dtype=torch.bool)  # noqa: E731
        storage = TensorDict(
            {
                keys.OBSERVATION: observation_zeros(space, (steps, num_envs)),
                keys.ACTION: action_zeros(self.env.action_space, (steps, num_envs)),
                keys.ACTION_LOG_PROB: torch.zeros(steps, num_envs),
                keys.NEXT: {
                    keys.OBSERVATION: observation_zeros(space, (steps, num_envs)),
                    keys.REWARD: torch.zeros(steps, num_envs, 1),
                    keys.DONE: flag(),
                    keys.TERMINATED: flag(),
                    keys.TRUNCATED: flag(),
                },
            },
            batch_size=[steps, num_envs],
        )
        if self.acting.state is not None:
            storage[keys.RECURRENT_STATE] = torch.zeros(steps, num_envs, self.acting.state.shape[-1])
        return storage

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            yield self.rollout()

    @torch.inference_mode()
    def rollout(self) -> TensorDict:
        """Collect one rollout ``[T, B]`` and advance ``frames`` by ``T * B``."""
        if self._observation is None:
            self._observation = self.env.reset(seed=self._reset_seed)
        actions, log_probs, rewards, terminated, truncated, done = self._arrays
        entries = isinstance(self._storage.get(keys.OBSERVATION), TensorDict)  # a Dict space: one array per key
        observations, next_observations = self._observation_arrays[0], self._next_observation_arrays[0]
        # the parameters stay as they are until this returns: what derives from them is computed once
        acting, states = self.acting, self._states
        act, step_envs, device = acting.act_function(), self.env.step, self.device
        on_cpu = device.type == "cpu"
        observation = self._observation
        for t in range(self.rollout_shape[0]):
            if states is not None:  # the state this step acts from
                states[t] = acting.state.cpu().numpy()  # type: ignore[union-attr]
            action, log_prob = act(observation if on_cpu else observation.to(device, non_blocking=True))
            step = step_envs(action)
            if states is not None:
                acting.episodes_ended(step.terminated | step.truncated)
            if entries:
                self._write_entries(t, observation, step.next_observation)
            else:
                observations[t] = observation.numpy()
                next_observations[t] = step.next_observation.numpy()
            actions[t] = (action if on_cpu else action.cpu()).numpy()
            log_probs[t] = (log_prob if on_cpu else log_prob.cpu()).numpy()
            rewards[t] = step.reward.numpy()
            terminated[t] = step.terminated.numpy()
            truncated[t] = step.truncated.numpy()
            observation = step.observation
        self._observation = observation
        np.logical_or(terminated, truncated, out=done)
        self.frames += self.frames_per_batch
        rollout = self._storage.clone()
        return rollout if on_cpu else rollout.to(device, non_blocking=True)

    def _write_entries(self, t: int, observation: Observation, next_observation: Observation) -> None:
        """Write step ``t``'s observations of a Dict space, entry by entry."""
        for array, leaf in zip(self._observation_arrays, observation_leaves(observation)):
            array[t] = leaf.numpy()
        for array, leaf in zip(self._next_observation_arrays, observation_leaves(next_observation)):
            array[t] = leaf.numpy()

    def pop_finished(self) -> list[Episode]:
        """Episodes (raw undiscounted return, length in env steps) finished since last call."""
        return self.env.pop_finished()

    def state_dict(self) -> dict[str, Any]:
        """Frames collected, the (transformed) observation to act on next, the envs' states
        (:meth:`rlplat.envs.vector.VectorEnv.state_dict`) and a recurrent policy's state
        ``[B, S]`` (``policy_state``, None for others)."""
        observation: Any = None
        if isinstance(self._observation, TensorDict):  # plain tensors: a checkpoint holds no TensorDict
            observation = {"entries": self._observation.to_dict(), "batch_size": list(self._observation.batch_size)}
        elif self._observation is not None:
            observation = self._observation.clone()
        state = None if self.acting.state is None else self.acting.state.cpu().clone()
        return {"frames": self.frames, "observation": observation, "env": self.env.state_dict(), "policy_state": state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`: episodes go on where they were. Envs whose states
        were not saved (``async`` vectorization) start new episodes, reset with the seed
        ``seed + frames`` so that they do not replay the first ones."""
        self.frames = int(state["frames"])
        observation = state.get("observation")
        if isinstance(observation, Mapping):
            observation = TensorDict(observation["entries"], batch_size=observation["batch_size"])
        if observation is not None and self.env.load_state_dict(state.get("env") or {}):
            self._observation = observation
            saved = state.get("policy_state")
            if saved is not None and self.acting.state is not None:
                self.acting.state = saved.to(self.acting.state.device)
        else:
            self._observation = None
            self._reset_seed = self.seed + self.frames
            if self.acting.state is not None:  # new episodes start from the initial state
                self.acting.state = self.acting.state.new_zeros(self.acting.state.shape)

    def close(self) -> None:
        """Close the envs."""
        self.env.close()
