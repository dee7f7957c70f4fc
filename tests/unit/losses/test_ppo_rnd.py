"""RND-PPO (rlplat.losses.ppo_rnd): the intrinsic reward against a hand computation, the
non-episodic intrinsic GAE, the intrinsic-return normalisation, the fixed target network,
the checkpoint round trip of the statistics, Dict observations, and the conformance kit."""

from __future__ import annotations

import io

import gymnasium
import numpy as np
import pytest
import torch
from conftest import TINY, make_trainer
from tensordict import TensorDict
from torch import nn

from rlplat import keys
from rlplat.functional import generalized_advantage_estimate
from rlplat.losses.ppo_rnd import (
    INTRINSIC_REWARD,
    INTRINSIC_VALUE_TARGET,
    DiscountedReturnStatistics,
    ObservationStatistics,
    PPORNDLoss,
)
from rlplat.registry import NETWORKS, ConfigError
from rlplat.testing import check_loss

BOX = gymnasium.spaces.Box(-10.0, 10.0, (3,), np.float32)
DISCRETE = gymnasium.spaces.Discrete(2)
T, B = 6, 2


def torso(out_features: int, space: gymnasium.Space = BOX) -> nn.Module:
    """A small MLP torso over a flat Box, as the network factory gives one."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(space.shape)), out_features), nn.Tanh())


def make_loss(**kwargs) -> PPORNDLoss:
    torch.manual_seed(0)
    return PPORNDLoss(BOX, DISCRETE, torso, rnd_features=8, features=8, **kwargs)


def rollout(seed: int = 0, terminated_at=(2, 0), truncated_at=(4, 1)) -> TensorDict:
    """A ``[T, B]`` rollout of BOX observations (scale 3, offset 1) with one termination and
    one truncation."""
    generator = torch.Generator().manual_seed(seed)
    observation = 3.0 * torch.randn(T + 1, B, 3, generator=generator) + 1.0
    terminated = torch.zeros(T, B, 1, dtype=torch.bool)
    truncated = torch.zeros(T, B, 1, dtype=torch.bool)
    terminated[terminated_at] = True
    truncated[truncated_at] = True
    return TensorDict(
        {
            keys.OBSERVATION: observation[:T],
            keys.ACTION: torch.randint(2, (T, B), generator=generator),
            keys.ACTION_LOG_PROB: torch.full((T, B), -0.7),
            keys.NEXT: {
                keys.OBSERVATION: observation[1:],
                keys.REWARD: torch.randn(T, B, 1, generator=generator),
                keys.DONE: terminated | truncated,
                keys.TERMINATED: terminated,
                keys.TRUNCATED: truncated,
            },
        },
        batch_size=[T, B],
    )


def discounted_returns(rewards: list[torch.Tensor], gamma: float) -> torch.Tensor:
    """Every ``R_t = gamma * R_{t-1} + r_t`` of ``[T, B]`` reward blocks taken in turn, one
    return per env, never reset: a plain loop."""
    running, returns = torch.zeros(rewards[0].shape[1]), []
    for block in rewards:
        for r in block:
            running = gamma * running + r
            returns.append(running.clone())
    return torch.stack(returns)


def test_intrinsic_reward_is_the_predictor_error_on_normalised_next_observations():
    loss = make_loss()
    data = rollout()
    out = loss.preprocess(data.clone())
    flat = data[keys.NEXT_OBSERVATION].flatten(0, 1)  # the statistics take in the rollout first
    x = ((flat - flat.mean(0)) / flat.var(0, correction=0).add(1e-8).sqrt()).clamp(-5, 5)
    with torch.no_grad():
        error = (loss.predictor(x) - loss.target(x)).pow(2).mean(-1).view(T, B)  # mean squared error per s'
    std = discounted_returns([error], 0.99).std(correction=0)
    torch.testing.assert_close(out[INTRINSIC_REWARD].squeeze(-1), error / std, rtol=1e-4, atol=1e-7)
    assert out["intrinsic_value_target"].shape == (T, B, 1)
    assert loss.intrinsic_diagnostics["intrinsic_reward"] == pytest.approx(out[INTRINSIC_REWARD].mean().item())


def test_observations_are_normalised_per_element_then_clipped_to_five_standard_deviations():
    stats = ObservationStatistics(BOX)
    seen = torch.tensor([[0.0, 10.0, -1.0], [2.0, 30.0, 1.0]])  # mean [1, 20, 0], std [1, 10, 1]
    stats.update(seen)
    out = stats.normalize(torch.tensor([[2.0, 0.0, 100.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, -2.0, 5.0]]), rtol=1e-3, atol=1e-3)


def test_dict_observations_normalise_float_copies_of_images_and_pass_codes_unchanged():
    space = gymnasium.spaces.Dict(
        {"image": gymnasium.spaces.Box(0, 255, (7, 7, 3), np.uint8), "direction": gymnasium.spaces.Discrete(4)}
    )
    stats = ObservationStatistics(space)
    assert isinstance(stats.space["image"], gymnasium.spaces.Box) and stats.space["image"].dtype == np.float32
    assert stats.space["direction"] == space["direction"]
    observation = TensorDict(
        {"image": torch.randint(0, 11, (5, 7, 7, 3), dtype=torch.uint8), "direction": torch.randint(4, (5,))},
        batch_size=[5],
    )
    stats.update(observation)
    out = stats.normalize(observation)
    assert out["image"].dtype == torch.float32 and out["image"].abs().max() <= 5
    assert torch.equal(out["direction"], observation["direction"])
    assert observation["image"].dtype == torch.uint8  # a copy: the rollout's pixels stay bytes


def test_a_dict_observation_trains_on_the_multi_input_torso():
    space = gymnasium.spaces.Dict(
        {"image": gymnasium.spaces.Box(0, 255, (7, 7, 3), np.uint8), "direction": gymnasium.spaces.Discrete(4)}
    )
    node = {"name": "multi_input", "image": {"normalize_images": False}}

    def network(out_features: int, observation_space: gymnasium.Space = space) -> nn.Module:
        return NETWORKS.build("network", node, observation_space, out_features)

    loss = PPORNDLoss(space, DISCRETE, network, rnd_features=16, features=16, share_torso=True)
    observation = TensorDict(
        {
            "image": torch.randint(0, 11, (T + 1, B, 7, 7, 3), dtype=torch.uint8),
            "direction": torch.randint(4, (T + 1, B)),
        },
        batch_size=[T + 1, B],
    )
    data = rollout()
    data[keys.OBSERVATION], data[keys.NEXT_OBSERVATION] = observation[:T], observation[1:]
    out = loss.preprocess(data)
    assert out[INTRINSIC_REWARD].isfinite().all()
    output = loss(out.select(*loss.in_keys).reshape(-1))
    sum(v for k, v in output.items() if k.startswith("loss_")).backward()
    assert all(p.grad is not None for p in loss.predictor.parameters())


def test_intrinsic_gae_is_not_cut_at_episode_ends_and_the_extrinsic_one_is():
    loss = make_loss(gamma=0.999, gamma_int=0.9, gae_lambda=0.8, ext_coef=2.0, int_coef=1.0)
    data = rollout()
    out = loss.preprocess(data.clone())
    with torch.no_grad():
        value = loss.agent.value(data[keys.OBSERVATION].flatten(0, 1)).view(T, B, 2)
        next_value = loss.agent.value(data[keys.NEXT_OBSERVATION].flatten(0, 1)).view(T, B, 2)
    done, terminated = data[keys.NEXT_DONE], data[keys.NEXT_TERMINATED]
    never = torch.zeros_like(done)
    reward_int = out[INTRINSIC_REWARD]
    a_ext, target_ext = generalized_advantage_estimate(
        data[keys.NEXT_REWARD], value[..., :1], next_value[..., :1], done, terminated, 0.999, 0.8
    )
    a_int, target_int = generalized_advantage_estimate(
        reward_int, value[..., 1:], next_value[..., 1:], never, never, 0.9, 0.8
    )
    torch.testing.assert_close(out[keys.VALUE_TARGET], target_ext)
    torch.testing.assert_close(out[INTRINSIC_VALUE_TARGET], target_int)
    torch.testing.assert_close(out[keys.ADVANTAGE], 2.0 * a_ext + 1.0 * a_int)
    torch.testing.assert_close(out[keys.STATE_VALUE], value[..., :1])
    # cut at the episode ends, the intrinsic targets would differ before them, and only there
    cut, _ = generalized_advantage_estimate(reward_int, value[..., 1:], next_value[..., 1:], done, terminated, 0.9, 0.8)
    differs = (cut + value[..., 1:] - target_int).abs().squeeze(-1) > 1e-6
    assert differs[:3, 0].all() and differs[:5, 1].all() and not differs[3:, 0].any() and not differs[5:, 1].any()


def test_intrinsic_rewards_are_divided_by_the_std_of_the_discounted_return_continued_across_rollouts():
    statistics = DiscountedReturnStatistics(gamma=0.9)
    generator = torch.Generator().manual_seed(1)
    blocks = [torch.rand(5, 3, generator=generator) for _ in range(3)]
    for block in blocks:
        statistics.update(block.unsqueeze(-1))
    returns = discounted_returns(blocks, 0.9)
    torch.testing.assert_close(statistics.std, returns.std(correction=0), rtol=1e-4, atol=0)
    torch.testing.assert_close(statistics.discounted_return, returns[-1])
    with pytest.raises(ValueError, match="rewards of 2 envs; the returns so far are of 3"):
        statistics.update(torch.rand(5, 2, 1))


def test_the_target_network_never_changes_and_the_predictor_learns():
    loss = make_loss(update_proportion=1.0)
    target = {k: v.clone() for k, v in loss.target.state_dict().items()}
    groups = loss.param_groups()
    assert set(groups) == {"actor", "critic", "predictor"}
    assert {id(p) for p in groups["predictor"]} == {id(p) for p in loss.predictor.parameters()}
    grouped = {id(p) for params in groups.values() for p in params}
    assert all(not p.requires_grad and id(p) not in grouped for p in loss.target.parameters())
    optimizers = [torch.optim.Adam(params, lr=1e-2) for params in groups.values()]
    batch = loss.preprocess(rollout()).select(*loss.in_keys).reshape(-1)
    first = None
    for _ in range(50):
        output = loss(batch)
        first = output["loss_predictor"].item() if first is None else first
        for optimizer in optimizers:
            optimizer.zero_grad()
        sum(v for k, v in output.items() if k.startswith("loss_")).backward()
        for optimizer in optimizers:
            optimizer.step()
    assert all(torch.equal(v, target[k]) for k, v in loss.target.state_dict().items())
    assert output["loss_predictor"].item() < 0.5 * first  # the predictor catches up with the target


def test_the_predictor_trains_on_a_random_proportion_of_each_minibatch():
    loss = make_loss(update_proportion=0.25)
    batch = loss.preprocess(rollout()).select(*loss.in_keys).reshape(-1)  # 12 samples: 3 drawn
    with torch.no_grad():
        error = loss.prediction_error(batch[keys.NEXT_OBSERVATION])
        torch.manual_seed(3)
        got = loss.predictor_loss(batch[keys.NEXT_OBSERVATION])
        torch.manual_seed(3)
        kept = torch.randperm(T * B)[:3]
    torch.testing.assert_close(got, error[kept].mean())
    assert not torch.isclose(got, error.mean())


def test_a_checkpoint_round_trip_keeps_the_statistics_and_the_next_rollout_is_the_same():
    loss = make_loss()
    for seed in (0, 1):
        loss.preprocess(rollout(seed))
    file = io.BytesIO()
    torch.save(loss.state_dict(), file)
    file.seek(0)
    state = torch.load(file, weights_only=True)  # as a checkpoint is read
    assert {"observation_stats.entries.observation.mean", "intrinsic_return.moments.var"} <= set(state)
    assert state["intrinsic_return._extra_state"]["discounted_return"].shape == (B,)
    torch.manual_seed(5)  # other weights: all of them come from the state
    resumed = PPORNDLoss(BOX, DISCRETE, torso, rnd_features=8, features=8)
    resumed.load_state_dict(state)
    flat = TensorDict(dict(resumed.state_dict()), batch_size=[])
    assert (flat == TensorDict(dict(loss.state_dict()), batch_size=[])).all()
    torch.testing.assert_close(loss.preprocess(rollout(2)), resumed.preprocess(rollout(2)), rtol=0, atol=0)


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("gamma_int", 1.5, "loss.gamma_int=1.5: must be in [0, 1]"),
        ("update_proportion", 0.0, "loss.update_proportion=0.0: must be in (0, 1]"),
        ("int_coef", -1.0, "loss.int_coef=-1.0: must be >= 0"),
        ("rnd_features", 0, "loss.rnd_features=0: must be an integer >= 1"),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_valid(key, value, needle):
    with pytest.raises(ConfigError) as error:
        PPORNDLoss(BOX, DISCRETE, torso, **{key: value})
    assert needle in str(error.value)


def test_a_recurrent_core_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="network.core='lstm': loss 'ppo_rnd' takes no recurrent core"):
        make_trainer(["algo=ppo_rnd", "env=cartpole", "network.core=lstm", "tracking.enabled=false", *TINY], tmp_path)


@pytest.mark.parametrize("network", [("mlp", {"hidden_sizes": [16]}), ("mlp", {"hidden_sizes": []})])
def test_the_conformance_kit_passes(network):
    check_loss("ppo_rnd", {"rnd_features": 16, "features": 16}, network=network)
