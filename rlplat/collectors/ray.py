"""Ray collector: collection workers as Ray actors, on this machine or on a Ray cluster.

Each of ``num_workers`` Ray actors (:class:`rlplat.collectors.workers.RolloutWorker`) runs
``num_envs / num_workers`` envs and a copy of the policy. For every rollout the learner puts its weights
(and the transforms' states) in Ray's object store once, every worker loads them and collects
``T`` steps, and the learner joins the workers' rollouts side by side into one ``[T,
num_envs]`` rollout: the synchronous collector's, with its envs spread over processes or
machines (a preset's ``collector.num_envs`` keeps its meaning). The weights are the learner's
own, so on-policy losses (PPO) take it.

Ray is the engine (scheduling, transport, the cluster): ``pip install 'rlplat[ray]'``. With
``address`` null a local Ray instance is started (and shut down at the end); with
``address=auto`` (a machine of a running cluster) or ``ray://<head>:10001`` (Ray Client), the
workers run on the cluster, whose nodes need rlplat and the env's packages installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

import torch
from tensordict import TensorDict

from rlplat.collectors.base import EnvMaker, Policy
from rlplat.collectors.workers import (
    RolloutWorker,
    add_counted,
    check_counts,
    cpu_copy,
    load_transforms,
    policy_module,
    policy_sync,
)
from rlplat.envs.base import Episode
from rlplat.registry import ConfigError
from rlplat.signals import sigint_ignored


class RayCollector:
    """Rollouts ``[T, num_envs]`` from Ray actors that act with the learner's weights.

    Implements :class:`rlplat.collectors.base.Collector`. With ``E = num_envs / num_workers``,
    worker w's envs are columns ``w * E`` to ``(w + 1) * E - 1`` of each rollout; keys as the synchronous
    collector's (plus ``policy_version`` (:mod:`rlplat.keys`), always the learner's: no lag).

    Args:
        make_env: Factory for the training envs (supplied by rlplat; sent to the actors).
        policy: The learner's policy, a ``torch.nn.Module`` (supplied by rlplat).
        total_frames: Frames after which iteration stops.
        device: Device of the yielded rollouts.
        seed: Env i (column i) is reset first with ``seed + i``, as the synchronous collector's.
        num_workers: Ray actors.
        num_envs: Envs B of each rollout, split evenly over the workers.
        steps_per_env: Env steps per env per rollout T.
        vectorization: How each worker steps its envs: ``sync`` or ``async``.
        address: The Ray cluster to join (``auto``, ``ray://host:port``), or None for a local
            instance (or the one this process already joined).
        num_cpus: CPUs Ray reserves per worker.

    Attributes:
        acts_in_workers: True (see :class:`rlplat.collectors.base.CollectorFactory`).

    Raises:
        ConfigError: when Ray is not installed (naming the extra); for a count below 1, naming
            ``collector.<key>``; for ``num_envs`` not a multiple of ``num_workers``; for a
            policy that is not a ``torch.nn.Module``.
    """

    acts_in_workers = True

    def __init__(
        self,
        make_env: EnvMaker,
        policy: Policy,
        total_frames: int,
        device: torch.device,
        seed: int,
        num_workers: int = 2,
        num_envs: int = 8,
        steps_per_env: int = 256,
        vectorization: str = "sync",
        address: str | None = None,
        num_cpus: float = 1,
    ) -> None:
        check_counts(num_workers=num_workers, num_envs=num_envs, steps_per_env=steps_per_env)
        if num_envs % num_workers:
            raise ConfigError(
                f"collector.num_envs={num_envs}: the envs of each rollout are split evenly over "
                f"collector.num_workers={num_workers}; use a multiple of it"
            )
        if not num_cpus > 0:
            raise ConfigError(f"collector.num_cpus={num_cpus!r}: must be a number of CPUs > 0")
        try:
            import ray
        except ImportError as error:
            raise ConfigError(
                f"collector=ray needs Ray ({error}): pip install 'rlplat[ray]', or use collector=sync or async"
            ) from error
        self._ray = ray
        self.policy = policy_module(policy, "ray")
        self.make_env, self.total_frames, self.device, self.seed = make_env, int(total_frames), device, seed
        per_worker = num_envs // num_workers
        self.worker_options: dict[str, Any] = {
            "num_envs": per_worker,
            "steps_per_env": steps_per_env,
            "vectorization": vectorization,
        }
        self.num_workers, self.address, self.num_cpus = num_workers, address, num_cpus
        self.rollout_shape = (steps_per_env, num_envs)
        self.frames_per_batch = steps_per_env * num_envs
        self.frames = 0
        self.version = 0
        self._finished: list[Episode] = []
        self._workers: list[Any] = []
        self._started_ray = False

    def __iter__(self) -> Iterator[TensorDict]:
        if not self._workers:
            self._start()
        ray = self._ray
        while self.frames < self.total_frames:
            weights = ray.put(policy_sync(self.version, self.policy, self.make_env.transforms))
            results = ray.get([worker.rollout.remote(weights) for worker in self._workers])
            per_worker = int(self.worker_options["num_envs"])
            for index, result in enumerate(results):  # a worker's env i is column index * per_worker + i
                add_counted(self.policy, result.counted)
                self._finished += [e._replace(env=e.env + index * per_worker) for e in result.episodes]
            load_transforms(self.make_env.transforms, results[0].transforms)
            rollout = cast(TensorDict, torch.cat([result.tensordict() for result in results], dim=1))
            self.frames += self.frames_per_batch
            yield rollout if self.device.type == "cpu" else rollout.to(self.device, non_blocking=True)
            self.version += 1

    def _start(self) -> None:
        """Join (or start) Ray and start the actors with the policy as it is now."""
        ray = self._ray
        if not ray.is_initialized():
            with sigint_ignored():  # by Ray's processes: a Ctrl-C stops the run, which then shuts them down
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            self._started_ray = True
        actor = ray.remote(num_cpus=self.num_cpus)(RolloutWorker)
        policy = ray.put(cpu_copy(self.policy))
        num_envs = int(self.worker_options["num_envs"])
        self._workers = [
            actor.remote(
                self.make_env,
                policy,
                seed=self.seed + self.frames + index * num_envs,
                version=self.version,
                **self.worker_options,
            )
            for index in range(self.num_workers)
        ]

    def pop_finished(self) -> list[Episode]:
        """Episodes finished in every worker since the last call."""
        finished, self._finished = self._finished, []
        return finished

    def state_dict(self) -> dict[str, Any]:
        """Frames collected and the weights' version; the actors' envs are not saved (a resumed
        run starts new episodes, reset with seeds offset by the frames collected)."""
        return {"frames": self.frames, "version": self.version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (before iterating: the actors start then)."""
        self.frames = int(state["frames"])
        self.version = int(state.get("version", 0))

    def close(self) -> None:
        """Close the actors' envs and end them; shut Ray down if this collector started it."""
        ray = self._ray
        if self._workers:
            ray.get([worker.close.remote() for worker in self._workers])
            for worker in self._workers:
                ray.kill(worker)
            self._workers = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
