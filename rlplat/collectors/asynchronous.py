"""Asynchronous collector: worker processes collect while the learner updates (IMPALA's actors).

Each of ``num_workers`` processes runs ``num_envs`` envs and a copy of the policy
(:class:`rlplat.collectors.workers.RolloutWorker`) and collects rollouts without waiting for
the learner; the learner takes them in the order they arrive, one ``[T, B]`` rollout (of one
worker) per iteration, and sends its weights to the workers every ``sync_every`` rollouts it
learned from. A worker loads the newest weights it was sent before each rollout, so a rollout
was collected with weights some updates older than the learner's: each step carries the
version it was collected with (``policy_version`` (:mod:`rlplat.keys`)) and the collector logs the
lag (``collector/policy_lag``). On-policy losses refuse it unless they correct for the lag
(``algo=impala``, V-trace: Espeholt et al. 2018); off-policy losses replay older data anyway.

Processes are started with ``spawn`` (a fresh interpreter: the learner's threads and open
files are not forked), the envs' maker and the policy sent once, pickled with cloudpickle.
Rollouts and weights go through ``multiprocessing`` queues as bytes pickled by value (not
torch's shared-memory handles, which need the sending process alive and serving them until the
receiver has read them). The rollouts' queue holds at most one rollout per worker, so a worker
waits when the learner falls behind.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, cast

import cloudpickle
import torch
from tensordict import TensorDict

from rlplat.collectors.base import EnvMaker, Policy
from rlplat.collectors.workers import (
    PolicySync,
    RolloutWorker,
    WorkerResult,
    add_counted,
    check_counts,
    cpu_copy,
    load_transforms,
    policy_module,
    policy_sync,
)
from rlplat.envs.base import Episode
from rlplat.signals import sigint_ignored

POLL_SECONDS = 1.0
"""How often the learner, waiting for a rollout, checks that every worker is alive."""
JOIN_SECONDS = 10.0
"""How long :meth:`AsyncCollector.close` waits for a worker to exit before killing it."""


class AsyncCollector:
    """Rollouts from worker processes that collect while the learner updates.

    Implements :class:`rlplat.collectors.base.Collector` and
    :class:`rlplat.collectors.base.ReportingCollector`. Each yielded rollout is one worker's
    ``[T, B]`` = ``[steps_per_env, num_envs]`` (keys of the synchronous collector, plus
    ``policy_version`` (:mod:`rlplat.keys`)), on ``device``; ``num_workers * num_envs`` envs step
    at once. Not reproducible bit for bit: the order in which rollouts arrive depends on timing.

    Args:
        make_env: Factory for the training envs (supplied by rlplat; pickled to the workers).
        policy: The learner's policy, a ``torch.nn.Module`` (supplied by rlplat); each worker
            acts with a CPU copy.
        total_frames: Frames after which iteration stops (rollouts collected beyond are dropped).
        device: Device of the yielded rollouts.
        seed: Worker w's env i is reset first with ``seed + w * num_envs + i``.
        num_workers: Worker processes, one core each.
        num_envs: Envs per worker B.
        steps_per_env: Env steps per env per rollout T.
        vectorization: How each worker steps its envs: ``sync`` or ``async``.
        sync_every: Rollouts learned from between two sends of the weights to the workers.

    Attributes:
        acts_in_workers: True (see :class:`rlplat.collectors.base.CollectorFactory`).
        asynchronous: True: on-policy losses refuse it unless they correct for the lag.

    Raises:
        ConfigError: for a count below 1, naming ``collector.<key>``; for a policy that is not
            a ``torch.nn.Module``.
        RuntimeError: while iterating, when a worker failed (with its traceback) or exited.
    """

    acts_in_workers = True
    asynchronous = True

    def __init__(
        self,
        make_env: EnvMaker,
        policy: Policy,
        total_frames: int,
        device: torch.device,
        seed: int,
        num_workers: int = 2,
        num_envs: int = 8,
        steps_per_env: int = 32,
        vectorization: str = "sync",
        sync_every: int = 1,
    ) -> None:
        check_counts(num_workers=num_workers, num_envs=num_envs, steps_per_env=steps_per_env, sync_every=sync_every)
        self.policy = policy_module(policy, "async")
        self.make_env, self.total_frames, self.device, self.seed = make_env, int(total_frames), device, seed
        self.worker_options: dict[str, Any] = {
            "num_envs": num_envs,
            "steps_per_env": steps_per_env,
            "vectorization": vectorization,
        }
        self.num_workers, self.sync_every = num_workers, sync_every
        self.rollout_shape = (steps_per_env, num_envs)
        self.frames_per_batch = steps_per_env * num_envs
        self.frames = 0
        self.version = 0  # rollouts learned from
        self._finished: list[Episode] = []
        self._lags: list[int] = []
        self._processes: list[Any] = []
        self._inboxes: list[Any] = []
        self._results: Any = None
        self._stop: Any = None

    def __iter__(self) -> Iterator[TensorDict]:
        if not self._processes:
            self._start()
        while self.frames < self.total_frames:
            result = self._receive()
            self._lags.append(self.version - result.version)
            add_counted(self.policy, result.counted)
            load_transforms(self.make_env.transforms, result.transforms)
            self._finished += result.episodes
            self.frames += self.frames_per_batch
            rollout = result.tensordict()
            yield rollout if self.device.type == "cpu" else rollout.to(self.device, non_blocking=True)
            self.version += 1  # the learner has updated on it
            if self.version % self.sync_every == 0:
                self._send(policy_sync(self.version, self.policy, self.make_env.transforms))

    def _start(self) -> None:
        """Start the workers with the policy as it is now (after a checkpoint was loaded)."""
        context = multiprocessing.get_context("spawn")
        self._results, self._stop = context.Queue(maxsize=self.num_workers), context.Event()
        payload = cloudpickle.dumps((self.make_env, cpu_copy(self.policy)))
        num_envs = self.worker_options["num_envs"]
        with sigint_ignored():  # by the workers: a Ctrl-C stops the run, which then closes them
            for index in range(self.num_workers):
                inbox = context.Queue()
                seed = self.seed + self.frames + index * int(num_envs)  # a resumed run starts new episodes
                options = {**self.worker_options, "seed": seed, "version": self.version}
                process = context.Process(
                    target=_work,
                    args=(payload, options, index, inbox, self._results, self._stop),
                    name=f"rlplat-collector-{index}",
                    daemon=True,
                )
                process.start()
                self._processes.append(process)
                self._inboxes.append(inbox)

    def _send(self, sync: PolicySync) -> None:
        message = pickle.dumps(sync, protocol=pickle.HIGHEST_PROTOCOL)
        for inbox in self._inboxes:
            inbox.put(message)

    def _receive(self) -> WorkerResult:
        """The next rollout of any worker; raises when a worker failed or exited."""
        while True:
            try:
                message = self._results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                for index, process in enumerate(self._processes):
                    if not process.is_alive():
                        raise RuntimeError(
                            f"collector=async: worker {index} exited (code {process.exitcode}) before sending a rollout"
                        ) from None
                continue
            if isinstance(message, bytes):
                return cast(WorkerResult, pickle.loads(message))
            index, text = message
            raise RuntimeError(f"collector=async: worker {index} failed:\n{text}")

    def pop_finished(self) -> list[Episode]:
        """Episodes finished in every worker and received since the last call."""
        finished, self._finished = self._finished, []
        return finished

    def pop_metrics(self) -> dict[str, float]:
        """``collector/policy_lag``: the mean, over the rollouts yielded since the last call, of
        how many rollouts the learner had learned from since the weights each was collected with
        were sent (0: collected with the learner's weights)."""
        if not self._lags:
            return {}
        lags, self._lags = self._lags, []
        return {"collector/policy_lag": sum(lags) / len(lags)}

    def state_dict(self) -> dict[str, Any]:
        """Frames collected and the weights' version; the workers' envs are not saved (a
        resumed run starts new episodes, reset with seeds offset by the frames collected)."""
        return {"frames": self.frames, "version": self.version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (before iterating: the workers start then)."""
        self.frames = int(state["frames"])
        self.version = int(state.get("version", 0))

    def close(self) -> None:
        """Stop the workers (they close their envs), killing any that has not exited
        :data:`JOIN_SECONDS` after the stop."""
        if self._stop is None:
            return
        self._stop.set()
        for inbox in self._inboxes:  # weights a stopped worker will not read: exit without sending them
            inbox.cancel_join_thread()
        deadline = time.monotonic() + JOIN_SECONDS
        for process in self._processes:  # a worker waiting to put a rollout sees the stop within POLL_SECONDS
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        self._processes, self._inboxes, self._stop = [], [], None


def _work(payload: bytes, options: dict[str, Any], index: int, inbox: Any, results: Any, stop: Any) -> None:
    """A worker process: collect rollouts until ``stop`` is set, loading the newest weights
    sent before each; a failure is sent as ``(index, traceback)``."""
    worker = None
    try:
        make_env, policy = cloudpickle.loads(payload)
        worker = RolloutWorker(make_env, policy, **options)
        while not stop.is_set():
            result = pickle.dumps(worker.rollout(_newest(inbox)), protocol=pickle.HIGHEST_PROTOCOL)
            while not stop.is_set():
                try:
                    results.put(result, timeout=POLL_SECONDS)
                    break
                except queue.Full:
                    continue
    except BaseException:  # noqa: BLE001 - sent to the learner, which raises it
        if not stop.is_set():
            results.put((index, traceback.format_exc()))
    finally:
        if stop.is_set():  # exit without waiting for the learner to read what is left (a failure's traceback it reads)
            results.cancel_join_thread()
        if worker is not None:
            worker.close()
        sys.stdout.flush()


def _newest(inbox: Any) -> PolicySync | None:
    """The newest weights waiting in ``inbox`` (older ones dropped), or None."""
    newest = None
    while True:
        try:
            newest = inbox.get_nowait()
        except queue.Empty:
            return None if newest is None else cast(PolicySync, pickle.loads(newest))
