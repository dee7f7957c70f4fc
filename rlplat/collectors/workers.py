"""Collection in other processes: what a worker holds, what it receives and what it returns.

A :class:`RolloutWorker` owns a :class:`rlplat.collectors.sync.SyncCollector` over its own envs
and a copy of the policy. The learner sends it :class:`PolicySync` messages (the policy's
``state_dict``, the transforms' states, a version number) and receives a
:class:`WorkerResult` per rollout. The asynchronous collector runs workers in processes of
its own (:mod:`rlplat.collectors.asynchronous`), the Ray collector as Ray actors
(:mod:`rlplat.collectors.ray`); both yield the rollouts the synchronous collector would.

What the copies hold that the learner's policy does not learn, they count: integer buffers of
the policy (e.g. the frames an epsilon-greedy policy acted on, which drive its schedule) are
counters, and each worker returns what it added to them, which the learner adds to its own
(so that a schedule advances with the frames of every worker). The transforms' statistics
(e.g. running observation normalisation) are updated by each worker from its own envs from the
state last sent; the learner keeps the state of the latest rollout it received.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.collectors.base import EnvMaker, Policy
from rlplat.collectors.sync import SyncCollector
from rlplat.envs.base import Episode
from rlplat.registry import ConfigError
from rlplat.transforms.base import TransformLike


@dataclass(frozen=True)
class PolicySync:
    """What the learner sends its workers.

    Attributes:
        version: Rollouts the learner had learned from when it sent these weights.
        policy: The policy's ``state_dict()``, CPU tensors.
        transforms: Each transform's ``state_dict()``, in the order of the env's transforms.
    """

    version: int
    policy: Mapping[str, Tensor]
    transforms: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class WorkerResult:
    """What a worker returns for one rollout.

    Attributes:
        rollout: ``rollout.to_dict()`` of a ``[T, B]`` rollout (nested dicts of tensors), with
            ``policy_version`` (:mod:`rlplat.keys`).
        batch_size: ``[T, B]``.
        version: The version of the weights it acted with.
        episodes: The episodes its envs finished during the rollout.
        transforms: Its transforms' ``state_dict()`` after the rollout.
        counted: Name -> what the rollout added to each integer buffer of the policy.
    """

    rollout: dict[str, Any]
    batch_size: tuple[int, int]
    version: int
    episodes: list[Episode]
    transforms: tuple[Mapping[str, Any], ...]
    counted: dict[str, Tensor]

    def tensordict(self) -> TensorDict:
        """The rollout as a TensorDict ``[T, B]``."""
        return TensorDict(self.rollout, batch_size=list(self.batch_size))


def check_counts(**counts: Any) -> None:
    """Each ``collector.<key>=<value>`` count an integer >= 1.

    Raises:
        ConfigError: naming the first key that is not.
    """
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"collector.{key}={value!r}: must be an integer >= 1")


def policy_module(policy: Policy, collector: str) -> nn.Module:
    """``policy`` as the ``torch.nn.Module`` whose ``state_dict`` workers load.

    Raises:
        ConfigError: when it is not a module, naming ``collector``.
    """
    if not isinstance(policy, nn.Module):
        raise ConfigError(
            f"collector={collector}: the policy ({type(policy).__name__}) acts in worker processes, which load its "
            "weights as a torch.nn.Module's state_dict(), and it is not one; use collector=sync"
        )
    return policy


def cpu_copy(policy: nn.Module) -> nn.Module:
    """A copy of ``policy`` on the CPU, for a worker (the learner's stays where it is)."""
    return copy.deepcopy(policy).to("cpu")


def counters(policy: nn.Module) -> dict[str, Tensor]:
    """Copies of the policy's integer buffers (its counters), by name."""
    return {name: buffer.detach().clone() for name, buffer in policy.named_buffers() if not buffer.is_floating_point()}


def add_counted(policy: nn.Module, counted: Mapping[str, Tensor]) -> None:
    """Add what a worker counted to the learner's ``policy``'s integer buffers."""
    if not counted:
        return
    buffers = dict(policy.named_buffers())
    with torch.no_grad():
        for name, added in counted.items():
            buffers[name] += added.to(buffers[name].device)


def policy_sync(version: int, policy: nn.Module, transforms: Sequence[TransformLike]) -> PolicySync:
    """The learner's current weights and transform states, on the CPU."""
    state = {name: value.detach().to("cpu", copy=True) for name, value in policy.state_dict().items()}
    return PolicySync(version, state, tuple(dict(t.state_dict()) for t in transforms))


def load_transforms(transforms: Sequence[TransformLike], states: Sequence[Mapping[str, Any]]) -> None:
    """Load a copy of each state into its transform (what a queue or Ray's object store hands
    over may be read-only, and a transform may keep the arrays it is given)."""
    for transform, state in zip(transforms, states):
        transform.load_state_dict(copy.deepcopy(state))


class RolloutWorker:
    """Collects rollouts in its own process with a copy of the policy.

    Args:
        make_env: The training envs' maker (rlplat's pickles); its ``transforms`` are this
            worker's copies.
        policy: The worker's copy of the policy, on the CPU.
        seed: Seed of its envs' first reset (env i gets ``seed + i``) and of its torch RNG.
        num_envs: Its envs B.
        steps_per_env: Steps per env per rollout T.
        vectorization: ``sync`` or ``async``, as the synchronous collector's.
        version: The version of the weights ``policy`` holds.
    """

    def __init__(
        self,
        make_env: EnvMaker,
        policy: nn.Module,
        *,
        seed: int,
        num_envs: int,
        steps_per_env: int,
        vectorization: str,
        version: int = 0,
    ) -> None:
        torch.set_num_threads(1)  # one core per worker: the learner and the other workers have theirs
        torch.manual_seed(seed)
        # own copies: what Ray hands an actor may be read-only memory of its object store
        make_env, policy = copy.deepcopy((make_env, policy))
        self.policy, self.transforms, self.version = policy, make_env.transforms, version
        self.collector = SyncCollector(
            make_env,
            policy,  # type: ignore[arg-type]
            total_frames=sys.maxsize,
            device=torch.device("cpu"),
            seed=seed,
            num_envs=num_envs,
            steps_per_env=steps_per_env,
            vectorization=vectorization,
        )
        self._counters = counters(policy)

    def load(self, sync: PolicySync) -> None:
        """Act with the learner's weights and transform states from now on."""
        self.policy.load_state_dict(sync.policy)
        load_transforms(self.transforms, sync.transforms)
        self.version = sync.version
        self._counters = counters(self.policy)

    def rollout(self, sync: PolicySync | None = None) -> WorkerResult:
        """Collect one rollout ``[T, B]``, after loading ``sync`` when given."""
        if sync is not None:
            self.load(sync)
        rollout = self.collector.rollout()
        rollout.set(keys.POLICY_VERSION, torch.full(rollout.batch_size, self.version, dtype=torch.int64))
        now = counters(self.policy)
        counted = {name: now[name] - before for name, before in self._counters.items()}
        self._counters = now
        T, B = rollout.batch_size
        return WorkerResult(
            rollout.to_dict(),
            (T, B),
            self.version,
            self.collector.pop_finished(),
            tuple(dict(t.state_dict()) for t in self.transforms),
            counted,
        )

    def close(self) -> None:
        """Close its envs."""
        self.collector.close()
