"""Frame-stacked observations stored one frame per step (``buffer.frame_stack``).

An Atari observation is a stack of the last k frames (``[k, H, W]`` uint8), and the next
observation repeats k - 1 of them: stored as they come, a transition holds 2k frames where one
is new. :class:`StackedFrames` keeps, per step and env, only the newest frame of the
observation and how many steps its episode had run, and rebuilds both stacks of a sample from
the frames of the steps before it, as the DQN Zoo and Dopamine replays do. The frame stack of
the env pads an episode's first stack with its first frame (gymnasium's
``FrameStackObservation``, ``padding_type="reset"``: ``[f0, f0, f0, f0]``, then
``[f0, f0, f0, f1]``); the rebuilt stacks do the same. The final observation of an episode (the
next observation of its last step, which no later step holds) is kept aside, one per episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.registry import ConfigError

FRAME = "frame"
"""Key of the stored newest frame of each step's observation, ``[*frame_shape]``."""
EPISODE_STEP = "episode_step"
"""Key of each step's number of steps since its episode began (0 at the first), int64."""


class StackedFrames:
    """Splits rollouts of frame-stacked observations into one frame per step, and rebuilds the
    stacks of sampled steps.

    Args:
        k: Frames per observation, stacked on the observation's first axis.
        num_envs: B, the envs of each rollout.

    Raises:
        ConfigError: when ``k`` < 2 (see :meth:`split` for the observations' shape).
    """

    def __init__(self, k: int, num_envs: int) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise ConfigError(
                f"buffer.frame_stack={k!r}: must be an integer >= 2 (the frames stacked per observation), "
                "or null to store observations as they are"
            )
        self.k = k
        self._episode_step = np.zeros(num_envs, dtype=np.int64)  # of the next step each env takes
        self.finals: dict[int, Tensor] = {}  # storage position (row * B + env) -> final frame

    def split(self, rollout: TensorDict) -> TensorDict:
        """A ``[T, B]`` rollout -> the same without ``observation`` and ``("next",
        "observation")``, with :data:`FRAME` (the newest frame of each observation) and
        :data:`EPISODE_STEP`; advances the episode counters.

        Raises:
            ConfigError: when the observations are not tensors ``[T, B, k, ...]``.
        """
        observation = rollout.get(keys.OBSERVATION)
        if not isinstance(observation, Tensor) or observation.dim() < 3 or observation.shape[2] != self.k:
            shape = list(observation.shape) if isinstance(observation, Tensor) else "a Dict"
            raise ConfigError(
                f"buffer.frame_stack={self.k}: the observations are {shape} ([T, B, ...]), not stacks of "
                f"{self.k} frames on their first axis; set buffer.frame_stack=null"
            )
        done = rollout.get(keys.NEXT_DONE).squeeze(-1).cpu().numpy()  # [T, B]
        steps = np.empty(done.shape, dtype=np.int64)
        for t in range(done.shape[0]):
            steps[t] = self._episode_step
            self._episode_step = np.where(done[t], 0, self._episode_step + 1)
        stored = rollout.exclude(keys.OBSERVATION, keys.NEXT_OBSERVATION)
        stored.set(FRAME, observation[:, :, -1])  # a view: the replay copies it into its storage
        stored.set(EPISODE_STEP, torch.from_numpy(steps).to(observation.device))
        return stored

    def keep_finals(self, rollout: TensorDict, rows: np.ndarray, old_done: np.ndarray) -> None:
        """Keep the final frame of each episode that ends in ``rollout``, and forget those of
        the steps it overwrites.

        Args:
            rollout: The ``[T, B]`` rollout as collected.
            rows: ``[T]`` storage rows its steps are written to.
            old_done: ``[T, B]`` bool, ``("next", "done")`` of the steps overwritten there.
        """
        num_envs = old_done.shape[1]
        for t, b in zip(*np.nonzero(old_done)):
            self.finals.pop(int(rows[t]) * num_envs + int(b), None)
        done = rollout.get(keys.NEXT_DONE).squeeze(-1).cpu().numpy()
        if done.any():
            last_frames = rollout.get(keys.NEXT_OBSERVATION)[:, :, -1]
            for t, b in zip(*np.nonzero(done)):
                self.finals[int(rows[t]) * num_envs + int(b)] = last_frames[t, b].cpu().clone()

    def stacks(
        self,
        frames: Tensor,
        episode_step: Tensor,
        done: Tensor,
        position: Tensor,
        env: Tensor,
        age: Tensor,
        length: int,
    ) -> tuple[Tensor, Tensor]:
        """Rebuild the observation and the next observation of sampled steps.

        Args:
            frames: ``[length, B, *frame]``, the stored frames.
            episode_step: ``[length, B]`` int64, the stored episode counters.
            done: ``[length, B]`` bool, the stored ``("next", "done")``.
            position: ``[M]`` int64 storage rows of the samples; the k - 1 rows before each
                (those its episode ran) and, unless it ended an episode, the row after it hold
                their steps in time order.
            env: ``[M]`` int64 env of each sample.
            age: ``[M]`` int64 rows held before each sample's (older frames are gone: a stack
                reaching past them is padded with the oldest held, as after a resume whose
                checkpoint held no transitions).
            length: Rows of the storage (positions wrap around).

        Returns:
            ``(observation, next_observation)``, each ``[M, k, *frame]`` in the frames' dtype.
        """
        k = self.k
        offsets = torch.arange(k - 1, -1, -1, device=position.device)  # oldest slot first
        ran = torch.minimum(episode_step[position, env], age).clamp(max=k - 1)  # [M] steps of its episode held before
        back = torch.minimum(offsets.unsqueeze(0), ran.unsqueeze(1))  # [M, k]
        observation = frames[(position.unsqueeze(1) - back) % length, env.unsqueeze(1)]
        # next observation: the stack one step later, where the episode has run one step more
        back_next = torch.minimum(offsets.unsqueeze(0), ran.unsqueeze(1) + 1)
        next_observation = frames[(position.unsqueeze(1) + 1 - back_next) % length, env.unsqueeze(1)]
        ended = done[position, env]
        for i in torch.nonzero(ended).flatten().tolist():  # the newest frame is the episode's final one
            final = self.finals[int(position[i]) * frames.shape[1] + int(env[i])]
            next_observation[i, -1] = final.to(next_observation.device)
        return observation, next_observation

    def state_dict(self) -> dict[str, Any]:
        """The episode counters and the final frames, as tensors."""
        positions = sorted(self.finals)
        return {
            "episode_step": torch.from_numpy(self._episode_step.copy()),
            "final_positions": torch.tensor(positions, dtype=torch.int64),
            "final_frames": torch.stack([self.finals[p] for p in positions]) if positions else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self._episode_step = state["episode_step"].numpy().copy()
        frames = state["final_frames"]
        self.finals = {} if frames is None else dict(zip(state["final_positions"].tolist(), frames))
