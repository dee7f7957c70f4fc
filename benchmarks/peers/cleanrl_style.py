"""PPO and SAC written as CleanRL writes them: one file, plain PyTorch, gymnasium's vector envs.

CleanRL's scripts are not a package, so ``make bench-peers`` runs this equivalent, with the
settings of :mod:`settings` (runs in the peers' virtualenv, or any with torch and gymnasium):

    python benchmarks/peers/cleanrl_style.py ppo_overhead --seed 0
    python benchmarks/peers/cleanrl_style.py sac_overhead --seed 0

Each reports frames per second of its training loop. PPO follows ppo_continuous_action.py
(GAE, clipped objective and value loss, advantage normalisation per minibatch, a joint
gradient clip, Adam with eps 1e-5) without its observation and reward normalisation
wrappers, as in the other libraries' runs; SAC follows sac_continuous_action.py (twin Q,
tanh-squashed Gaussian actor, learned temperature) with one actor update per frame.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from settings import PPO_OVERHEAD, SAC_OVERHEAD, THREADS, report_rate


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.constant_(linear.bias, 0.0)
    return linear


def mlp(n_in: int, hidden: list[int], n_out: int, activation: type[nn.Module], out_std: float) -> nn.Sequential:
    sizes = [n_in, *hidden]
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [layer(a, b), activation()]
    return nn.Sequential(*layers, layer(sizes[-1], n_out, out_std))


class PPOAgent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.critic = mlp(obs_dim, hidden, 1, nn.Tanh, 1.0)
        self.actor_mean = mlp(obs_dim, hidden, act_dim, nn.Tanh, 0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        action_mean = self.actor_mean(x)
        action_std = self.actor_logstd.expand_as(action_mean).exp()
        probs = torch.distributions.Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def ppo_overhead(seed: int) -> None:
    s = PPO_OVERHEAD
    num_envs, num_steps = s["num_envs"], s["steps_per_env"]
    batch_size = num_envs * num_steps
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(s["env"])] * num_envs)
    low, high = envs.single_action_space.low, envs.single_action_space.high
    obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    agent = PPOAgent(obs_dim, act_dim, s["hidden"])
    optimizer = torch.optim.Adam(agent.parameters(), lr=s["lr"], eps=1e-5)

    obs = torch.zeros((num_steps, num_envs, obs_dim))
    actions = torch.zeros((num_steps, num_envs, act_dim))
    logprobs = torch.zeros((num_steps, num_envs))
    rewards = torch.zeros((num_steps, num_envs))
    dones = torch.zeros((num_steps, num_envs))
    values = torch.zeros((num_steps, num_envs))

    start = time.perf_counter()
    next_obs = torch.Tensor(envs.reset(seed=seed)[0])
    next_done = torch.zeros(num_envs)
    frames = 0
    while frames < s["frames"]:
        for step in range(num_steps):
            frames += num_envs
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            next_obs_np, reward, terminations, truncations, _ = envs.step(np.clip(action.numpy(), low, high))
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs = torch.Tensor(next_obs_np)
            next_done = torch.Tensor(np.logical_or(terminations, truncations).astype(np.float32))

        with torch.no_grad():  # GAE
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(num_steps)):
                nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
                nextvalues = next_value if t == num_steps - 1 else values[t + 1]
                delta = rewards[t] + s["gamma"] * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + s["gamma"] * s["gae_lambda"] * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs, b_logprobs = obs.reshape(-1, obs_dim), logprobs.reshape(-1)
        b_actions, b_advantages = actions.reshape(-1, act_dim), advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_inds = np.arange(batch_size)
        for _ in range(s["epochs"]):
            np.random.shuffle(b_inds)
            for begin in range(0, batch_size, s["minibatch_size"]):
                mb_inds = b_inds[begin : begin + s["minibatch_size"]]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                ratio = (newlogprob - b_logprobs[mb_inds]).exp()
                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - s["clip_epsilon"], 1 + s["clip_epsilon"])
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb_inds]) ** 2).mean()
                loss = pg_loss - 0.0 * entropy.mean() + 0.5 * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), s["max_grad_norm"])
                optimizer.step()
    report_rate(frames, start)


class SoftQNetwork(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.net = mlp(obs_dim + act_dim, hidden, 1, nn.ReLU, np.sqrt(2))

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, a], 1))


LOG_STD_MAX, LOG_STD_MIN = 2, -5


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.trunk = mlp(obs_dim, hidden[:-1], hidden[-1], nn.ReLU, np.sqrt(2))
        self.fc_mean = nn.Linear(hidden[-1], act_dim)
        self.fc_logstd = nn.Linear(hidden[-1], act_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def get_action(self, x: torch.Tensor):
        x = torch.relu(self.trunk(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t) - torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        return action, log_prob.sum(1, keepdim=True)


def sac_overhead(seed: int) -> None:
    s = SAC_OVERHEAD
    env = gym.make(s["env"])
    low, high = env.action_space.low, env.action_space.high
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    actor = Actor(obs_dim, act_dim, s["hidden"], low, high)
    qf1, qf2 = SoftQNetwork(obs_dim, act_dim, s["hidden"]), SoftQNetwork(obs_dim, act_dim, s["hidden"])
    qf1_target, qf2_target = SoftQNetwork(obs_dim, act_dim, s["hidden"]), SoftQNetwork(obs_dim, act_dim, s["hidden"])
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=s["lr"])
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=s["lr"])
    target_entropy = -float(act_dim)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha = log_alpha.exp().item()
    a_optimizer = torch.optim.Adam([log_alpha], lr=s["lr"])

    capacity = s["buffer_size"]
    rb_obs = np.zeros((capacity, obs_dim), np.float32)
    rb_next_obs = np.zeros((capacity, obs_dim), np.float32)
    rb_actions = np.zeros((capacity, act_dim), np.float32)
    rb_rewards = np.zeros((capacity, 1), np.float32)
    rb_dones = np.zeros((capacity, 1), np.float32)
    rng = np.random.default_rng(seed)

    start = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    for step in range(s["frames"]):
        if step < s["learning_starts"]:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                action = actor.get_action(torch.Tensor(obs[None]))[0][0].numpy()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rb_obs[step], rb_next_obs[step], rb_actions[step] = obs, next_obs, action
        rb_rewards[step], rb_dones[step] = reward, terminated
        obs = env.reset()[0] if terminated or truncated else next_obs

        if step >= s["learning_starts"]:
            idx = rng.integers(0, step + 1, s["batch_size"])
            b_obs, b_next_obs = torch.from_numpy(rb_obs[idx]), torch.from_numpy(rb_next_obs[idx])
            b_actions, b_rewards, b_dones = (torch.from_numpy(a[idx]) for a in (rb_actions, rb_rewards, rb_dones))
            with torch.no_grad():
                next_actions, next_log_pi = actor.get_action(b_next_obs)
                min_qf_next = torch.min(qf1_target(b_next_obs, next_actions), qf2_target(b_next_obs, next_actions))
                next_q = b_rewards + (1 - b_dones) * s["gamma"] * (min_qf_next - alpha * next_log_pi)
            qf_loss = nn.functional.mse_loss(qf1(b_obs, b_actions), next_q) + nn.functional.mse_loss(
                qf2(b_obs, b_actions), next_q
            )
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            pi, log_pi = actor.get_action(b_obs)
            actor_loss = ((alpha * log_pi) - torch.min(qf1(b_obs, pi), qf2(b_obs, pi))).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()

            with torch.no_grad():
                _, log_pi = actor.get_action(b_obs)
            alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
            a_optimizer.zero_grad()
            alpha_loss.backward()
            a_optimizer.step()
            alpha = log_alpha.exp().item()

            for net, target in ((qf1, qf1_target), (qf2, qf2_target)):
                for param, target_param in zip(net.parameters(), target.parameters()):
                    target_param.data.copy_(s["tau"] * param.data + (1 - s["tau"]) * target_param.data)
    report_rate(s["frames"], start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=["ppo_overhead", "sac_overhead"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    {"ppo_overhead": ppo_overhead, "sac_overhead": sac_overhead}[args.task](args.seed)


if __name__ == "__main__":
    main()
