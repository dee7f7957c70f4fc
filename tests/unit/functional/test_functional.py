"""Numbers: functional/ against naive loops and hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from rlplat.functional import (
    categorical_entropy,
    categorical_log_prob,
    generalized_advantage_estimate,
    kl_estimate,
    normal_entropy,
    normal_log_prob,
    normal_mode_log_prob,
    normal_mode_log_prob_entropy,
    standard_normal_log_prob,
)


def naive_gae(reward, value, next_value, done, terminated, gamma, lmbda):
    """Per-env, per-step loop straight from the definition."""
    T, B = reward.shape[:2]
    advantage = torch.zeros(T, B, 1)
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, b, 0] else next_value[t, b, 0].item()
            delta = reward[t, b, 0].item() + gamma * bootstrap - value[t, b, 0].item()
            carry = 0.0 if done[t, b, 0] else running
            running = delta + gamma * lmbda * carry
            advantage[t, b, 0] = running
    return advantage, advantage + value


@pytest.mark.parametrize("gamma,lmbda", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0)])
def test_gae_matches_naive_loop_with_terminations_and_truncations(gamma, lmbda):
    g = torch.Generator().manual_seed(0)
    T, B = 37, 5
    reward = torch.randn(T, B, 1, generator=g)
    value = torch.randn(T, B, 1, generator=g)
    next_value = torch.randn(T, B, 1, generator=g)
    terminated = torch.rand(T, B, 1, generator=g) < 0.1
    truncated = (torch.rand(T, B, 1, generator=g) < 0.1) & ~terminated
    done = terminated | truncated
    assert terminated.any() and truncated.any()
    advantage, target = generalized_advantage_estimate(reward, value, next_value, done, terminated, gamma, lmbda)
    expected_adv, expected_target = naive_gae(reward, value, next_value, done, terminated, gamma, lmbda)
    torch.testing.assert_close(advantage, expected_adv)
    torch.testing.assert_close(target, expected_target)


def test_gae_hand_computed_truncation_bootstraps_termination_does_not():
    # One env, three steps: step 0 truncated (bootstrap V=10), step 1 terminated, step 2 runs on.
    reward = torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)
    value = torch.tensor([0.5, 0.25, 1.0]).view(3, 1, 1)
    next_value = torch.tensor([10.0, 7.0, 4.0]).view(3, 1, 1)
    terminated = torch.tensor([False, True, False]).view(3, 1, 1)
    done = torch.tensor([True, True, False]).view(3, 1, 1)
    gamma, lmbda = 0.9, 0.8
    advantage, _ = generalized_advantage_estimate(reward, value, next_value, done, terminated, gamma, lmbda)
    a2 = 3.0 + 0.9 * 4.0 - 1.0  # bootstraps from the last next value
    a1 = 2.0 - 0.25  # terminated: no bootstrap, no carry from a2
    a0 = 1.0 + 0.9 * 10.0 - 0.5  # truncated: bootstraps, no carry from a1
    torch.testing.assert_close(advantage.flatten(), torch.tensor([a0, a1, a2]))


def test_gae_rejects_mismatched_shapes():
    x = torch.zeros(4, 2, 1)
    with pytest.raises(ValueError, match="share one shape"):
        generalized_advantage_estimate(x, x, torch.zeros(4, 2), x.bool(), x.bool(), 0.9, 0.9)


def test_normal_log_prob_and_entropy_match_torch_distributions():
    g = torch.Generator().manual_seed(1)
    mean, log_std = torch.randn(6, 3, generator=g), torch.randn(3, generator=g)
    action = torch.randn(6, 3, generator=g)
    dist = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(normal_log_prob(action, mean, log_std), dist.log_prob(action).sum(-1))
    torch.testing.assert_close(normal_entropy(log_std.expand(6, 3)), dist.entropy().sum(-1))


def test_categorical_log_prob_and_entropy_match_torch_distributions():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(7, 4, generator=g)
    action = torch.randint(0, 4, (7,), generator=g)
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(categorical_log_prob(action, logits), dist.log_prob(action))
    torch.testing.assert_close(categorical_entropy(logits), dist.entropy())
    assert math.isclose(categorical_entropy(torch.zeros(1, 4)).item(), math.log(4), rel_tol=1e-6)


def random_rollout(seed: int, T: int = 29, B: int = 4):
    g = torch.Generator().manual_seed(seed)
    reward = torch.randn(T, B, 1, generator=g)
    value = torch.randn(T, B, 1, generator=g)
    next_value = torch.randn(T, B, 1, generator=g)
    terminated = torch.rand(T, B, 1, generator=g) < 0.1
    truncated = (torch.rand(T, B, 1, generator=g) < 0.1) & ~terminated
    return reward, value, next_value, terminated | truncated, terminated


def naive_td_lambda(reward, next_value, done, terminated, gamma, lmbda):
    T, B = reward.shape[:2]
    out = torch.zeros(T, B, 1)
    for b in range(B):
        for t in range(T):
            # lambda-return as the weighted sum of n-step returns (Sutton & Barto eq. 12.3)
            total, weight = 0.0, 1.0
            for n in range(1, T - t + 1):
                g_n = naive_n_step_one(reward, next_value, done, terminated, gamma, n, t, b)
                stop = n == T - t or bool(done[t + n - 1, b, 0])
                if stop:
                    total += weight * g_n
                    break
                total += weight * (1 - lmbda) * g_n
                weight *= lmbda
            out[t, b, 0] = total
    return out


def naive_n_step_one(reward, next_value, done, terminated, gamma, n, t, b):
    total = 0.0
    for k in range(n):
        i = t + k
        if i >= reward.shape[0]:
            break
        total += gamma**k * reward[i, b, 0].item()
        last = k == n - 1 or i == reward.shape[0] - 1
        if done[i, b, 0] or last:
            if not terminated[i, b, 0]:
                total += gamma ** (k + 1) * next_value[i, b, 0].item()
            break
    return total


@pytest.mark.parametrize("gamma,lmbda", [(0.99, 0.9), (0.8, 1.0), (0.9, 0.0)])
def test_td_lambda_matches_weighted_sum_of_n_step_returns(gamma, lmbda):
    from rlplat.functional import td_lambda_return

    reward, _, next_value, done, terminated = random_rollout(3, T=13, B=3)
    expected = naive_td_lambda(reward, next_value, done, terminated, gamma, lmbda)
    torch.testing.assert_close(td_lambda_return(reward, next_value, done, terminated, gamma, lmbda), expected)


def test_td_lambda_equals_gae_plus_value():
    from rlplat.functional import td_lambda_return

    reward, value, next_value, done, terminated = random_rollout(4)
    # consistent values: V(s_{t+1}) is the next step's V(s) within an episode
    next_value[:-1] = torch.where(done[:-1], next_value[:-1], value[1:])
    _, target = generalized_advantage_estimate(reward, value, next_value, done, terminated, 0.97, 0.8)
    torch.testing.assert_close(td_lambda_return(reward, next_value, done, terminated, 0.97, 0.8), target)


@pytest.mark.parametrize("n", [1, 3, 50])
def test_n_step_return_matches_naive_loop(n):
    from rlplat.functional import n_step_return

    reward, _, next_value, done, terminated = random_rollout(5)
    T, B = reward.shape[:2]
    expected = torch.tensor(
        [[[naive_n_step_one(reward, next_value, done, terminated, 0.9, n, t, b)] for b in range(B)] for t in range(T)]
    )
    torch.testing.assert_close(n_step_return(reward, next_value, done, terminated, 0.9, n), expected)


def test_n_step_return_hand_computed():
    from rlplat.functional import n_step_return

    reward = torch.tensor([1.0, 2.0, 4.0]).view(3, 1, 1)
    next_value = torch.tensor([10.0, 20.0, 40.0]).view(3, 1, 1)
    no = torch.zeros(3, 1, 1, dtype=torch.bool)
    got = n_step_return(reward, next_value, no, no, 0.5, 2)
    expected = [1 + 0.5 * 2 + 0.25 * 20, 2 + 0.5 * 4 + 0.25 * 40, 4 + 0.5 * 40]
    torch.testing.assert_close(got.flatten(), torch.tensor(expected))
    terminated = torch.tensor([False, True, False]).view(3, 1, 1)
    got = n_step_return(reward, next_value, terminated, terminated, 0.5, 3)
    torch.testing.assert_close(got.flatten(), torch.tensor([1 + 0.5 * 2, 2.0, 4 + 0.5 * 40]))


def test_standard_normal_log_prob_equals_the_log_density_of_the_action_it_draws():
    g = torch.Generator().manual_seed(3)
    mean, log_std = torch.randn(32, 3, generator=g), torch.randn(3, generator=g)
    noise = torch.randn(32, 3, generator=g)
    action = mean + noise * log_std.exp()
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(action).sum(-1)
    got = standard_normal_log_prob(noise, normal_mode_log_prob(log_std))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got, normal_log_prob(action, mean, log_std))


def test_normal_mode_log_prob_is_the_log_density_at_the_mean():
    g = torch.Generator().manual_seed(4)
    mean, log_std = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(mean).sum(-1)
    torch.testing.assert_close(normal_mode_log_prob(log_std), expected)
    torch.testing.assert_close(normal_mode_log_prob(log_std[0]), expected[0])  # a state-independent log std


def test_categorical_head_samples_each_action_with_its_probability():
    from rlplat.networks.heads import CategoricalHead

    torch.manual_seed(0)
    head = CategoricalHead(4, 3)
    features = torch.randn(1, 4).expand(200_000, 4)
    with torch.inference_mode():
        action, log_prob = head.sample(features, deterministic=False)
        probabilities = head.logits(features[:1]).softmax(-1)[0]
    frequencies = torch.bincount(action, minlength=3).double() / len(action)
    torch.testing.assert_close(frequencies, probabilities.double(), atol=4e-3, rtol=0)  # 200k draws: sd < 1.2e-3
    torch.testing.assert_close(log_prob, probabilities.log()[action])


def test_gaussian_head_acts_with_the_log_density_of_its_action_and_its_mode():
    from rlplat.networks.heads import GaussianHead

    torch.manual_seed(0)
    head = GaussianHead(4, 2, log_std_init=-0.5)
    features = torch.randn(16, 4)
    with torch.inference_mode():
        action, log_prob = head.sample(features, deterministic=False)
        mode, mode_log_prob = head.sample(features, deterministic=True)
        mean = head.mean(features)
    assert action.shape == mode.shape == (16, 2) and log_prob.shape == mode_log_prob.shape == (16,)
    torch.testing.assert_close(mode, mean)
    torch.testing.assert_close(log_prob, normal_log_prob(action, mean, head.log_std.detach()))
    torch.testing.assert_close(mode_log_prob, normal_log_prob(mean, mean, head.log_std.detach()))


def test_kl_estimate_is_k3_and_takes_a_ratio_already_computed():
    log_ratio = torch.tensor([-0.5, 0.0, 0.3], dtype=torch.float64)
    expected = torch.tensor([math.exp(x) - 1.0 - x for x in log_ratio.tolist()], dtype=torch.float64)
    torch.testing.assert_close(kl_estimate(log_ratio), expected)
    torch.testing.assert_close(kl_estimate(log_ratio, log_ratio.exp()), expected)


def test_normal_mode_log_prob_entropy_equals_the_two_formulas_it_shares_a_sum_between():
    log_std = torch.randn(3, generator=torch.Generator().manual_seed(5))
    mode_log_prob, entropy = normal_mode_log_prob_entropy(log_std)
    torch.testing.assert_close(mode_log_prob, normal_mode_log_prob(log_std))
    torch.testing.assert_close(entropy, normal_entropy(log_std))
    torch.testing.assert_close(entropy, torch.distributions.Normal(torch.zeros(3), log_std.exp()).entropy().sum())
