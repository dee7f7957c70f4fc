"""gymnasium's toy-text envs: Discrete observations one-hot, as Stable-Baselines3 encodes them;
their state (a map of bytes among it) checkpointed; a warning for an env without a time limit."""

from __future__ import annotations

import gymnasium
import numpy as np

from rlplat.envs.gym import make_gym
from rlplat.envs.probe import probe_env
from rlplat.envs.vector import env_state, load_env_state


def test_discrete_observations_are_one_hot_vectors():
    env = make_gym("FrozenLake-v1")
    assert env.observation_space == gymnasium.spaces.Box(0.0, 1.0, (16,), np.float32)
    observation, _ = env.reset(seed=0)
    assert observation.dtype == np.float32 and observation.sum() == 1.0 and observation[0] == 1.0  # the start
    observation, *_ = env.step(2)  # right, unless the ice slips
    assert observation.sum() == 1.0 and observation in env.observation_space


def test_a_toy_text_env_state_round_trips_without_its_map_of_bytes():
    env, other = make_gym("FrozenLake-v1"), make_gym("FrozenLake-v1")
    env.reset(seed=1)
    other.reset(seed=2)
    for action in (1, 2, 2):
        env.step(action)
    load_env_state(other, env_state(env))
    assert [env.step(a)[0].argmax() for a in (1, 2, 1, 2)] == [other.step(a)[0].argmax() for a in (1, 2, 1, 2)]


def test_an_env_without_a_time_limit_is_warned_about(capsys):
    probe_env({"name": "gym", "id": "CliffWalking-v1"}, warn=True).close()
    assert "env 'CliffWalking-v1' has no time limit" in capsys.readouterr().err
    probe_env({"name": "gym", "id": "CliffWalking-v1", "max_episode_steps": 100}, warn=True).close()
    probe_env({"name": "gym", "id": "Pendulum-v1"}, warn=True).close()
    assert capsys.readouterr().err == ""
