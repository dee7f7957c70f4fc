"""The env adapter across autoreset: true next observations, terminated and truncated apart."""

from __future__ import annotations

import io

import gymnasium
import numpy as np
import pytest
import torch

from rlplat import keys
from rlplat.collectors.sync import SyncCollector
from rlplat.envs.vector import VectorEnv
from rlplat.registry import ConfigError


def reference_episode(env_id: str, seed: int, action, steps: int, **make_kwargs):
    """Step one plain gymnasium env: observations after each step and the reset that follows."""
    env = gymnasium.make(env_id, **make_kwargs)
    env.reset(seed=seed)
    for t in range(steps):
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            reset_obs, _ = env.reset()
            return t, obs, reset_obs, terminated, truncated
    raise AssertionError("episode did not end")


def test_truncation_gives_final_observation_and_bootstrap_flags():
    make = lambda: gymnasium.make("Pendulum-v1", max_episode_steps=5)  # noqa: E731
    env = VectorEnv(make, num_envs=2)
    env.reset(seed=0)
    zero = torch.zeros(2, 1)  # normalised 0 is torque 0 in [-2, 2]
    for _ in range(5):
        step = env.step(zero)
    for i in range(2):
        end, final_obs, reset_obs, terminated, truncated = reference_episode(
            "Pendulum-v1", i, np.zeros(1, np.float32), 10, max_episode_steps=5
        )
        assert end == 4 and truncated and not terminated
        np.testing.assert_allclose(step.next_observation[i].numpy(), final_obs, rtol=1e-6)
        np.testing.assert_allclose(step.observation[i].numpy(), reset_obs, rtol=1e-6)
    assert step.truncated.all() and not step.terminated.any()
    assert step.truncated.shape == (2, 1) and step.reward.shape == (2, 1)
    assert [e.length for e in env.pop_finished()] == [5, 5]


def test_termination_gives_final_observation_and_no_bootstrap_flags():
    env = VectorEnv(lambda: gymnasium.make("CartPole-v1"), num_envs=1)
    env.reset(seed=3)
    end, final_obs, reset_obs, terminated, truncated = reference_episode("CartPole-v1", 3, 1, 100)
    assert terminated and not truncated
    for t in range(end + 1):
        step = env.step(torch.ones(1, dtype=torch.int64))
        assert bool(step.terminated[0]) == (t == end)
    np.testing.assert_allclose(step.next_observation[0].numpy(), final_obs, rtol=1e-6)
    np.testing.assert_allclose(step.observation[0].numpy(), reset_obs, rtol=1e-6)
    assert not step.truncated.any()
    [episode] = env.pop_finished()
    assert episode.return_ == end + 1 and episode.length == end + 1


class RandomPolicy:
    def __init__(self, space):
        self.space = space

    def act(self, observation, deterministic=False):
        n = observation.shape[0]
        if isinstance(self.space, gymnasium.spaces.Discrete):
            return torch.randint(0, int(self.space.n), (n,)), torch.zeros(n)
        return torch.rand(n, *self.space.shape) * 2 - 1, torch.zeros(n)


@pytest.mark.parametrize("env_id,limit", [("CartPole-v1", None), ("Pendulum-v1", 7)])
def test_rollouts_chain_observations_except_across_episode_ends(env_id, limit):
    torch.manual_seed(0)  # the random policy's actions: each rollout holds episode ends
    make = lambda n, vectorization: VectorEnv(  # noqa: E731
        lambda: gymnasium.make(env_id, max_episode_steps=limit), n, vectorization=vectorization
    )
    space = make(1, "sync").action_space
    collector = SyncCollector(
        make, RandomPolicy(space), 1000, torch.device("cpu"), seed=0, num_envs=3, steps_per_env=20
    )
    first, second = collector.rollout(), collector.rollout()
    assert first.batch_size == torch.Size([20, 3])
    for rollout in (first, second):
        done = rollout[keys.NEXT_DONE]
        assert done.any()
        torch.testing.assert_close(done, rollout[keys.NEXT_TERMINATED] | rollout[keys.NEXT_TRUNCATED])
        assert not (rollout[keys.NEXT_TERMINATED] & rollout[keys.NEXT_TRUNCATED]).any()
        nxt, obs = rollout[keys.NEXT_OBSERVATION][:-1], rollout[keys.OBSERVATION][1:]
        same = (nxt == obs).all(-1, keepdim=True)
        assert same[~done[:-1]].all()  # within an episode s_{t+1} is the next step's s
        assert not same[done[:-1]].any()  # across an end, the next step starts a new episode
    torch.testing.assert_close(
        first[keys.NEXT_OBSERVATION][-1][~first[keys.NEXT_DONE][-1].squeeze(-1)],
        second[keys.OBSERVATION][0][~first[keys.NEXT_DONE][-1].squeeze(-1)],
    )
    assert collector.frames == 120


def test_box_actions_are_clipped_and_rescaled_to_the_bounds():
    env = VectorEnv(lambda: gymnasium.make("Pendulum-v1"), num_envs=3)
    action = env.to_env_action(torch.tensor([[-5.0], [0.5], [1.0]]))
    np.testing.assert_allclose(action, [[-2.0], [1.0], [2.0]])


def test_bad_vectorization_is_a_config_error():
    with pytest.raises(ConfigError, match="collector.vectorization='threads'"):
        VectorEnv(lambda: gymnasium.make("CartPole-v1"), 1, vectorization="threads")


def test_a_minigrid_env_restored_from_its_state_goes_on_as_the_original():
    """MiniGrid's grid lives in world objects: its GridState layer saves it as codes, so that the
    restored env (a fresh one, reset with another seed: another room) steps as the original."""
    pytest.importorskip("minigrid")
    from rlplat.envs.minigrid import make_minigrid
    from rlplat.envs.vector import env_state, load_env_state

    original = make_minigrid("MiniGrid-DoorKey-5x5-v0", keys=["image", "direction"])
    original.reset(seed=3)
    for action in (0, 2, 2, 1, 3, 2):  # turn, forward, ..., pick up
        original.step(action)
    buffer = io.BytesIO()
    torch.save(env_state(original), buffer)  # as a checkpoint holds it: plain data and tensors
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    restored = make_minigrid("MiniGrid-DoorKey-5x5-v0", keys=["image", "direction"])
    restored.reset(seed=11)
    load_env_state(restored, saved)
    for action in (2, 5, 1, 2, 2, 0, 2):
        a, b = original.step(action), restored.step(action)
        np.testing.assert_array_equal(a[0]["image"], b[0]["image"])
        assert a[0]["direction"] == b[0]["direction"] and a[1:4] == b[1:4]
