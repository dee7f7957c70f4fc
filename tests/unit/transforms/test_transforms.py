"""Observation normalisation and reward scaling."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from rlplat.envs.vector import VectorEnv
from rlplat.registry import ConfigError
from rlplat.transforms.normalize import ObservationNorm, RewardClip, RewardScale, RunningMeanStd

BOX = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)


def test_running_mean_std_matches_numpy_over_batches():
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=g) * 4 + 2 for n in (5, 1, 17, 8)]
    stats = RunningMeanStd((3,))
    for batch in batches:
        stats.update(batch)
    everything = torch.cat(batches).double().numpy()
    np.testing.assert_allclose(stats.mean.numpy(), everything.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats.var.numpy(), everything.var(0), rtol=1e-3)


def test_observation_norm_normalises_clips_and_round_trips_its_statistics():
    norm = ObservationNorm(BOX, clip=5.0)
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        norm.transform_observation(torch.randn(64, 3, generator=g) * 10 + 3, update=True)
    out = norm.transform_observation(torch.randn(4096, 3, generator=g) * 10 + 3, update=False)
    assert out.mean(0).abs().max() < 0.1 and (out.std(0) - 1).abs().max() < 0.1
    assert norm.transform_observation(torch.full((1, 3), 1e6), update=False).max() == 5.0
    restored = ObservationNorm(BOX, clip=5.0)
    restored.load_state_dict(norm.state_dict())
    probe = torch.randn(8, 3, generator=g)
    torch.testing.assert_close(
        restored.transform_observation(probe, update=False), norm.transform_observation(probe, update=False)
    )


def test_frozen_statistics_do_not_move():
    norm = ObservationNorm(BOX)
    before = norm.state_dict()["stats.mean"].clone()
    norm.transform_observation(torch.ones(10, 3) * 7, update=False)
    torch.testing.assert_close(norm.state_dict()["stats.mean"], before)


def test_evaluation_env_shares_but_does_not_update_transforms():
    make = lambda: gymnasium.make("Pendulum-v1")  # noqa: E731
    norm = ObservationNorm(make().observation_space)
    train = VectorEnv(make, 2, [norm], update_transforms=True)
    evaluation = VectorEnv(make, 2, [norm], update_transforms=False)
    train.reset(seed=0)
    count = norm.stats.count.item()
    evaluation.reset(seed=1)
    evaluation.step(torch.zeros(2, 1))
    assert norm.stats.count.item() == count
    train.step(torch.zeros(2, 1))
    assert norm.stats.count.item() == count + 2


def test_reward_scale_divides_by_std_of_discounted_return_and_resets_at_episode_end():
    scale = RewardScale(BOX, gamma=0.5)
    done = torch.zeros(2, 1, dtype=torch.bool)
    for _ in range(200):
        scale.transform_reward(torch.ones(2, 1), done, update=True)
    # the return of a constant reward 1 converges to 2 and the running var shrinks toward 0
    out = scale.transform_reward(torch.ones(2, 1), torch.ones(2, 1, dtype=torch.bool), update=True)
    assert out.min() > 1.0
    assert scale._discounted.abs().max() == 0.0  # reset at the episode end
    raw = torch.tensor([[-3.0], [4.0]])
    torch.testing.assert_close(scale.transform_reward(raw, done, update=False).sign(), raw.sign())


def test_reward_scale_checkpoints_its_discounted_returns():
    """A resumed run scales rewards as one that never stopped: the per-env returns are state."""
    rewards = torch.linspace(-2.0, 3.0, 40).reshape(20, 2, 1)
    done = torch.zeros(2, 1, dtype=torch.bool)
    whole = RewardScale(BOX, gamma=0.9)
    expected = [whole.transform_reward(r, done, update=True) for r in rewards]
    first = RewardScale(BOX, gamma=0.9)
    for r in rewards[:10]:
        first.transform_reward(r, done, update=True)
    resumed = RewardScale(BOX, gamma=0.9)
    resumed.load_state_dict(first.state_dict())
    for r, want in zip(rewards[10:], expected[10:]):
        torch.testing.assert_close(resumed.transform_reward(r, done, update=True), want)
    # a state saved before the returns were: they start from zero
    old = {k: v for k, v in first.state_dict().items() if not k.endswith("_extra_state")}
    fresh = RewardScale(BOX, gamma=0.9)
    fresh.load_state_dict(old)
    assert fresh._discounted is None and fresh.stats.count.item() == first.stats.count.item()


@pytest.mark.parametrize("kwargs,key", [({"clip": 0}, "obs_norm.clip"), ({"clip": -1.0}, "obs_norm.clip")])
def test_bad_transform_arguments(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        ObservationNorm(BOX, **kwargs)


def test_reward_clip_bounds_rewards_and_rejects_a_bound_not_above_zero():
    clip = RewardClip(BOX)
    done = torch.zeros(3, 1, dtype=torch.bool)
    rewards = torch.tensor([[-4.0], [0.5], [21.0]])
    torch.testing.assert_close(clip.transform_reward(rewards, done, update=True), torch.tensor([[-1.0], [0.5], [1.0]]))
    with pytest.raises(ConfigError, match="transforms.reward_clip.bound=0"):
        RewardClip(BOX, bound=0)


def test_a_transform_set_to_null_is_left_out():
    from rlplat.build import build_transforms

    built, _, _ = build_transforms(
        {"obs_norm": None, "reward_clip": {"bound": 2.0}}, {"name": "gym", "id": "Pendulum-v1"}
    )
    assert [type(t) for t in built] == [RewardClip]


def test_observation_norm_with_given_statistics_never_moves():
    norm = ObservationNorm(BOX, mean=[1.0, 2.0, 3.0], std=2.0, clip=100.0)
    observation = torch.tensor([[3.0, 2.0, -1.0]])
    expected = torch.tensor([[1.0, 0.0, -2.0]])
    torch.testing.assert_close(norm.transform_observation(observation.clone(), update=True), expected)
    for _ in range(5):
        norm.transform_observation(torch.randn(16, 3) * 9, update=True)
    torch.testing.assert_close(norm.transform_observation(observation.clone(), update=False), expected)
    restored = ObservationNorm(BOX, mean=0.0, std=1.0)
    restored.load_state_dict(norm.state_dict())
    torch.testing.assert_close(restored.transform_observation(observation.clone(), update=False), expected)


def test_observation_norm_fit_gathers_statistics_over_random_steps():
    env = gymnasium.make("Pendulum-v1")
    norm = ObservationNorm(env.observation_space, init_steps=50, clip=100.0)
    norm.fit(env, seed=3)
    probe = gymnasium.make("Pendulum-v1")  # the same steps, by their definition
    observations = [probe.reset(seed=3)[0]]
    probe.action_space.seed(3)
    for _ in range(50):
        observations.append(probe.step(probe.action_space.sample())[0])
    samples = np.stack(observations).astype(np.float64)
    np.testing.assert_allclose(norm.stats.mean.numpy(), samples.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.stats.var.numpy(), samples.var(0), rtol=1e-12)
    assert norm.stats.count.item() == 51
    before = norm.stats.mean.clone()
    norm.transform_observation(torch.ones(4, 3) * 50, update=True)  # fixed once fitted
    torch.testing.assert_close(norm.stats.mean, before)
    out = norm.transform_observation(torch.from_numpy(samples.astype(np.float32)), update=False)
    assert out.mean(0).abs().max() < 1e-4 and (out.std(0, unbiased=False) - 1).abs().max() < 1e-3
    running = ObservationNorm(env.observation_space)
    running.fit(env, seed=3)  # nothing without init_steps
    assert running.stats.count.item() == pytest.approx(1e-4)


@pytest.mark.parametrize(
    ("space", "what"),
    [
        (gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8), r"Box\(0, 255, \(4, 84, 84\), uint8\) is uint8 pixels"),
        (gymnasium.spaces.Dict({"image": gymnasium.spaces.Box(0, 255, (7, 7, 3), np.uint8)}), r"Dict\('image'"),
        (gymnasium.spaces.Box(0, 9, (3,), np.int64), r"int64\) is not a float Box"),
    ],
)
def test_observation_norm_refuses_pixels_and_dicts_saying_to_turn_it_off(space, what):
    with pytest.raises(ConfigError, match=rf"transforms\.obs_norm .*{what}.*Set transforms\.obs_norm=null"):
        ObservationNorm(space)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mean": 0.0}, "transforms.obs_norm.std is not set"),
        ({"std": 1.0}, "transforms.obs_norm.mean is not set"),
        ({"mean": [0.0, 1.0], "std": 1.0}, r"transforms.obs_norm.mean=\[0.0, 1.0\]: .* shape \[3\]"),
        ({"mean": 0.0, "std": [1.0, 0.0, 1.0]}, "transforms.obs_norm.std=.*every std must be > 0"),
        ({"mean": "a", "std": 1.0}, "transforms.obs_norm.mean='a'"),
        ({"init_steps": 0}, "transforms.obs_norm.init_steps=0: must be an integer >= 1"),
        ({"init_steps": 10, "mean": 0.0, "std": 1.0}, "gathered or given .mean and std., not both"),
    ],
)
def test_bad_fixed_statistics(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        ObservationNorm(BOX, **kwargs)
