"""The collectors whose policy acts in other processes: a worker's rollouts are the synchronous
collector's, the asynchronous collector's workers load the learner's newest weights and report
their lag, counters and transform statistics come back to the learner, and Ray's workers join
their envs into the synchronous collector's rollout."""

from __future__ import annotations

import itertools

import gymnasium
import pytest
import torch
from torch import nn

from rlplat import keys
from rlplat.build import TrainingEnvs, single_env
from rlplat.collectors.asynchronous import AsyncCollector
from rlplat.collectors.sync import SyncCollector
from rlplat.collectors.workers import RolloutWorker, policy_sync
from rlplat.registry import ConfigError
from rlplat.testing.collectors import ArgmaxPolicy
from rlplat.transforms.normalize import ObservationNorm

CARTPOLE = {"name": "gym", "id": "CartPole-v1", "max_episode_steps": 50}


def envs(transforms: tuple = ()) -> TrainingEnvs:
    return TrainingEnvs(single_env(CARTPOLE, transforms), transforms)


def sync_rollouts(policy: nn.Module, num_envs: int, steps: int, count: int, seed: int = 3) -> list:
    collector = SyncCollector(envs(), policy, 10**9, torch.device("cpu"), seed, num_envs, steps)
    try:
        return list(itertools.islice(collector, count))
    finally:
        collector.close()


def test_a_workers_rollouts_are_the_synchronous_collectors_and_its_counters_come_back():
    torch.manual_seed(0)
    policy = ArgmaxPolicy(4, 2)
    reference = ArgmaxPolicy(4, 2)
    reference.load_state_dict(policy.state_dict())
    expected = sync_rollouts(reference, 4, 16, 2)
    worker = RolloutWorker(envs(), policy, seed=3, num_envs=4, steps_per_env=16, vectorization="sync")
    try:
        results = [worker.rollout(), worker.rollout()]
    finally:
        worker.close()
    for result, rollout in zip(results, expected):
        got = result.tensordict()
        assert (got.exclude(keys.POLICY_VERSION) == rollout).all()
        assert torch.equal(got[keys.POLICY_VERSION], torch.zeros(16, 4, dtype=torch.int64))
        assert result.counted == {"frames": torch.tensor(64)}  # 16 steps x 4 envs per rollout


def test_a_worker_loads_the_weights_and_transform_statistics_it_is_sent():
    space = gymnasium.make("CartPole-v1").observation_space
    learner_norm, learner = ObservationNorm(space), ArgmaxPolicy(4, 2)
    with torch.no_grad():
        learner.linear.weight.zero_()
        learner.linear.bias.copy_(torch.tensor([0.0, 1.0]))  # always action 1
    worker = RolloutWorker(envs((ObservationNorm(space),)), ArgmaxPolicy(4, 2), seed=0, num_envs=2, steps_per_env=8,
                           vectorization="sync")  # fmt: skip
    try:
        result = worker.rollout(policy_sync(7, learner, (learner_norm,)))
    finally:
        worker.close()
    rollout = result.tensordict()
    assert (rollout[keys.ACTION] == 1).all()
    assert (rollout[keys.POLICY_VERSION] == 7).all() and result.version == 7
    (state,) = result.transforms
    assert float(state["stats.count"]) == pytest.approx(1e-4 + 2 + 16)  # reset, then 8 steps of 2 envs
    assert not torch.equal(state["stats.mean"], learner_norm.state_dict()["stats.mean"])


def test_the_asynchronous_collector_acts_with_the_newest_weights_it_sent_and_logs_the_lag():
    torch.manual_seed(0)
    policy = ArgmaxPolicy(4, 2)
    with torch.no_grad():
        policy.linear.weight.zero_()
        policy.linear.bias.copy_(torch.tensor([1.0, 0.0]))  # action 0 until the learner changes it
    collector = AsyncCollector(envs(), policy, 24 * 16, torch.device("cpu"), seed=0, num_workers=2, num_envs=2,
                               steps_per_env=8)  # fmt: skip
    seen = []
    try:
        for index, rollout in enumerate(collector):
            assert rollout.batch_size == (8, 2) and rollout[keys.POLICY_VERSION].dtype == torch.int64
            version = int(rollout[keys.POLICY_VERSION][0, 0])
            assert (rollout[keys.POLICY_VERSION] == version).all() and version <= index
            seen.append((version, int(rollout[keys.ACTION].float().mean().round())))
            if index == 2:  # the learner's update after its third rollout: always action 1
                with torch.no_grad():
                    policy.linear.bias.copy_(torch.tensor([0.0, 1.0]))
        metrics = collector.pop_metrics()
    finally:
        collector.close()
    assert collector.frames == 24 * 16 and len(seen) == 24
    assert all(action == (1 if version >= 3 else 0) for version, action in seen)  # versions 0-2: the old weights
    assert seen[-1][0] >= 3  # the new weights reached the workers
    assert 0 <= metrics["collector/policy_lag"] <= 4
    assert int(policy.frames) == 24 * 16  # each worker's counted frames were added to the learner's


def test_the_asynchronous_collector_refuses_a_policy_that_is_not_a_module_and_bad_counts():
    class NotAModule:
        def act(self, observation, deterministic=False):  # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(ConfigError, match=r"collector=async: the policy \(NotAModule\)"):
        AsyncCollector(envs(), NotAModule(), 100, torch.device("cpu"), 0)
    with pytest.raises(ConfigError, match=r"collector.num_workers=0: must be an integer >= 1"):
        AsyncCollector(envs(), ArgmaxPolicy(4, 2), 100, torch.device("cpu"), 0, num_workers=0)


def test_a_failing_worker_is_reported_with_its_traceback():
    broken = TrainingEnvs(single_env({**CARTPOLE, "id": "CartPole-v1"}, ()), ())
    collector = AsyncCollector(broken, ArgmaxPolicy(4, 2), 100, torch.device("cpu"), 0, num_workers=1, num_envs=1,
                               steps_per_env=4, vectorization="bogus")  # fmt: skip
    try:
        with pytest.raises(
            RuntimeError, match=r"(?s)collector=async: worker 0 failed:.*collector.vectorization='bogus'"
        ):
            next(iter(collector))
    finally:
        collector.close()


def test_the_ray_collector_joins_its_workers_envs_into_the_synchronous_collectors_rollout(local_ray):
    from rlplat.collectors.ray import RayCollector

    torch.manual_seed(0)
    policy = ArgmaxPolicy(4, 2)
    reference = ArgmaxPolicy(4, 2)
    reference.load_state_dict(policy.state_dict())
    expected = sync_rollouts(reference, 4, 16, 2)
    with pytest.raises(ConfigError, match=r"collector.num_envs=3: .* collector.num_workers=2; use a multiple of it"):
        RayCollector(envs(), policy, 10**9, torch.device("cpu"), 3, num_envs=3)
    collector = RayCollector(envs(), policy, 128, torch.device("cpu"), 3, num_workers=2, num_envs=4, steps_per_env=16,
                             num_cpus=0.5)  # fmt: skip
    try:
        rollouts = list(collector)
    finally:
        collector.close()
    assert len(rollouts) == 2 and collector.frames == 128
    for got, rollout in zip(rollouts, expected):
        assert (got.exclude(keys.POLICY_VERSION) == rollout).all()
    assert int(policy.frames) == 128
