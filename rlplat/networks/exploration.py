"""Acting policies of the off-policy algorithms, with their exploration.

Each counts the frames it acted on stochastically (a buffer, saved with the checkpoint),
which drives its schedule: uniform random actions for the first ``warmup_frames``,
epsilon decay in frames. ``deterministic=True`` (evaluation) neither explores nor counts.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rlplat.networks.actors import DeterministicActor, SquashedGaussianActor
from rlplat.networks.q import DiscreteQ
from rlplat.registry import ConfigError, check_in_range, check_non_negative

NOISE_TYPES = ("gaussian", "ou")


def linear_schedule(start: float, end: float, frames: int, now: int) -> float:
    """Linear interpolation from ``start`` to ``end`` over ``frames`` frames, then ``end``."""
    if frames <= 0:
        return end
    return start + (end - start) * min(1.0, now / frames)


class _FrameCounter(nn.Module):
    frames: Tensor  # buffer, int64 []

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

    def _count(self, n: int) -> int:
        """Add ``n`` frames; returns the count before. On the CPU through a numpy view of the
        buffer: two operations of a microsecond's overhead each instead of torch's three."""
        frames = self.frames
        if frames.device.type != "cpu":
            before = int(frames)
            frames += n
            return before
        view = frames.numpy()
        before = int(view)
        view += n
        return before


class EpsilonGreedy(_FrameCounter):
    """argmax_a Q(s, a), or with probability epsilon a uniform action (Mnih et al. 2015).

    Args:
        q: The online Q-network.
        num_actions: Number of discrete actions.
        epsilon_start: Epsilon at frame 0.
        epsilon_end: Epsilon after ``exploration_frames``.
        exploration_frames: Frames over which epsilon decays linearly.
    """

    def __init__(
        self, q: DiscreteQ, num_actions: int, epsilon_start: float, epsilon_end: float, exploration_frames: int
    ) -> None:
        super().__init__()
        check_in_range("loss.epsilon_start", epsilon_start, 0, 1)
        check_in_range("loss.epsilon_end", epsilon_end, 0, 1)
        check_non_negative("loss.exploration_frames", exploration_frames, unit="frames")
        self.q = q
        self.num_actions = num_actions
        self.schedule = (epsilon_start, epsilon_end, exploration_frames)

    def epsilon(self) -> float:
        """Current epsilon."""
        return linear_schedule(*self.schedule, int(self.frames))

    def epsilon_tensor(self) -> Tensor:
        """Current epsilon as a float32 ``[]`` tensor on the counter's device, computed in
        tensor operations: inside a compiled loss it neither breaks the graph (no ``.item()``)
        nor, changing every frame, recompiles it."""
        start, end, frames = self.schedule
        if frames <= 0:
            return torch.full((), end, device=self.frames.device)
        progress = (self.frames.float() / frames).clamp(max=1.0)
        return start + (end - start) * progress

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """``[N, *obs]`` -> ``[N]`` int64 actions and ``[N]`` zero log-probabilities."""
        action = self.q(observation).argmax(-1)
        n = observation.shape[0]
        if not deterministic:
            epsilon = self.epsilon()
            self._count(n)
            explore = torch.rand(n, device=action.device) < epsilon
            action = torch.where(explore, torch.randint_like(action, self.num_actions), action)
        return action, torch.zeros(n, device=action.device)


class _BoxExplorer(_FrameCounter):
    def __init__(self, action_dim: int, warmup_frames: int) -> None:
        super().__init__()
        check_non_negative("loss.warmup_frames", warmup_frames, unit="frames")
        self.action_dim = action_dim
        self.warmup_frames = warmup_frames

    def warmup_action(self, observation: Tensor) -> Tensor | None:
        """Uniform actions during warm-up (and counts frames); None once warm-up is over."""
        n = observation.shape[0]
        if self._count(n) < self.warmup_frames:
            return torch.rand(n, self.action_dim, device=observation.device) * 2.0 - 1.0
        return None


class NoisyDeterministicPolicy(_BoxExplorer):
    """mu(s) plus Gaussian or Ornstein-Uhlenbeck noise, clipped to [-1, 1] (DDPG, TD3).

    Args:
        actor: The deterministic actor.
        action_dim: Action dims.
        noise_type: ``gaussian`` (TD3) or ``ou`` (Ornstein-Uhlenbeck, theta 0.15, dt 1e-2,
            as in Lillicrap et al. 2016); the OU process runs on across episodes.
        noise_std: Std of the noise, in normalised action units.
        warmup_frames: Frames of uniform random actions before the actor acts.
    """

    def __init__(
        self, actor: DeterministicActor, action_dim: int, noise_type: str, noise_std: float, warmup_frames: int
    ) -> None:
        super().__init__(action_dim, warmup_frames)
        if noise_type not in NOISE_TYPES:
            raise ConfigError(f"loss.noise_type={noise_type!r}: valid: {', '.join(NOISE_TYPES)}")
        check_non_negative("loss.exploration_noise", noise_std)
        self.actor = actor
        self.noise_type = noise_type
        self.noise_std = noise_std
        self._ou: Tensor | None = None

    def get_extra_state(self) -> dict[str, Tensor | None]:
        """The OU process's current value (checkpointed with the module's state)."""
        return {"ou": None if self._ou is None else self._ou.clone()}

    def set_extra_state(self, state: dict[str, Tensor | None]) -> None:
        """Restore :meth:`get_extra_state`."""
        self._ou = state["ou"]

    def _noise(self, like: Tensor) -> Tensor:
        if self.noise_type == "gaussian":
            return torch.randn_like(like) * self.noise_std
        theta, dt = 0.15, 1e-2
        if self._ou is None or self._ou.shape != like.shape:
            self._ou = torch.zeros_like(like)
        self._ou = self._ou - theta * self._ou * dt + self.noise_std * dt**0.5 * torch.randn_like(like)
        return self._ou

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """``[N, *obs]`` -> ``[N, A]`` actions in [-1, 1] and ``[N]`` zero log-probabilities."""
        zeros = torch.zeros(observation.shape[0], device=observation.device)
        if deterministic:
            return self.actor(observation), zeros
        random = self.warmup_action(observation)
        if random is not None:
            return random, zeros
        action = self.actor(observation)
        return (action + self._noise(action)).clamp(-1.0, 1.0), zeros


class SquashedGaussianPolicy(_BoxExplorer):
    """Samples of the SAC actor; its mean squashed by tanh when deterministic.

    Args:
        actor: The squashed Gaussian actor.
        action_dim: Action dims.
        warmup_frames: Frames of uniform random actions before the actor acts.
    """

    def __init__(self, actor: SquashedGaussianActor, action_dim: int, warmup_frames: int) -> None:
        super().__init__(action_dim, warmup_frames)
        self.actor = actor

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """``[N, *obs]`` -> ``[N, A]`` actions in (-1, 1) and ``[N]`` log-probabilities."""
        if not deterministic:
            random = self.warmup_action(observation)
            if random is not None:
                return random, torch.zeros(observation.shape[0], device=observation.device)
        return self.actor(observation, deterministic)
