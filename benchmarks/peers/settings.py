"""The settings every library runs in ``make bench-peers`` (stdlib only: the peers' virtualenv
imports it too), and how a run reports its result.

A run prints one line ``RESULT {json}`` on stdout; :func:`report` writes it.
"""

from __future__ import annotations

import json
import os
import time

# Row 1: PPO's framework overhead at identical settings (Stable-Baselines3's PPO defaults but the
# rollout, RL-Zoo's Pendulum shape): 4 envs x 1024 steps, 10 epochs of minibatches of 64, two 64x64 tanh MLPs.
PPO_OVERHEAD = {
    "env": "Pendulum-v1",
    "num_envs": 4,
    "steps_per_env": 1024,
    "epochs": 10,
    "minibatch_size": 64,
    "hidden": [64, 64],
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_epsilon": 0.2,
    "lr": 3e-4,
    "max_grad_norm": 0.5,
    "frames": 102_400,
}

# Row 2: SAC's framework overhead: one env, one update of batch 256 per frame, 256x256 ReLU MLPs.
SAC_OVERHEAD = {
    "env": "Pendulum-v1",
    "hidden": [256, 256],
    "batch_size": 256,
    "buffer_size": 1_000_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "tau": 0.005,
    "lr": 3e-4,
    "frames": 10_000,
}

# CNN PPO on Atari Pong (the GPU rows): Schulman et al. 2017's Atari settings, as rlplat's
# tuned/ppo_pong.yaml and RL-Zoo's atari.yml have them; games cut at 2,000 emulator frames
# (500 env steps) on both sides, so that rlplat's closing evaluation of one game stays short.
PPO_ATARI = {
    "env": "ALE/Pong-v5",
    "num_envs": 8,
    "steps_per_env": 128,
    "epochs": 4,
    "minibatch_size": 256,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_epsilon": 0.1,
    "entropy_coef": 0.01,
    "lr": 2.5e-4,
    "max_grad_norm": 0.5,
    "features": 512,
    "max_emulator_frames": 2000,
    "frames": 10_240,
}

# The GPU rows' lengths: shorter runs of rows 1 and 2's settings (frames/s is a rate).
CUDA_FRAMES = {"ppo": 20_480, "sac": 3_000, "atari": PPO_ATARI["frames"]}

# Row 3: time to threshold with each library's best preset, evaluated on the same schedule.
EVAL_EVERY_FRAMES = 5000
EVAL_EPISODES = 10
TARGETS = {
    "ppo_pendulum": ("ppo", "Pendulum-v1", "pendulum", -200.0),
    "ppo_cartpole": ("ppo", "CartPole-v1", "cartpole", 475.0),
    "sac_pendulum": ("sac", "Pendulum-v1", "pendulum", -200.0),
    "dqn_cartpole": ("dqn", "CartPole-v1", "cartpole", 475.0),
}
"""name -> (algorithm, gymnasium id, rlplat env preset, threshold on the mean evaluation return)."""

THREADS = 1  # torch CPU threads of every library: the same thread count for all


def started() -> float:
    """``time.time()`` just before the orchestrator started this process (``BENCH_T0``), else now."""
    return float(os.environ.get("BENCH_T0", time.time()))


def report(**fields: object) -> None:
    """Print the run's result as the line ``RESULT {json}``."""
    print("RESULT " + json.dumps(fields), flush=True)


def report_rate(frames: int, start: float) -> None:
    """Report ``frames`` trained since ``start`` (a ``time.perf_counter()``): frames, seconds, fps."""
    elapsed = time.perf_counter() - start
    report(frames=frames, seconds=elapsed, fps=frames / elapsed)
