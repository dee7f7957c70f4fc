"""The training loop shared by every algorithm, and the assembly of its parts from config."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict

from rlplat import keys
from rlplat.console import TrainingDisplay
from rlplat.envs.vector import VectorEnv
from rlplat.optim import LR_SCHEDULES, lr_factor
from rlplat.registry import (
    BUFFERS,
    COLLECTORS,
    ENVS,
    LOSSES,
    NETWORKS,
    OPTIMIZERS,
    TRANSFORMS,
    ConfigError,
    PluginError,
    check_kwargs,
)
from rlplat.tracking import Tracker

DEVICES = ("cpu", "cuda", "auto")
EVAL_SEED_OFFSET = 10_000
FINAL_METRICS = ("eval/return_mean", "eval/return_std", "rollout/return_mean", "time/fps")


@dataclass(frozen=True)
class TrainerConfig:
    """The ``trainer`` node; see conf/config.yaml for each key's meaning and unit."""

    total_frames: int = 100_000
    device: str = "auto"
    num_threads: int = 1
    lr_schedule: str = "constant"
    max_grad_norm: float | None = 0.5
    eval_every_frames: int = 20_000
    eval_episodes: int = 10
    log_every_frames: int = 1000
    objective: str = "eval/return_mean"

    def __post_init__(self) -> None:
        def positive_int(key: str, value: Any, minimum: int = 1) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"trainer.{key}={value!r}: must be an integer >= {minimum}")

        positive_int("total_frames", self.total_frames)
        positive_int("num_threads", self.num_threads)
        positive_int("eval_every_frames", self.eval_every_frames, minimum=0)
        positive_int("eval_episodes", self.eval_episodes)
        positive_int("log_every_frames", self.log_every_frames, minimum=0)
        if self.device not in DEVICES:
            raise ConfigError(f"trainer.device={self.device!r}: valid: {', '.join(DEVICES)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"trainer.lr_schedule={self.lr_schedule!r}: valid: {', '.join(LR_SCHEDULES)}"
            )
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ConfigError(f"trainer.max_grad_norm={self.max_grad_norm!r}: must be > 0 or null")
        if self.objective not in FINAL_METRICS:
            raise ConfigError(
                f"trainer.objective={self.objective!r}: valid: {', '.join(FINAL_METRICS)}"
            )

    @classmethod
    def from_node(cls, node: DictConfig) -> TrainerConfig:
        """Check keys against the fields (naming valid ones), then values."""
        values = OmegaConf.to_container(node, resolve=True)
        check_kwargs("trainer", cls, values)
        return cls(**values)


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` -> a torch device; raises ConfigError for missing CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device='cuda': CUDA is not available here; use cpu or auto")
    return torch.device(name)


def action_spaces(loss_cls: type) -> tuple[type, ...]:
    """The action-space types a loss can act in: its ``action_spaces`` attribute, or Box and
    Discrete for a loss that declares none."""
    return getattr(loss_cls, "action_spaces", (gymnasium.spaces.Box, gymnasium.spaces.Discrete))


def check_action_space(loss_name: str, action_space: gymnasium.Space, env_node: dict) -> None:
    """Raise ConfigError when the loss cannot act in the env's action space, naming both
    and the (loadable) losses that can."""
    supported = action_spaces(LOSSES.get(loss_name, key="loss.name"))
    if isinstance(action_space, supported):
        return
    able = []
    for name in LOSSES.names():
        try:
            if isinstance(action_space, action_spaces(LOSSES.get(name))):
                able.append(name)
        except PluginError:  # a broken plugin must not hide this message
            continue
    env = env_node.get("id", env_node.get("name"))
    raise ConfigError(
        f"loss {loss_name!r} cannot act in env {env!r}: it needs "
        f"{' or '.join(t.__name__ for t in supported)} actions, the env has {action_space}. "
        f"Algorithms for this env: {', '.join(able)}."
    )


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Builds every part from a composed config and runs the loop of DESIGN.md.

    Args:
        cfg: The composed rlplat config (see conf/config.yaml).
        output_dir: Directory for checkpoints (the Hydra run directory).
        tracker: MLflow run to record to, or None to record nothing.
        title: Shown on the console display.

    Raises:
        ConfigError: for any invalid config value, before anything runs or is written.
    """

    def __init__(
        self, cfg: DictConfig, output_dir: Path, tracker: Tracker | None = None, title: str = ""
    ) -> None:
        self.cfg = cfg
        self.config = TrainerConfig.from_node(cfg.trainer)
        self.output_dir = Path(output_dir)
        self.tracker = tracker
        self.title = title
        torch.set_num_threads(self.config.num_threads)
        self.device = resolve_device(self.config.device)
        self.seed = int(cfg.seed)
        seed_everything(self.seed)

        env_node = OmegaConf.to_container(cfg.env, resolve=True)
        probe = ENVS.build("env", env_node)
        observation_space, action_space = probe.observation_space, probe.action_space
        probe.close()
        self.transforms = [
            TRANSFORMS.build(f"transforms.{name}", {"name": name, **(kwargs or {})}, observation_space)
            for name, kwargs in OmegaConf.to_container(cfg.transforms, resolve=True).items()
        ]

        def make_single_env():
            return ENVS.build("env", env_node)

        def make_env(num_envs: int, vectorization: str) -> VectorEnv:
            return VectorEnv(make_single_env, num_envs, self.transforms, True, vectorization)

        def network(out_features: int, space: gymnasium.Space = observation_space) -> torch.nn.Module:
            node = OmegaConf.to_container(cfg.network, resolve=True)
            return NETWORKS.build("network", node, space, out_features)

        check_action_space(cfg.loss.get("name"), action_space, env_node)
        self.loss = LOSSES.build(
            "loss", OmegaConf.to_container(cfg.loss, resolve=True), observation_space, action_space, network
        ).to(self.device)
        self.collector = COLLECTORS.build(
            "collector",
            OmegaConf.to_container(cfg.collector, resolve=True),
            make_env=make_env,
            policy=self.loss.policy,
            total_frames=self.config.total_frames,
            device=self.device,
            seed=self.seed,
        )
        self.buffer = BUFFERS.build(
            "buffer",
            OmegaConf.to_container(cfg.buffer, resolve=True),
            frames_per_batch=self.collector.frames_per_batch,
        )
        self.parameters = [p for p in self.loss.parameters() if p.requires_grad]
        self.optimizer = OPTIMIZERS.build(
            "optim", OmegaConf.to_container(cfg.optim, resolve=True), self.parameters
        )
        self.initial_lr = [group["lr"] for group in self.optimizer.param_groups]
        self.eval_env = VectorEnv(make_single_env, self.config.eval_episodes, self.transforms, False)
        self.best_eval = -float("inf")
        self.last_eval = (float("nan"), float("nan"))
        self.final_metrics: dict[str, float] = {}
        self.evaluation_hooks: list[Callable[[dict[str, float], int], None]] = []
        """Called as ``hook(metrics, frames)`` after each evaluation and its logging; a hook
        may stop training by raising (e.g. ``optuna.TrialPruned`` from a pruner)."""
        self.job_start: float | None = None
        """``time.time()`` when the job (or its process) started; when set, ``fit`` logs the
        start-up cost ``time/startup_s``: seconds from then to the first env step."""

    def fit(self) -> float:
        """Train for ``trainer.total_frames`` frames; returns the final ``trainer.objective``."""
        config, collector = self.config, self.collector
        next_eval = config.eval_every_frames or config.total_frames
        next_log = 0
        outputs: list[TensorDict] = []
        returns: list[float] = []
        start = time.perf_counter()
        startup = {}
        if self.job_start is not None:
            startup = {"start-up (s)": time.time() - self.job_start}
            self._log({"time/startup_s": startup["start-up (s)"]}, 0)
        with TrainingDisplay(self.title, config.total_frames) as display:
            for rollout in collector:  # [T, B]
                rollout = self.loss.preprocess(rollout)  # e.g. GAE
                self.buffer.extend(rollout)
                self._set_learning_rate(collector.frames - collector.frames_per_batch)
                outputs += [self._update(batch) for batch in self.buffer.batches()]

                frames = collector.frames
                evaluate = frames >= next_eval or frames >= config.total_frames
                if frames < next_log and not evaluate:
                    continue
                metrics = {"time/fps": frames / (time.perf_counter() - start)}
                metrics.update(self._update_metrics(outputs))
                outputs = []
                episodes = collector.pop_finished()
                if episodes:
                    returns = [e.return_ for e in episodes]
                    metrics["rollout/return_mean"] = float(np.mean(returns))
                    metrics["rollout/episode_length"] = float(np.mean([e.length for e in episodes]))
                    metrics["rollout/episodes"] = len(episodes)
                if evaluate:
                    metrics.update(self._evaluate(frames, display))
                    next_eval += config.eval_every_frames or config.total_frames
                self._log(metrics, frames)
                display.update(frames, metrics)
                next_log = frames + config.log_every_frames
                if evaluate:
                    for hook in self.evaluation_hooks:
                        hook(metrics, frames)

        elapsed = time.perf_counter() - start
        self.final_metrics = {
            "eval/return_mean": self.last_eval[0],
            "eval/return_std": self.last_eval[1],
            "rollout/return_mean": float(np.mean(returns)) if returns else float("nan"),
            "time/fps": collector.frames / elapsed,
        }
        final = self.save_checkpoint("final.pt")
        if self.tracker is not None:
            self.tracker.log_artifact(final, "checkpoints")
            best = self.output_dir / "checkpoints" / "best.pt"
            if best.exists():
                self.tracker.log_artifact(best, "checkpoints")
        display.summary(
            {
                "frames": collector.frames,
                "wall time (s)": elapsed,
                **startup,
                **self.final_metrics,
            }
        )
        return self.final_metrics[config.objective]

    def _update(self, batch: TensorDict) -> TensorDict:
        """One gradient step on ``batch``; returns the loss output, detached."""
        losses = self.loss(batch)
        total = sum(v for k, v in losses.items() if k.startswith(keys.LOSS_PREFIX))
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        if self.config.max_grad_norm is not None:
            losses["grad_norm"] = torch.nn.utils.clip_grad_norm_(self.parameters, self.config.max_grad_norm)
        self.optimizer.step()
        self.loss.after_update()  # e.g. target networks
        return losses.detach()

    def _update_metrics(self, outputs: list[TensorDict]) -> dict[str, float]:
        """Means over the updates since the last log: ``loss_<term>`` -> ``loss/<term>``, any other key
        of the loss output -> ``train/<key>``; plus the learning rate and update count."""
        metrics = {"train/lr": self.optimizer.param_groups[0]["lr"], "train/updates": len(outputs)}
        if outputs:
            for key, value in torch.stack(outputs).mean().items():
                prefix = keys.LOSS_PREFIX
                name = f"loss/{key[len(prefix):]}" if key.startswith(prefix) else f"train/{key}"
                metrics[name] = value.item()
        return metrics

    def _set_learning_rate(self, frames: int) -> None:
        factor = lr_factor(self.config.lr_schedule, frames, self.config.total_frames)
        for group, lr in zip(self.optimizer.param_groups, self.initial_lr):
            group["lr"] = lr * factor

    @torch.inference_mode()
    def evaluate(self) -> tuple[float, float, int]:
        """Run the deterministic policy for one episode on each of the ``eval_episodes``
        evaluation envs (seeded ``seed + 10000 + i``, statistics of the transforms frozen).

        Returns:
            ``(mean, std, episodes)`` of the undiscounted raw episode returns.
        """
        env = self.eval_env
        observation = env.reset(seed=self.seed + EVAL_SEED_OFFSET)
        env.pop_finished()
        first: dict[int, float] = {}
        while len(first) < env.num_envs:
            action, _ = self.loss.policy.act(observation.to(self.device), deterministic=True)
            observation = env.step(action).observation
            for episode in env.pop_finished():
                first.setdefault(episode.env, episode.return_)
        values = np.array(list(first.values()))
        return float(values.mean()), float(values.std()), len(values)

    def _evaluate(self, frames: int, display: TrainingDisplay) -> dict[str, float]:
        mean, std, episodes = self.evaluate()
        self.last_eval = (mean, std)
        display.evaluation(frames, mean, std, episodes)
        if mean > self.best_eval:
            self.best_eval = mean
            self.save_checkpoint("best.pt")
        return {"eval/return_mean": mean, "eval/return_std": std}

    def _log(self, metrics: dict[str, float], frames: int) -> None:
        if self.tracker is not None:
            self.tracker.log_metrics(metrics, step=frames)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks, optimizer, transforms, counters, RNGs."""
        return {
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "transforms": [t.state_dict() for t in self.transforms],
            "collector": self.collector.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
            "best_eval": self.best_eval,
            "config": OmegaConf.to_container(self.cfg, resolve=True),
        }

    def save_checkpoint(self, name: str) -> Path:
        """Write :meth:`state_dict` to ``<output_dir>/checkpoints/<name>``; returns the path."""
        path = self.output_dir / "checkpoints" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), path)
        return path

    def close(self) -> None:
        """Close training and evaluation envs."""
        self.collector.close()
        self.eval_env.close()
