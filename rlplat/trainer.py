"""The training loop shared by every algorithm: it receives built parts and runs them.

The parts are built from config by :mod:`rlplat.build`; consoles, trackers and a sweep's
pruning reporter plug in from above as :class:`Callback` objects, so the loop imports none
of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.buffers.base import Buffer
from rlplat.collectors.base import Collector
from rlplat.envs.base import VectorEnvLike
from rlplat.losses.base import Loss
from rlplat.optim import LR_SCHEDULES, Optimizers, lr_factor
from rlplat.registry import ConfigError, check_kwargs
from rlplat.transforms.base import Transform

DEVICES = ("cpu", "cuda", "auto")
EVAL_SEED_OFFSET = 10_000
FINAL_METRICS = ("eval/return_mean", "eval/return_std", "rollout/return_mean", "time/fps")


def _check_int(key: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"trainer.{key}={value!r}: must be an integer >= {minimum}")


@dataclass(frozen=True)
class TrainerConfig:
    """The ``trainer`` node. Its defaults live in conf/config.yaml only, with each key's
    meaning and unit; frames are env steps summed over all envs.

    Raises:
        ConfigError: for a value out of range or not among the valid ones.
    """

    total_frames: int
    device: str
    num_threads: int
    lr_schedule: str
    eval_every_frames: int
    eval_episodes: int
    log_every_frames: int
    objective: str

    def __post_init__(self) -> None:
        for key, minimum in (
            ("total_frames", 1),
            ("num_threads", 1),
            ("eval_every_frames", 0),
            ("eval_episodes", 1),
            ("log_every_frames", 0),
        ):
            _check_int(key, getattr(self, key), minimum)
        for key, valid in (("device", DEVICES), ("lr_schedule", LR_SCHEDULES), ("objective", FINAL_METRICS)):
            if getattr(self, key) not in valid:
                raise ConfigError(f"trainer.{key}={getattr(self, key)!r}: valid: {', '.join(valid)}")

    @classmethod
    def from_node(cls, values: Mapping[str, Any]) -> TrainerConfig:
        """Check keys against the fields (naming the valid ones), then values."""
        check_kwargs("trainer", cls, values)
        return cls(**values)


@dataclass(frozen=True)
class Parts:
    """Everything the loop runs, built and cross-checked by :func:`rlplat.build.build`.

    Attributes:
        loss: The algorithm; its ``policy`` acts in collection and evaluation.
        collector: Yields ``[T, B]`` rollouts until ``trainer.total_frames``.
        buffer: Turns rollouts into the ``[N]`` batches of each update.
        optimizers: One optimizer (and gradient clip) per parameter group of the loss.
        eval_env: ``eval_episodes`` envs for deterministic evaluation (transform
            statistics frozen).
        transforms: The env transforms, shared by training and evaluation envs; their state
            is checkpointed.
        device: Device of the networks and rollouts.
        seed: The run's seed.
        config: The resolved config, stored in every checkpoint.
    """

    loss: Loss
    collector: Collector
    buffer: Buffer
    optimizers: Optimizers
    eval_env: VectorEnvLike
    transforms: tuple[Transform, ...]
    device: torch.device
    seed: int
    config: Mapping[str, Any]

    def close(self) -> None:
        """Close training and evaluation envs."""
        self.collector.close()
        self.eval_env.close()


class Callback(Protocol):
    """Hooks the loop calls; a callback implements all three (a no-op where it has nothing
    to do). A hook may stop training by raising (a sweep's pruner raises
    ``optuna.TrialPruned``); metrics are keyed as logged (``eval/return_mean``).

    Implemented, without importing the trainer, by :class:`rlplat.console.TrainingDisplay`,
    :class:`rlplat.tracking.TrackerCallback` and :class:`rlplat.sweep.reporter.TrialReporter`.
    """

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """After each log step (at most once per rollout), and after each evaluation."""
        ...

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """After an evaluation's metrics were given to :meth:`on_log`."""
        ...

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """After a checkpoint file was written: ``best.pt`` (best evaluation) or ``final.pt``."""
        ...


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Runs the loop of DESIGN.md over built parts: collect, preprocess, update, log,
    evaluate, checkpoint.

    Args:
        parts: The built parts (see :class:`Parts`).
        config: The ``trainer`` settings.
        output_dir: Directory for ``checkpoints/`` (the run directory).
        callbacks: Told of logs, evaluations and checkpoints, in this order.
    """

    def __init__(
        self, parts: Parts, config: TrainerConfig, output_dir: Path, callbacks: Sequence[Callback] = ()
    ) -> None:
        self.parts = parts
        self.config = config
        self.output_dir = Path(output_dir)
        self.callbacks = tuple(callbacks)
        self.best_eval = -float("inf")

    def fit(self) -> dict[str, float]:
        """Train for ``trainer.total_frames`` frames.

        Returns:
            The final metrics: ``eval/return_mean``, ``eval/return_std`` (last evaluation),
            ``rollout/return_mean`` (last logged training episodes), ``time/fps``, ``frames``
            and ``time/train_s``.
        """
        config, collector = self.config, self.parts.collector
        next_eval, next_log = config.eval_every_frames or config.total_frames, 0
        outputs: list[TensorDict] = []
        last: dict[str, float] = {}
        start = time.perf_counter()
        for rollout in collector:  # [T, B]
            rollout = self.parts.loss.preprocess(rollout)  # e.g. GAE
            self.parts.buffer.extend(rollout)
            frames_before = collector.frames - collector.frames_per_batch
            self.parts.optimizers.set_lr_factor(lr_factor(config.lr_schedule, frames_before, config.total_frames))
            outputs += [self._update(batch) for batch in self.parts.buffer.batches()]

            frames = collector.frames
            evaluate = frames >= next_eval or frames >= config.total_frames
            if frames < next_log and not evaluate:
                continue
            metrics = {"time/fps": frames / (time.perf_counter() - start), **self._update_metrics(outputs)}
            metrics.update(self._episode_metrics())
            outputs = []
            if evaluate:
                metrics.update(self._evaluate())
                next_eval += config.eval_every_frames or config.total_frames
            last.update(metrics)
            self._notify("on_log", metrics, frames)
            next_log = frames + config.log_every_frames
            if evaluate:
                self._notify("on_evaluation", metrics, frames)
        elapsed = time.perf_counter() - start
        self.save_checkpoint("final.pt")
        nan = float("nan")
        return {
            **{key: last.get(key, nan) for key in FINAL_METRICS},
            "time/fps": collector.frames / elapsed,
            "frames": float(collector.frames),
            "time/train_s": elapsed,
        }

    def _notify(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(*args)

    def _update(self, batch: TensorDict) -> TensorDict:
        """One gradient step on ``batch``; returns the loss output and grad norms, detached."""
        loss, optimizers = self.parts.loss, self.parts.optimizers
        losses = loss(batch)
        # the loss_* terms are scalar tensors (the Loss contract), so their sum is one too
        total = cast(Tensor, sum(v for k, v in losses.items() if k.startswith(keys.LOSS_PREFIX)))
        optimizers.zero_grad()
        total.backward()
        losses.update(optimizers.step())
        loss.after_update()  # e.g. target networks
        return losses.detach()

    def _update_metrics(self, outputs: list[TensorDict]) -> dict[str, float]:
        """Means over the updates since the last log: ``loss_<term>`` -> ``loss/<term>``, any
        other key of the loss output -> ``train/<key>``; learning rates and the update count."""
        metrics = {f"train/{k}": v for k, v in self.parts.optimizers.learning_rates().items()}
        metrics["train/updates"] = len(outputs)
        if outputs:
            for key, value in TensorDict.stack(outputs).mean().items():
                prefix = keys.LOSS_PREFIX
                name = f"loss/{key[len(prefix) :]}" if key.startswith(prefix) else f"train/{key}"
                metrics[name] = value.item()
        return metrics

    def _episode_metrics(self) -> dict[str, float]:
        """Raw return and length of the training episodes finished since the last log."""
        episodes = self.parts.collector.pop_finished()
        if not episodes:
            return {}
        return {
            "rollout/return_mean": float(np.mean([e.return_ for e in episodes])),
            "rollout/episode_length": float(np.mean([e.length for e in episodes])),
            "rollout/episodes": len(episodes),
        }

    @torch.inference_mode()
    def evaluate(self) -> tuple[float, float, int]:
        """Run the deterministic policy for one episode on each of the ``eval_episodes``
        evaluation envs (seeded ``seed + 10000 + i``, statistics of the transforms frozen).

        Returns:
            ``(mean, std, episodes)`` of the undiscounted raw episode returns.
        """
        env, policy, device = self.parts.eval_env, self.parts.loss.policy, self.parts.device
        observation = env.reset(seed=self.parts.seed + EVAL_SEED_OFFSET)
        env.pop_finished()
        first: dict[int, float] = {}
        while len(first) < env.num_envs:
            action, _ = policy.act(observation.to(device), deterministic=True)
            observation = env.step(action).observation
            for episode in env.pop_finished():
                first.setdefault(episode.env, episode.return_)
        values = np.array(list(first.values()))
        return float(values.mean()), float(values.std()), len(values)

    def _evaluate(self) -> dict[str, float]:
        mean, std, episodes = self.evaluate()
        if mean > self.best_eval:
            self.best_eval = mean
            self.save_checkpoint("best.pt")
        return {"eval/return_mean": mean, "eval/return_std": std, "eval/episodes": episodes}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks, optimizers, transforms, counters, RNGs."""
        parts = self.parts
        return {
            "loss": parts.loss.state_dict(),
            "optimizer": parts.optimizers.state_dict(),
            "transforms": [t.state_dict() for t in parts.transforms],
            "collector": parts.collector.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
            "best_eval": self.best_eval,
            "config": dict(parts.config),
        }

    def save_checkpoint(self, name: str) -> Path:
        """Write :meth:`state_dict` to ``<output_dir>/checkpoints/<name>``; returns the path."""
        path = self.output_dir / "checkpoints" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), path)
        self._notify("on_checkpoint", path, name == "best.pt")
        return path
