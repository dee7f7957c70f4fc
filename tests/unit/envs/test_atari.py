"""The atari env entry: preprocessed frames, its time limit in env steps, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from rlplat.envs.atari import make_atari
from rlplat.registry import ConfigError


def test_pong_gives_stacked_grayscale_frames_and_discrete_actions():
    env = make_atari("ALE/Pong-v5", frame_stack=3, screen_size=64)
    try:
        observation, _ = env.reset(seed=0)
        assert env.observation_space.shape == (3, 64, 64) and env.observation_space.dtype == np.uint8
        assert observation.shape == (3, 64, 64) and observation.dtype == np.uint8
        assert env.action_space.n == 6
        again, _ = env.reset(seed=0)
        np.testing.assert_array_equal(observation, again)  # a seed gives the same no-op start
        next_observation, reward, terminated, truncated, _ = env.step(0)
        np.testing.assert_array_equal(next_observation[:-1], observation[1:])  # the stack shifts by one frame
        assert isinstance(reward, float) and not terminated and not truncated
    finally:
        env.close()


def test_the_time_limit_counts_env_steps_of_frame_skip_frames():
    env = make_atari("ALE/Pong-v5", max_episode_steps=7, frame_skip=4)
    try:
        env.reset(seed=0)
        ends = [env.step(0)[3] for _ in range(7)]
        assert ends == [False] * 6 + [True]
        assert env.unwrapped.ale.getEpisodeFrameNumber() >= 7 * 4
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"id": "CartPole-v1"}, "env.id='CartPole-v1' is no Atari game"),
        ({"id": "ALE/NoSuchGame-v5"}, "env.id='ALE/NoSuchGame-v5'"),
        ({"frame_skip": 0}, "env.frame_skip=0: must be an integer >= 1"),
        ({"repeat_action_probability": 1.5}, "env.repeat_action_probability=1.5"),
        ({"kwargs": {"no_such_option": 1}}, "env.kwargs={'no_such_option': 1} rejected"),
    ],
)
def test_bad_values_name_the_key(kwargs, needle):
    with pytest.raises(ConfigError) as error:
        make_atari(**kwargs)
    assert needle in str(error.value)
