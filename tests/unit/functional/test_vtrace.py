"""Numbers: V-trace (rlplat.functional.vtrace) against the paper's definition written as a
naive loop, against GAE when the behaviour policy is the target policy, and hand-computed
clipping cases."""

from __future__ import annotations

import math

import pytest
import torch

from rlplat.functional import generalized_advantage_estimate, vtrace


def naive_vtrace(
    behaviour, target, reward, value, next_value, done, terminated, gamma, rho_bar, pg_rho_bar, c_bar, lmbda
):
    """Espeholt et al. 2018, eq. 1 as written: for each s, the truncated sum over t = s .. s + n - 1
    of gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t V, n reaching the episode's or the rollout's end;
    then the policy gradient's advantage rho_s (r_s + gamma v_{s+1} - V(x_s))."""
    T, B = reward.shape[:2]
    ratio = (target - behaviour).exp()
    vs = torch.zeros(T, B, 1, dtype=reward.dtype)
    advantage = torch.zeros(T, B, 1, dtype=reward.dtype)
    for b in range(B):
        for s in range(T):
            total, t = 0.0, s
            while True:
                traces = math.prod(lmbda * min(c_bar, ratio[i, b].item()) for i in range(s, t))
                bootstrap = 0.0 if terminated[t, b, 0] else next_value[t, b, 0].item()
                delta = min(rho_bar, ratio[t, b].item()) * (
                    reward[t, b, 0].item() + gamma * bootstrap - value[t, b, 0].item()
                )
                total += gamma ** (t - s) * traces * delta
                if done[t, b, 0] or t == T - 1:
                    break
                t += 1
            vs[s, b, 0] = value[s, b, 0].item() + total
        for s in range(T):
            ends = done[s, b, 0] or s == T - 1
            v_next = next_value[s, b, 0].item() if ends else vs[s + 1, b, 0].item()
            q = reward[s, b, 0].item() + (0.0 if terminated[s, b, 0] else gamma * v_next)
            advantage[s, b, 0] = min(pg_rho_bar, ratio[s, b].item()) * (q - value[s, b, 0].item())
    return vs, advantage


def random_rollout(T: int, B: int, seed: int, dtype=torch.float64, consistent: bool = False):
    """Random v-trace inputs with terminations and truncations; ``consistent``: V(x_{t+1}) of a
    step that did not end its episode is the next step's V(x_t), as in a real rollout."""
    g = torch.Generator().manual_seed(seed)
    behaviour = torch.randn(T, B, generator=g, dtype=dtype)
    target = behaviour + 0.7 * torch.randn(T, B, generator=g, dtype=dtype)
    reward = torch.randn(T, B, 1, generator=g, dtype=dtype)
    value = torch.randn(T, B, 1, generator=g, dtype=dtype)
    next_value = torch.randn(T, B, 1, generator=g, dtype=dtype)
    terminated = torch.rand(T, B, 1, generator=g) < 0.1
    truncated = (torch.rand(T, B, 1, generator=g) < 0.1) & ~terminated
    done = terminated | truncated
    assert terminated.any() and truncated.any()
    if consistent:
        next_value[:-1] = torch.where(done[:-1], next_value[:-1], value[1:])
    return behaviour, target, reward, value, next_value, done, terminated


@pytest.mark.parametrize(
    ("gamma", "rho_bar", "pg_rho_bar", "c_bar", "lmbda"),
    [(0.99, 1.0, 1.0, 1.0, 1.0), (0.9, 2.0, 1.5, 1.2, 0.9), (0.5, 0.8, 0.6, 0.5, 1.0), (0.95, 1.0, 1.0, 1.0, 0.0)],
)
def test_vtrace_matches_the_papers_definition_with_terminations_and_truncations(
    gamma, rho_bar, pg_rho_bar, c_bar, lmbda
):
    inputs = random_rollout(T=29, B=4, seed=0)
    vs, advantage = vtrace(
        *inputs,
        gamma,
        clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_rho_bar,
        clip_c_threshold=c_bar,
        lmbda=lmbda,
    )
    expected_vs, expected_advantage = naive_vtrace(*inputs, gamma, rho_bar, pg_rho_bar, c_bar, lmbda)
    assert vs.dtype == advantage.dtype == torch.float64 and vs.shape == advantage.shape == (29, 4, 1)
    torch.testing.assert_close(vs, expected_vs)
    torch.testing.assert_close(advantage, expected_advantage)


def test_vtrace_in_float32_and_through_autograd_matches_the_numpy_path():
    inputs = random_rollout(T=17, B=3, seed=1, dtype=torch.float32)
    vs, advantage = vtrace(*inputs, 0.99)
    expected_vs, expected_advantage = naive_vtrace(*inputs, 0.99, 1.0, 1.0, 1.0, 1.0)
    torch.testing.assert_close(vs, expected_vs)
    torch.testing.assert_close(advantage, expected_advantage)
    value = inputs[3].clone().requires_grad_()
    vs_grad, advantage_grad = vtrace(*inputs[:3], value, *inputs[4:], 0.99)  # the torch loop, with gradients
    torch.testing.assert_close(vs_grad.detach(), vs)
    torch.testing.assert_close(advantage_grad.detach(), advantage)
    assert vs_grad.requires_grad


@pytest.mark.parametrize("lmbda", [1.0, 0.95, 0.0])
def test_on_policy_vtrace_targets_are_gae_value_targets(lmbda):
    """mu = pi: every rho and c is 1 (lambda), so v_s - V(x_s) is GAE(gamma, lambda)'s advantage."""
    behaviour, _, reward, value, next_value, done, terminated = random_rollout(T=31, B=5, seed=2, consistent=True)
    vs, advantage = vtrace(behaviour, behaviour, reward, value, next_value, done, terminated, 0.97, lmbda=lmbda)
    gae_advantage, gae_target = generalized_advantage_estimate(reward, value, next_value, done, terminated, 0.97, lmbda)
    torch.testing.assert_close(vs, gae_target)
    if lmbda == 1.0:  # r_s + gamma v_{s+1} - V(x_s) is then GAE(gamma, 1)'s advantage
        torch.testing.assert_close(advantage, gae_advantage)
    else:  # the advantage is the one-step error plus the discounted next v-trace error, as in TD(lambda) returns
        one_step = reward + 0.97 * (~terminated) * next_value - value
        following = torch.cat([gae_advantage[1:], torch.zeros_like(gae_advantage[:1])]) * (~done)
        torch.testing.assert_close(advantage, one_step + 0.97 * following)


def test_hand_computed_clipping_of_rho_and_c():
    """One env, three steps, no episode end: ratios 2, 0.5, 4 with rho_bar = c_bar = 1 and
    rho_bar_pg = 1.5: rho = (1, 0.5, 1), c = (1, 0.5, 1)."""
    gamma = 0.9
    ratio = torch.tensor([2.0, 0.5, 4.0], dtype=torch.float64)
    behaviour = torch.zeros(3, 1, dtype=torch.float64)
    target = ratio.log().view(3, 1)
    reward = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(3, 1, 1)
    value = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64).view(3, 1, 1)
    next_value = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64).view(3, 1, 1)
    no = torch.zeros(3, 1, 1, dtype=torch.bool)
    vs, advantage = vtrace(behaviour, target, reward, value, next_value, no, no, gamma, 1.0, 1.5, 1.0)
    d0, d1, d2 = 1.0 * (1 + 0.9 * 1 - 0.5), 0.5 * (2 + 0.9 * 2 - 1), 1.0 * (3 + 0.9 * 4 - 2)
    v2 = 2.0 + d2
    v1 = 1.0 + d1 + gamma * 0.5 * d2  # c_1 = min(1, 0.5)
    v0 = 0.5 + d0 + gamma * 1.0 * d1 + gamma**2 * 1.0 * 0.5 * d2  # c_0 = min(1, 2)
    torch.testing.assert_close(vs.flatten(), torch.tensor([v0, v1, v2], dtype=torch.float64))
    a0 = 1.5 * (1 + gamma * v1 - 0.5)  # pg rho: min(1.5, 2)
    a1 = 0.5 * (2 + gamma * v2 - 1.0)
    a2 = 1.5 * (3 + gamma * 4.0 - 2.0)  # the rollout's last step bootstraps from V(x_3)
    torch.testing.assert_close(advantage.flatten(), torch.tensor([a0, a1, a2], dtype=torch.float64))


def test_clipping_bounds_the_correction_of_a_stale_behaviour_policy():
    """Ratios far above the thresholds give what ratios at the thresholds give; ratios near 0
    (actions the target policy would not take) give v_s = V(x_s) and no policy gradient."""
    behaviour, _, reward, value, next_value, done, terminated = random_rollout(T=23, B=3, seed=3)
    far_above = vtrace(behaviour, behaviour + 30.0, reward, value, next_value, done, terminated, 0.99, 1.2, 0.8, 1.2)
    at = vtrace(behaviour, behaviour + math.log(1.2), reward, value, next_value, done, terminated, 0.99, 1.2, 0.8, 1.2)
    torch.testing.assert_close(far_above[0], at[0])
    one_step = reward + 0.99 * (~terminated) * torch.where(done, next_value, torch.cat([at[0][1:], next_value[-1:]]))
    torch.testing.assert_close(far_above[1], 0.8 * (one_step - value))
    vs, advantage = vtrace(behaviour, behaviour - 60.0, reward, value, next_value, done, terminated, 0.99)
    torch.testing.assert_close(vs, value)
    torch.testing.assert_close(advantage, torch.zeros_like(advantage))


def test_vtrace_rejects_bad_shapes_and_thresholds():
    x = torch.zeros(4, 2, 1)
    log_prob = torch.zeros(4, 2)
    with pytest.raises(ValueError, match=r"log-probs must be \[T, \*batch\]"):
        vtrace(x, log_prob, x, x, x, x.bool(), x.bool(), 0.9)
    with pytest.raises(ValueError, match="share one shape"):
        vtrace(log_prob, log_prob, x, x, torch.zeros(4, 2), x.bool(), x.bool(), 0.9)
    with pytest.raises(ValueError, match="clip_c_threshold=0.0: must be > 0"):
        vtrace(log_prob, log_prob, x, x, x, x.bool(), x.bool(), 0.9, clip_c_threshold=0.0)
