"""Recurrent cores: the state a collector carries, the sequences a buffer cuts, and the
loss's unroll over them agree with one another, and never cross an episode's end."""

from __future__ import annotations

import gymnasium
import pytest
import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.buffers.rollout import RolloutBuffer
from rlplat.collectors.sync import SyncCollector
from rlplat.envs.vector import VectorEnv
from rlplat.functional.sequences import episode_sequences
from rlplat.losses.a2c import A2CLoss
from rlplat.losses.ppo import PPOLoss
from rlplat.losses.ppo_kl import PPOKLLoss
from rlplat.networks.base import ConfiguredNetwork, CoreSpec
from rlplat.networks.mlp import MLP
from rlplat.networks.recurrent import RecurrentCore
from rlplat.registry import ConfigError

OBSERVATIONS = gymnasium.spaces.Box(-1.0, 1.0, (2,))


def network(core: CoreSpec | None, space: gymnasium.Space = OBSERVATIONS) -> ConfiguredNetwork:
    return ConfiguredNetwork(lambda out, space: MLP(space, out, hidden_sizes=[16]), space, core)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_stepping_the_core_one_step_at_a_time_gives_the_sequence_s_outputs_and_state(kind):
    torch.manual_seed(0)
    core = RecurrentCore(5, CoreSpec(kind, hidden_size=7, num_layers=2))
    assert core.state_size == (2 if kind == "lstm" else 1) * 2 * 7
    features, state = torch.randn(3, 6, 5), torch.randn(3, core.state_size)
    output, final = core(features, state)
    stepped = state
    for t in range(6):
        out, stepped = core.step(features[:, t], stepped)
        torch.testing.assert_close(out, output[:, t])
    torch.testing.assert_close(stepped, final)


def test_bad_core_keys_name_the_key_and_what_is_valid():
    with pytest.raises(ConfigError, match=r"network.core='rnn': valid: lstm, gru, or null"):
        CoreSpec("rnn")
    with pytest.raises(ConfigError, match=r"network.core_size=0: must be an integer >= 1"):
        CoreSpec("lstm", hidden_size=0)


def test_sequences_are_cut_at_episode_ends_and_every_length_steps_with_burn_in_from_the_same_episode():
    done = torch.zeros(7, 2, dtype=torch.bool)
    done[2, 0] = done[5, 1] = True
    sequences = episode_sequences(done, length=3, burn_in=2)
    times = (sequences.steps // 2).tolist()
    envs = (sequences.steps % 2)[:, 0].tolist()
    assert envs == [0, 0, 0, 1, 1, 1]
    # env 0: episodes 0-2 and 3-6; env 1: episodes 0-5 and 6
    assert [row[2:] for row in times] == [[0, 1, 2], [3, 4, 5], [6, 6, 6], [0, 1, 2], [3, 4, 5], [6, 6, 6]]
    assert sequences.mask[:, 2:].sum(1).tolist() == [3, 3, 1, 3, 3, 1]
    assert not sequences.mask[:, :2].any()
    # burn-in: the two steps before, within the episode: none at an episode's first step
    assert sequences.burn_in.sum(1).tolist() == [0, 0, 2, 0, 2, 0]
    assert times[2][:2] == [4, 5] and times[4][:2] == [1, 2]


def random_rollout(T: int, B: int, seed: int) -> TensorDict:
    """A rollout with random episode ends, each step labelled with its episode."""
    generator = torch.Generator().manual_seed(seed)
    done = torch.rand(T, B, 1, generator=generator) < 0.15
    starts = torch.zeros(T, B, dtype=torch.long)
    starts[1:] = done[:-1, :, 0].long()
    episode = starts.cumsum(0) + 1000 * torch.arange(B)  # unique per env and episode
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(T, B, 2, generator=generator),
            "episode": episode,
            "time": torch.arange(T).unsqueeze(1).expand(T, B).clone(),
            keys.NEXT: {keys.DONE: done},
        },
        batch_size=[T, B],
    )


@pytest.mark.parametrize("burn_in", [0, 3])
def test_no_minibatch_sequence_carries_state_across_an_episode_boundary(burn_in):
    T, B, L = 40, 6, 8
    rollout = random_rollout(T, B, seed=burn_in)
    buffer = RolloutBuffer((T, B), epochs=2, minibatch_size=60, sequence_length=L, burn_in=burn_in)
    buffer.extend(rollout)
    batches = list(buffer.batches())
    assert len(batches) == 2 * (T * B // 60)
    seen = []
    for batch in batches:
        assert batch.batch_size[1] == burn_in + L
        mask, burn = batch[keys.MASK], batch[keys.BURN_IN]
        for row in range(batch.batch_size[0]):
            used = mask[row] | burn[row]
            episodes = batch["episode"][row][used].unique()
            assert len(episodes) == 1  # one episode per sequence, burn-in included
            time = batch["time"][row][used]
            assert (time.diff() == 1).all()  # consecutive steps
            # position 0 holds the step the sequence's state is taken from: its first real step
            assert batch["time"][row][0] == time[0] and batch["episode"][row][0] == episodes[0]
            # an episode's end is only ever the last step of a sequence
            assert not batch[keys.NEXT_DONE][row][mask[row]][:-1].any()
            seen += [(int(e), int(t)) for e, t in zip(batch["episode"][row][mask[row]], batch["time"][row][mask[row]])]
    # each epoch covers every step of the rollout once
    assert sorted(seen) == sorted(
        2 * [(int(e), int(t)) for e, t in zip(rollout["episode"].flatten(), rollout["time"].flatten())]
    )


def collector(policy, num_envs: int = 4, steps: int = 16, frames: int = 128) -> SyncCollector:
    make = lambda n, vectorization: VectorEnv(  # noqa: E731
        lambda: gymnasium.make("CartPole-v1", max_episode_steps=5), n, vectorization=vectorization
    )
    return SyncCollector(make, policy, frames, torch.device("cpu"), seed=0, num_envs=num_envs, steps_per_env=steps)


def recurrent_loss(cls=PPOLoss, kind: str = "lstm", **kwargs) -> PPOLoss:
    space = gymnasium.spaces.Box(-float("inf"), float("inf"), (4,))
    return cls(space, gymnasium.spaces.Discrete(2), network(CoreSpec(kind, hidden_size=8), space), features=8, **kwargs)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_collector_resets_the_state_exactly_where_done_is_set_and_carries_it_elsewhere(kind):
    torch.manual_seed(0)
    loss = recurrent_loss(kind=kind)
    agent = loss.agent
    rollouts = list(collector(agent))
    assert len(rollouts) == 2
    state = torch.cat([r[keys.RECURRENT_STATE] for r in rollouts])  # [2T, B, S]
    done = torch.cat([r[keys.NEXT_DONE] for r in rollouts])[..., 0]  # [2T, B]
    observation = torch.cat([r[keys.OBSERVATION] for r in rollouts])
    assert done.any() and not done.all()
    assert (state[0] == 0).all()  # every env starts an episode
    with torch.no_grad():
        _, _, after = agent.act_recurrent(observation.flatten(0, 1), state.flatten(0, 1))
    after = after.view(state.shape)
    zero = (state[1:] == 0).all(-1)  # [2T - 1, B]
    assert torch.equal(zero, done[:-1])  # zero exactly after a step that ended an episode
    carried = ~done[:-1]
    torch.testing.assert_close(state[1:][carried], after[:-1][carried])  # elsewhere the state after the step


@pytest.mark.parametrize("cls", [PPOLoss, A2CLoss, PPOKLLoss])
@pytest.mark.parametrize("burn_in", [0, 2])
def test_the_loss_s_unroll_over_sequences_gives_the_collector_s_log_probabilities(cls, burn_in):
    """Before any update the policy is the one that acted: its log-probabilities over the
    buffer's sequences, each started from the stored state, equal those of collection."""
    torch.manual_seed(1)
    loss = recurrent_loss(cls)
    [rollout] = list(collector(loss.agent, frames=64))
    rollout = loss.preprocess(rollout)
    buffer = RolloutBuffer((16, 4), epochs=1, minibatch_size=16, sequence_length=4, burn_in=burn_in)
    buffer.extend(rollout.select(*loss.in_keys, keys.ACTION_LOG_PROB))
    for batch in buffer.batches():
        steps = loss.policy_value_terms(batch)
        assert steps.batch.batch_size == (int(batch[keys.MASK].sum()),)
        torch.testing.assert_close(steps.log_prob, steps.batch[keys.ACTION_LOG_PROB], rtol=1e-5, atol=1e-5)
        output = loss(batch)
        assert all(torch.isfinite(v) for k, v in output.items() if k.startswith("loss_"))
        assert {"explained_variance", "value_mean"} <= set(output.keys())


def test_the_values_of_a_rollout_step_from_the_stored_states_and_bootstrap_from_the_state_after_the_step():
    torch.manual_seed(2)
    loss = recurrent_loss()
    agent = loss.agent
    [rollout] = list(collector(agent, frames=64))
    value, next_value = loss.state_values(rollout)
    T, B = rollout.batch_size
    state = rollout[keys.RECURRENT_STATE]
    with torch.no_grad():
        for b in range(B):
            h = state[0, b : b + 1]
            for t in range(T):
                v, h_after = agent.step_values(rollout[keys.OBSERVATION][t, b : b + 1], h)
                torch.testing.assert_close(v, value[t, b : b + 1], rtol=1e-5, atol=1e-6)
                v_next, _ = agent.step_values(rollout[keys.NEXT_OBSERVATION][t, b : b + 1], h_after)
                torch.testing.assert_close(v_next, next_value[t, b : b + 1], rtol=1e-5, atol=1e-6)
                h = torch.zeros_like(h_after) if rollout[keys.NEXT_DONE][t, b] else h_after


def test_ppo_kl_measures_its_update_s_kl_over_the_rollout_s_episodes():
    torch.manual_seed(3)
    loss = recurrent_loss(PPOKLLoss)
    [rollout] = list(collector(loss.agent, frames=64))
    loss.preprocess(rollout)
    assert loss.policy_kl(rollout) == pytest.approx(0.0, abs=1e-6)  # the policy that acted
    state = loss.get_extra_state()
    assert {"recurrent_state", "next.done"} <= set(state)
    fresh = recurrent_loss(PPOKLLoss)
    fresh.set_extra_state(state)
    assert torch.equal(fresh._previous[keys.NEXT_DONE], rollout[keys.NEXT_DONE])


def test_a_recurrent_buffer_needs_sequences_it_can_cut():
    with pytest.raises(ConfigError, match=r"buffer.sequence_length=9: must be an integer in \[1, 8\]"):
        RolloutBuffer((8, 2), sequence_length=9)
    with pytest.raises(ConfigError, match=r"buffer.burn_in=2: burn-in refreshes a recurrent state"):
        RolloutBuffer((8, 2), sequence_length=1, burn_in=2)


def test_a_core_after_a_cnn_learns_from_sequences_of_uint8_frames():
    """Pixels: the CNN encodes each frame of a sequence, the core runs over the encodings, and
    the gradient reaches the convolutions."""
    from rlplat.networks.cnn import NatureCNN

    torch.manual_seed(4)
    space = gymnasium.spaces.Box(0, 255, (3, 12, 12), dtype="uint8")
    cnn = ConfiguredNetwork(
        lambda out, space: NatureCNN(space, out, channels=[4], kernel_sizes=[3], strides=[2]),
        space,
        CoreSpec("gru", hidden_size=8),
    )
    loss = A2CLoss(space, gymnasium.spaces.Discrete(3), cnn, features=16, share_torso=True)
    N, P = 3, 5
    batch = TensorDict(
        {
            keys.OBSERVATION: torch.randint(0, 256, (N, P, 3, 12, 12), dtype=torch.uint8),
            keys.ACTION: torch.randint(0, 3, (N, P)),
            keys.ADVANTAGE: torch.randn(N, P, 1),
            keys.VALUE_TARGET: torch.randn(N, P, 1),
            keys.RECURRENT_STATE: torch.zeros(N, P, loss.agent.state_size),
            keys.MASK: torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4]),
            keys.BURN_IN: torch.zeros(N, P, dtype=torch.bool),
        },
        batch_size=[N, P],
    )
    output = loss(batch)
    sum(v for k, v in output.items() if k.startswith("loss_")).backward()
    convolution = next(p for name, p in loss.agent.actor_torso.named_parameters() if "weight" in name)
    assert convolution.grad is not None and convolution.grad.abs().sum() > 0
    assert loss.agent.actor_core.rnn.weight_hh_l0.grad.abs().sum() > 0
