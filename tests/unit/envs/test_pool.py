"""EnvPool's options in ``env.kwargs``: its thread settings reach its pool and nothing else."""

from __future__ import annotations

import pytest

from rlplat.envs.probe import entry_node
from rlplat.registry import ConfigError

envpool = pytest.importorskip("envpool", reason="the envpool extra is not installed")

from rlplat.envs.pool import EnvPoolTask, EnvPoolVectorEnv  # noqa: E402


def _node(backend: str, **kwargs: object) -> dict:
    return {"name": "gym", "id": "CartPole-v1", "max_episode_steps": None, "kwargs": kwargs, "backend": backend}


def test_thread_options_reach_the_pool_and_not_the_gymnasium_envs():
    node = _node("envpool", num_threads=1, thread_affinity_offset=-1)
    pool = EnvPoolVectorEnv(EnvPoolTask.from_node(node), num_envs=4)
    try:
        assert pool._pool.config["num_threads"] == 1
    finally:
        pool.close()
    assert entry_node(node) == {"name": "gym", "id": "CartPole-v1", "max_episode_steps": None, "kwargs": {}}


def test_without_thread_options_the_pool_takes_a_thread_per_core_up_to_one_per_env():
    pool = EnvPoolVectorEnv(EnvPoolTask.from_node(_node("envpool")), num_envs=1)
    try:
        assert pool._pool.config["num_threads"] == 1
    finally:
        pool.close()


def test_with_gymnasium_envs_every_kwarg_goes_to_the_env():
    assert entry_node(_node("gymnasium", num_threads=1))["kwargs"] == {"num_threads": 1}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"seed": 3}, "env.kwargs.seed=3: rlplat sets EnvPool's seed; set seed"),
        ({"batch_size": 2}, "env.kwargs.batch_size=2: rlplat sets EnvPool's batch_size; set collector.num_envs"),
        ({"g": 9.8}, "env.kwargs.g: EnvPool's 'CartPole-v1' has no such option"),
        ({"num_threads": True}, "env.kwargs.num_threads=True: must be an int >= 1"),
        ({"num_threads": 2.0}, "env.kwargs.num_threads=2.0: must be an int >= 1"),
        ({"thread_affinity_offset": -2}, "env.kwargs.thread_affinity_offset=-2: must be an int >= -1"),
    ],
)
def test_options_rlplat_sets_or_envpool_lacks_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        EnvPoolTask.from_node(_node("envpool", **kwargs))
