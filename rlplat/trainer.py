"""The training loop shared by every algorithm: it receives built parts and runs them.

The parts are built from config by :mod:`rlplat.build`; consoles, trackers and a sweep's
pruning reporter plug in from above as :class:`Callback` objects, so the loop imports none
of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.buffers.base import Buffer, PrioritizedBuffer, RunDirectoryUser
from rlplat.checkpoint import BEST, FINAL, CheckpointError, CheckpointFiles, rng_state, set_rng_state
from rlplat.checkpoint import FORMAT as CHECKPOINT_FORMAT
from rlplat.collectors.base import Acting, Collector, Policy, ReportingCollector
from rlplat.envs.base import Episode, VectorEnvLike, observation_leaves
from rlplat.losses.base import Loss, declared
from rlplat.metrics import FINAL_METRICS, TO_TARGET, TRAIN_SECONDS
from rlplat.optim import Optimizers, lr_factor
from rlplat.settings import CheckpointConfig, TrainerConfig
from rlplat.transforms.base import Transform

EVAL_SEED_OFFSET = 10_000


@dataclass(frozen=True)
class Parts:
    """Everything the loop runs, built and cross-checked by :func:`rlplat.build.build`.

    Attributes:
        loss: The algorithm.
        policy: Acts in collection and evaluation: the loss's ``policy``, or one that
            computes what it computes faster (:mod:`rlplat.accel`).
        gradients: Computes each minibatch's loss output and gradients: :class:`Autograd`
            (the loss's forward, back-propagated), or an accelerated update checked against
            it (:mod:`rlplat.accel`).
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
    policy: Policy
    gradients: Gradients
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


class Gradients(Protocol):
    """How the trainer gets a minibatch's loss output and gradients."""

    def __call__(self, batch: TensorDict) -> TensorDict:
        """The loss output of ``batch`` (what the loss returns), detached, with the gradient of
        its summed ``loss_*`` terms in every trainable parameter's ``.grad`` (replacing what
        was there).

        Args:
            batch: ``[N]`` samples (``[N, L]`` windows) from the buffer.
        """
        ...


class Autograd:
    """The loss's ``forward`` back-propagated by autograd: the definition of every loss's
    gradients, and what the trainer runs unless :mod:`rlplat.accel` has a checked faster
    path for the exact built-in classes.

    Args:
        loss: The loss.
        optimizers: Its optimizers (they zero the gradients: in place in flat buffers, else
            set to None).
    """

    def __init__(self, loss: Loss, optimizers: Optimizers) -> None:
        self.loss, self.optimizers = loss, optimizers

    def __call__(self, batch: TensorDict) -> TensorDict:
        """See :meth:`Gradients.__call__`."""
        losses = self.loss(batch)
        self.optimizers.zero_grad()
        loss_total(losses).backward()
        return losses.detach()


class Callback(Protocol):
    """Hooks the loop calls. A hook may stop training by raising (a sweep's pruner raises
    ``optuna.TrialPruned``); metrics are keyed as logged (``eval/return_mean``).

    Any object with the three methods is a callback (structural typing: rlplat's own
    :class:`rlplat.console.TrainingDisplay`, :class:`rlplat.tracking.records.TrackerCallback`
    and :class:`rlplat.sweep.reporter.TrialReporter` do not import the trainer). A subclass
    of ``Callback`` writes only the hooks it needs: the others do nothing.
    """

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """After each log step (at most once per rollout), and after each evaluation; nothing here."""
        return None

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """After an evaluation's metrics were given to :meth:`on_log`; nothing here."""
        return None

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """After a checkpoint file was written (``best.pt``, the best evaluation, or ``final.pt``); nothing here."""
        return None


_CHECKED_IN_ROLLOUTS = (
    (keys.OBSERVATION, "observation"),
    (keys.NEXT_OBSERVATION, "next observation"),
    (keys.NEXT_REWARD, "reward"),
)
"""The rollout keys checked for NaN and inf (``trainer.nonfinite``), with their names."""


def loss_total(losses: TensorDict) -> Tensor:
    """The sum of a loss output's ``loss_*`` terms, 0-dim (they are scalar tensors: the Loss
    contract); summed from the first term rather than from 0, one operation less."""
    first, *rest = (cast(Tensor, v) for k, v in losses.items() if k.startswith(keys.LOSS_PREFIX))
    return sum(rest, first)


def load_parts_state(parts: Parts, state: Mapping[str, Any]) -> None:
    """Load a checkpoint's states (written by :meth:`Trainer.state_dict`) into freshly built
    ``parts``: the loss's networks, the optimizers, the transforms, the collector and the
    buffer. Loading the same state twice gives the same parts.

    Raises:
        CheckpointError: naming the part whose saved state does not fit the one built from the
            checkpoint's config, as when another version of rlplat or of a plugin wrote it
            (different networks, or optimizers grouped differently).
    """
    loaders: list[tuple[str, Any, Any]] = [
        ("loss", parts.loss.load_state_dict, state["loss"]),
        ("optimizers", parts.optimizers.load_state_dict, state["optimizers"]),
        *(("transforms", t.load_state_dict, saved) for t, saved in zip(parts.transforms, state["transforms"])),
        ("collector", parts.collector.load_state_dict, state["collector"]),
        ("buffer", parts.buffer.load_state_dict, state["buffer"]),
    ]
    for name, load, saved in loaders:
        try:
            load(saved)
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
            reason = " ".join(str(error).split())[:300]
            raise CheckpointError(
                f"the state of its {name} does not fit the {name} built from its config ({type(error).__name__}: "
                f"{reason}); was it written by another version of rlplat or of a plugin?"
            ) from error


def episode_statistics(prefix: str, episodes: Sequence[Episode]) -> dict[str, float]:
    """``<prefix>/return_mean``, ``_std``, ``_min``, ``_max`` (raw undiscounted returns),
    ``<prefix>/episode_length`` (mean, steps) and ``<prefix>/episodes`` (count)."""
    returns = np.array([e.return_ for e in episodes], dtype=np.float64)
    return {
        f"{prefix}/return_mean": float(returns.mean()),
        f"{prefix}/return_std": float(returns.std()),
        f"{prefix}/return_min": float(returns.min()),
        f"{prefix}/return_max": float(returns.max()),
        f"{prefix}/episode_length": float(np.mean([e.length for e in episodes])),
        f"{prefix}/episodes": float(len(episodes)),
    }


@torch.inference_mode()
def evaluate_policy(
    policy: Policy, env: VectorEnvLike, device: torch.device, seed: int, deterministic: bool = True
) -> list[Episode]:
    """One episode on each env of ``env``, acting with ``policy``.

    Args:
        policy: Acts on ``[B, *obs_shape]`` observations.
        env: The evaluation envs (B of them); env i is reset with ``seed + i``.
        device: Device of the policy.
        seed: Seed of the first env's reset.
        deterministic: Act with the policy's mode instead of sampling.

    Returns:
        The first episode of each env, in env order (raw undiscounted return and length in
        env steps).
    """
    observation = env.reset(seed=seed)
    env.pop_finished()
    first: dict[int, Episode] = {}
    acting = Acting(policy, env.num_envs, deterministic)  # a recurrent policy's state, per env
    act = acting.act_function()
    while len(first) < env.num_envs:
        action, _ = act(observation.to(device))
        step = env.step(action)
        acting.episodes_ended(step.terminated | step.truncated)
        observation = step.observation
        for episode in env.pop_finished():
            first.setdefault(episode.env, episode)
    return [first[i] for i in sorted(first)]


@dataclass
class Progress:
    """The loop's own counters, checkpointed with the parts (frames are the collector's).

    Attributes:
        next_eval: Frames at which the next evaluation is due.
        next_log: Frames at which the next log step is due.
        next_checkpoint: Frames at which the next periodic checkpoint is due.
        best_eval: Best evaluation return so far (``best.pt``).
        skipped_updates: Updates dropped for a non-finite loss or gradient
            (``trainer.nonfinite=skip_update``).
        train_s: Seconds spent in :meth:`Trainer.fit` up to the last checkpoint, over every
            process that continued the run, without its callbacks' (console, trackers, videos).
        last: The last logged value of each metric (for the final summary).
    """

    next_eval: int
    next_checkpoint: int
    next_log: int = 0
    best_eval: float = -float("inf")
    skipped_updates: int = 0
    train_s: float = 0.0
    last: dict[str, float] = field(default_factory=dict)


class StopRequest:
    """Set from outside the loop (a signal handler); the loop checks it after each rollout's
    updates, writes a checkpoint and raises :class:`Interrupted`."""

    def __init__(self) -> None:
        self.signal: str | None = None


class Interrupted(Exception):
    """Training stopped on request, after writing a checkpoint.

    Attributes:
        signal: The signal's name, as ``signal.Signals`` names it.
        frames: Frames collected when it stopped.
        checkpoint: The checkpoint written.
    """

    def __init__(self, signal: str, frames: int, checkpoint: Path) -> None:
        super().__init__(f"stopped by {signal} at {frames:,} frames; checkpoint {checkpoint}")
        self.signal, self.frames, self.checkpoint = signal, frames, checkpoint


class TrainingError(RuntimeError):
    """What stops a run in the middle of training with one line (the run ends FAILED)."""


class NonFiniteError(TrainingError):
    """A NaN or inf in observations, rewards, a loss or gradients (``trainer.nonfinite=raise``)."""


class ParameterError(TrainingError):
    """A trainable parameter that the optimizers would not step as plain PyTorch does: one
    added after they were built (in none of them), or one whose gradient they would not see."""


class PriorityError(TrainingError):
    """A prioritized buffer paired with a loss whose output has no ``td_error`` to set priorities from."""


class Trainer:
    """Runs the loop of DESIGN.md over built parts: collect, preprocess, update, log,
    evaluate, checkpoint; resumable from its own checkpoints (:meth:`load_state_dict`).

    Args:
        parts: The built parts (see :class:`Parts`).
        config: The ``trainer`` settings.
        output_dir: The run directory: checkpoints go to its ``checkpoints/``.
        callbacks: Told of logs, evaluations and checkpoints, in this order.
        checkpoint: The ``checkpoint`` settings; None writes only the last one.
        stop: Checked after each rollout's updates; None: never stopped from outside.
    """

    def __init__(
        self,
        parts: Parts,
        config: TrainerConfig,
        output_dir: Path,
        callbacks: Sequence[Callback] = (),
        checkpoint: CheckpointConfig | None = None,
        stop: StopRequest | None = None,
    ) -> None:
        self.parts, self.config, self.callbacks = parts, config, tuple(callbacks)
        self.checkpoint = checkpoint or CheckpointConfig(every_frames=0, keep=1, save_buffer=False)
        self.files = CheckpointFiles(Path(output_dir), self.checkpoint.keep)
        self.stop = stop or StopRequest()
        self.progress = Progress(
            next_eval=config.eval_every_frames or config.total_frames,
            next_checkpoint=self.checkpoint.every_frames or config.total_frames,
        )
        self.last_checkpoint: Path | None = None
        self._stepped = {id(p) for unit in parts.optimizers.units for p in unit.parameters}
        self._fit_start, self._callback_seconds, self._best_due = time.perf_counter(), 0.0, False
        if isinstance(parts.buffer, RunDirectoryUser):  # memory-mapped replay: files in the run directory
            parts.buffer.use_run_directory(Path(output_dir))
        self._prioritized = parts.buffer if isinstance(parts.buffer, PrioritizedBuffer) else None

    def fit(self) -> dict[str, float]:
        """Train until ``trainer.total_frames`` frames (from where a loaded checkpoint left off),
        or until an evaluation reaches ``trainer.target_return``.

        Returns:
            The final metrics, ``eval/return_mean``, ``eval/return_std`` (last evaluation),
            ``rollout/return_mean`` (last logged training episodes), ``time/fps`` (frames per
            second of this process; nan when it trained none), ``time/to_target_s`` (training seconds until an
            evaluation reached ``trainer.target_return``: inf if none did, nan without a
            target), ``frames`` and ``time/train_s``.

        Raises:
            Interrupted: when ``stop`` was set; a checkpoint was written first.
            NonFiniteError: for a NaN or inf with ``trainer.nonfinite=raise``; no checkpoint
                is written after it.
        """
        config, parts, progress = self.config, self.parts, self.progress
        collector, outputs = parts.collector, []
        start, first_frames = time.perf_counter(), collector.frames
        self._fit_start, self._callback_seconds, self._best_due = start, 0.0, False
        # a resumed run that had reached trainer.target_return is over: it trains no further
        for rollout in collector if TO_TARGET not in progress.last else ():  # [T, B]
            frames = collector.frames
            if self._finite_rollout(rollout, frames):  # else skipped (trainer.nonfinite=skip_update): no updates
                self._buffer(rollout)
                frames_before = frames - collector.frames_per_batch
                parts.optimizers.set_lr_factor(lr_factor(config.lr_schedule, frames_before, config.total_frames))
                outputs += [out for batch in parts.buffer.batches() if (out := self._update(batch, frames)) is not None]
                self._check_parameters()
            fps = (frames - first_frames) / (time.perf_counter() - start)
            if self._log_step(outputs, frames, fps):
                outputs = []
            if frames >= progress.next_checkpoint:  # advanced first: the checkpoint holds the next one due
                progress.next_checkpoint += self.checkpoint.every_frames or config.total_frames
                self._write_periodic(frames)
            if self._best_due:  # as the periodic one would be: a run resumed from it keeps the schedule
                self._best_due = False
                self._notify("on_checkpoint", self.files.write(self.state_dict(), BEST), True)
            if self.stop.signal is not None:
                raise Interrupted(self.stop.signal, frames, self._write_periodic(frames))
            if TO_TARGET in progress.last:
                break  # an evaluation reached trainer.target_return
        elapsed, train_seconds = time.perf_counter() - start, self._train_seconds()
        self._write_final(collector.frames)
        nan = float("nan")
        never = float("inf") if config.target_return is not None else nan
        return {
            **{key: progress.last.get(key, nan) for key in FINAL_METRICS},
            TO_TARGET: progress.last.get(TO_TARGET, never),
            # nan when this process trained no frames (a resumed run that was over): no rate to show
            "time/fps": (collector.frames - first_frames) / elapsed if collector.frames > first_frames else nan,
            "frames": float(collector.frames),
            TRAIN_SECONDS: train_seconds,
        }

    def _log_step(self, outputs: list[TensorDict], frames: int, fps: float) -> bool:
        """Log (and evaluate) when due; returns whether it logged."""
        config, progress = self.config, self.progress
        evaluate = frames >= progress.next_eval or frames >= config.total_frames
        if frames < progress.next_log and not evaluate:
            return False
        metrics = {"time/fps": fps, **self._update_metrics(outputs), **self._episode_metrics()}
        if isinstance(self.parts.collector, ReportingCollector):  # e.g. collector/policy_lag
            metrics.update(self.parts.collector.pop_metrics())
        if evaluate:
            metrics.update(self._evaluate())
            progress.next_eval += config.eval_every_frames or config.total_frames
        metrics[TRAIN_SECONDS] = self._train_seconds()  # this step's evaluation included
        target = config.target_return
        if evaluate and target is not None and TO_TARGET not in progress.last:
            if metrics["eval/return_mean"] >= target:
                metrics[TO_TARGET] = metrics[TRAIN_SECONDS]
            elif frames >= config.total_frames:  # never reached: logged too, so that comparisons count the run
                metrics[TO_TARGET] = math.inf
        progress.last.update(metrics)
        self._notify("on_log", metrics, frames)
        progress.next_log = frames + config.log_every_frames
        if evaluate:
            self._notify("on_evaluation", metrics, frames)
        return True

    def _train_seconds(self) -> float:
        """Seconds in :meth:`fit` so far, the earlier processes of a resumed run included,
        without the time its callbacks took (a tracker's wait for its store, a video)."""
        return self.progress.train_s + time.perf_counter() - self._fit_start - self._callback_seconds

    def _notify(self, hook: Literal["on_log", "on_evaluation", "on_checkpoint"], *args: Any) -> None:
        """Call the :class:`Callback` hook ``hook`` of every callback, timing them."""
        start = time.perf_counter()
        for callback in self.callbacks:
            getattr(callback, hook)(*args)
        self._callback_seconds += time.perf_counter() - start

    def _nonfinite(self, what: str, frames: int) -> None:
        """Raise :class:`NonFiniteError` naming ``what``, unless updates are to be skipped."""
        if self.config.nonfinite == "skip_update":
            self.progress.skipped_updates += 1
            return
        kept = f"the last good checkpoint is {self.last_checkpoint}" if self.last_checkpoint else "no checkpoint yet"
        raise NonFiniteError(f"non-finite {what} at {frames:,} frames (trainer.nonfinite=raise); {kept}")

    def _finite_rollout(self, rollout: TensorDict, frames: int) -> bool:
        """Whether the rollout's observations and rewards are finite (else raise or skip it).

        One check for the three: the sum of their sums, read as one Python float, is finite
        unless one of them holds a NaN or inf, or their sum overflows; only then is each
        looked at on its own (an off-policy run checks every frame's rollout).
        """
        checked = [
            (key, what, value)
            for key, what in _CHECKED_IN_ROLLOUTS
            for value in observation_leaves(rollout.get(key))
            if value.is_floating_point()  # uint8 pixels and integer tokens are finite
        ]
        first, *rest = (value.sum() for _, _, value in checked)
        if math.isfinite(float(sum(rest, first))):
            return True
        for key, what, value in checked:
            if not bool(torch.isfinite(value).all()):
                self._nonfinite(f"{what} ({key if isinstance(key, str) else '.'.join(key)}) in the rollout", frames)
                return False
        return True  # finite values whose sum overflowed

    def _buffer(self, rollout: TensorDict) -> None:
        """Preprocess a rollout (e.g. GAE) and buffer it: only the loss's ``in_keys``
        (:class:`rlplat.losses.base.LossModule`) when it declares them, so that minibatches
        carry nothing else."""
        rollout = self.parts.loss.preprocess(rollout)
        in_keys = declared(self.parts.loss).in_keys
        self.parts.buffer.extend(rollout if in_keys is None else rollout.select(*in_keys))

    def _check_parameters(self) -> None:
        """Raise :class:`ParameterError` for a trainable parameter of the loss that no
        optimizer steps (one its code added after the parts were built): plain PyTorch would
        leave it untrained without a word."""
        loss = self.parts.loss
        if all(id(p) in self._stepped for p in loss.parameters() if p.requires_grad):
            return
        pairs = loss.named_parameters() if isinstance(loss, nn.Module) else enumerate(loss.parameters())
        new = [str(name) for name, p in pairs if p.requires_grad and id(p) not in self._stepped]
        raise ParameterError(
            f"the loss's parameter {new[0]} was added after its optimizers were built: none steps it, so it would "
            "never be trained; create every parameter in the loss's __init__"
        )

    def _update(self, batch: TensorDict, frames: int) -> TensorDict | None:
        """One gradient step on ``batch``; returns the loss output and grad norms, detached,
        or None when the step was skipped for a non-finite loss or gradient."""
        loss, optimizers = self.parts.loss, self.parts.optimizers
        losses = self.parts.gradients(batch)
        total = loss_total(losses)
        norms = optimizers.clip_gradients()
        # one check for the loss and every gradient: their sum, read as a Python float (one
        # operation, against four for bool(torch.isfinite(...)))
        if not math.isfinite(float(sum(norms.values(), total))):
            self._nonfinite(self._nonfinite_update(losses, norms), frames)
            return None
        # a loss's delayed groups (TD3's actor) are stepped on their updates only
        members = declared(loss)
        optimizers.step(() if members.delayed_due else members.delayed_groups)
        losses.update(norms)
        loss.after_update()  # e.g. target networks
        self._set_priorities(batch, losses)
        return losses

    def _set_priorities(self, batch: TensorDict, losses: TensorDict) -> None:
        """Hand the loss output's per-sample ``td_error`` to a prioritized buffer, with the
        batch's ``index``; leave its mean in the output (logged as ``train/td_error``).

        Raises:
            PriorityError: when the buffer is prioritized and the loss returns no ``td_error``.
        """
        td_error = cast(Tensor | None, losses.pop(keys.TD_ERROR, None))
        if self._prioritized is not None:
            if td_error is None:
                name = self.parts.config.get("loss", {}).get("name", type(self.parts.loss).__name__)
                raise PriorityError(
                    f"buffer={self.parts.config['buffer']['name']!r} sets priorities from the loss's TD errors, and "
                    f"loss {name!r} returns no {keys.TD_ERROR!r} ([N] |Q(s, a) - y| per sample); use buffer=replay"
                )
            self._prioritized.update_priorities(batch.get(keys.SAMPLE_INDEX), td_error)
        if td_error is not None:
            losses.set(keys.TD_ERROR, td_error.mean())

    @staticmethod
    def _nonfinite_update(losses: TensorDict, norms: Mapping[str, Tensor]) -> str:
        """Which loss terms, or else which gradients, are not finite."""
        terms = [
            str(k)
            for k, v in losses.items()
            if str(k).startswith(keys.LOSS_PREFIX) and not bool(cast(Tensor, v).isfinite().all())
        ]
        if terms:
            return f"loss ({', '.join(terms)})"
        return f"gradient ({', '.join(name for name, norm in norms.items() if not bool(norm.isfinite()))})"

    def _update_metrics(self, outputs: list[TensorDict]) -> dict[str, float]:
        """Means over the updates since the last log: ``loss_<term>`` -> ``loss/<term>``, any
        other key of the loss output -> ``train/<key>``; learning rates and the update count."""
        metrics = {f"train/{k}": v for k, v in self.parts.optimizers.learning_rates().items()}
        metrics["train/updates"] = len(outputs)
        if self.progress.skipped_updates:
            metrics["train/skipped_updates"] = self.progress.skipped_updates
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
        return episode_statistics("rollout", episodes)

    def evaluate(self) -> dict[str, float]:
        """Run the deterministic policy for one episode on each of the ``eval_episodes``
        evaluation envs (seeded ``seed + 10000 + i``, statistics of the transforms frozen).

        Returns:
            ``eval/return_mean``, ``_std``, ``_min``, ``_max`` of the undiscounted raw episode
            returns, ``eval/episode_length`` (mean, steps) and ``eval/episodes``.
        """
        parts = self.parts
        episodes = evaluate_policy(parts.policy, parts.eval_env, parts.device, parts.seed + EVAL_SEED_OFFSET)
        return episode_statistics("eval", episodes)

    def _evaluate(self) -> dict[str, float]:
        metrics = self.evaluate()
        if metrics["eval/return_mean"] > self.progress.best_eval:
            self.progress.best_eval = metrics["eval/return_mean"]
            self._best_due = True  # written at the end of the loop step, its counters advanced
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs: networks, optimizers, transform statistics, collector
        (frames, envs, the observation to act on next), buffer (its transitions with
        ``checkpoint.save_buffer``), RNG states, the loop's counters and the resolved config;
        plain data and tensors only (see :mod:`rlplat.checkpoint`)."""
        parts = self.parts
        return {
            "format": CHECKPOINT_FORMAT,
            "frames": parts.collector.frames,
            "loss": parts.loss.state_dict(),
            "optimizers": parts.optimizers.state_dict(),
            "transforms": [t.state_dict() for t in parts.transforms],
            "collector": parts.collector.state_dict(),
            "buffer": parts.buffer.state_dict(with_data=self.checkpoint.save_buffer),
            "rng": rng_state(),
            "trainer": {**asdict(self.progress), "train_s": self._train_seconds()},
            "config": parts.config,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a checkpoint written by :meth:`state_dict` of a trainer built from
        the same config: the run goes on exactly as it would have (envs in ``sync``
        vectorization; with ``checkpoint.save_buffer`` for off-policy runs).

        Raises:
            CheckpointError: when a part's state does not fit (:func:`load_parts_state`).
        """
        load_parts_state(self.parts, state)
        self.progress = Progress(**state["trainer"])
        self._fit_start, self._callback_seconds = time.perf_counter(), 0.0
        set_rng_state(state["rng"])

    def _write_periodic(self, frames: int) -> Path:
        path = self.files.write_periodic(self.state_dict(), frames)
        self.last_checkpoint = path
        return path

    def _write_final(self, frames: int) -> None:
        """The last periodic checkpoint (for a resume) and ``final.pt``."""
        state = self.state_dict()
        self.last_checkpoint = self.files.write_periodic(state, frames)
        self._notify("on_checkpoint", self.files.write(state, FINAL), False)
