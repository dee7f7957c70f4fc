"""Stable-Baselines3 side of ``make bench-peers`` (runs in the peers' virtualenv).

    python benchmarks/peers/sb3_run.py ppo_overhead --seed 0 [--device cuda --frames 20480]
    python benchmarks/peers/sb3_run.py sac_overhead --seed 0 [--device cuda --frames 3000]
    python benchmarks/peers/sb3_run.py ppo_atari --seed 0 --device cuda
    python benchmarks/peers/sb3_run.py target:ppo_pendulum --seed 0
    python benchmarks/peers/sb3_run.py small

``ppo_overhead`` and ``sac_overhead`` train with the settings of :mod:`settings` and report
frames per second of ``model.learn``; ``ppo_atari`` likewise, CNN PPO on Pong with
Stable-Baselines3's Atari wrappers (``make_atari_env``, 4 stacked frames). ``--device`` and
``--frames`` set the device and the length (the GPU rows). ``target:<name>`` trains with RL-Zoo's tuned
hyperparameters for the pair (``rl_zoo3``'s own ExperimentManager reads them from the
installed package: schedules, normalisation and gSDE as RL-Zoo applies them), evaluates
every 5,000 frames on 10 deterministic episodes (RL-Zoo's EvalCallback), and stops at the
first evaluation whose mean return reaches the threshold; it reports the wall time from the
command's start to that evaluation. ``small`` is the small run of the start-up row: PPO on
CartPole, 8 envs x 128 steps, 1,024 frames (the shape of rlplat's CartPole preset), whose
peak resident memory the orchestrator measures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from settings import (
    EVAL_EPISODES,
    EVAL_EVERY_FRAMES,
    PPO_ATARI,
    PPO_OVERHEAD,
    SAC_OVERHEAD,
    TARGETS,
    THREADS,
    report,
    report_rate,
    started,
)


def _train_ppo(policy: str, env: object, s: dict, seed: int, device: str, frames: int | None, **extra: object) -> None:
    """PPO with the settings ``s`` (and ``extra`` keyword arguments) on ``env``; reports its rate."""
    from stable_baselines3 import PPO

    model = PPO(
        policy,
        env,
        n_steps=s["steps_per_env"],
        batch_size=s["minibatch_size"],
        n_epochs=s["epochs"],
        gamma=s["gamma"],
        gae_lambda=s["gae_lambda"],
        clip_range=s["clip_epsilon"],
        learning_rate=s["lr"],
        max_grad_norm=s["max_grad_norm"],
        device=device,
        seed=seed,
        verbose=0,
        **extra,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=frames or s["frames"])
    report_rate(model.num_timesteps, start)


def ppo_overhead(seed: int, device: str = "cpu", frames: int | None = None) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    s = PPO_OVERHEAD
    env = make_vec_env(s["env"], n_envs=s["num_envs"], seed=seed)
    policy_kwargs = {"net_arch": s["hidden"], "activation_fn": torch.nn.Tanh}
    _train_ppo("MlpPolicy", env, s, seed, device, frames, policy_kwargs=policy_kwargs)


def sac_overhead(seed: int, device: str = "cpu", frames: int | None = None) -> None:
    import gymnasium
    from stable_baselines3 import SAC

    s = SAC_OVERHEAD
    model = SAC(
        "MlpPolicy",
        gymnasium.make(s["env"]),
        batch_size=s["batch_size"],
        buffer_size=s["buffer_size"],
        learning_starts=s["learning_starts"],
        gamma=s["gamma"],
        tau=s["tau"],
        learning_rate=s["lr"],
        train_freq=1,
        gradient_steps=1,
        policy_kwargs={"net_arch": s["hidden"]},
        device=device,
        seed=seed,
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=frames or s["frames"])
    report_rate(model.num_timesteps, start)


def ppo_atari(seed: int, device: str = "cpu", frames: int | None = None) -> None:
    import ale_py
    import gymnasium
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gymnasium.register_envs(ale_py)
    s = PPO_ATARI
    env_kwargs = {"frameskip": 1, "max_num_frames_per_episode": s["max_emulator_frames"]}
    env = VecFrameStack(make_atari_env(s["env"], n_envs=s["num_envs"], seed=seed, env_kwargs=env_kwargs), 4)
    _train_ppo("CnnPolicy", env, s, seed, device, frames, ent_coef=s["entropy_coef"])


def small() -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=0), n_steps=128, device="cpu", seed=0)
    start = time.perf_counter()
    model.learn(total_timesteps=1024)
    report_rate(model.num_timesteps, start)


def to_target(name: str, seed: int) -> None:
    from rl_zoo3.exp_manager import ExperimentManager
    from stable_baselines3.common.callbacks import BaseCallback, EvalCallback

    algo, env_id, _, threshold = TARGETS[name]
    t0 = started()

    class StopAtThreshold(BaseCallback):
        """Stops training after the first evaluation whose mean return reaches the threshold."""

        def __init__(self, evaluation: EvalCallback) -> None:
            super().__init__()
            self.evaluation = evaluation
            self.hit: tuple[float, int] | None = None
            self.training_started = time.time()

        def _on_training_start(self) -> None:
            self.training_started = time.time()

        def _on_step(self) -> bool:
            evaluation = self.evaluation
            if evaluation.n_calls % evaluation.eval_freq == 0 and evaluation.last_mean_reward >= threshold:
                self.hit = (time.time(), self.num_timesteps)
                return False
            return True

    with tempfile.TemporaryDirectory() as folder:
        manager = ExperimentManager(
            argparse.Namespace(),
            algo,
            env_id,
            folder,
            eval_freq=EVAL_EVERY_FRAMES,
            n_eval_episodes=EVAL_EPISODES,
            seed=seed,
            log_interval=-1,  # rl_zoo3.train's default: each algorithm's own
            verbose=0,
            device="cpu",
        )
        model, _ = manager.setup_experiment()
        [evaluation] = [c for c in manager.callbacks if isinstance(c, EvalCallback)]
        stop = StopAtThreshold(evaluation)
        manager.callbacks.append(stop)
        manager.learn(model)
    if stop.hit is None:
        now = time.time()
        report(reached=False, frames=model.num_timesteps, seconds=now - t0, train_seconds=now - stop.training_started)
    else:
        hit, frames = stop.hit
        report(reached=True, frames=frames, seconds=hit - t0, train_seconds=hit - stop.training_started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", help="ppo_overhead, sac_overhead, ppo_atari, small or target:<name>")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="torch device of ppo_overhead, sac_overhead, ppo_atari")
    parser.add_argument("--frames", type=int, default=None, help="frames of those runs; default: the settings'")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    if args.task == "ppo_overhead":
        ppo_overhead(args.seed, args.device, args.frames)
    elif args.task == "sac_overhead":
        sac_overhead(args.seed, args.device, args.frames)
    elif args.task == "ppo_atari":
        ppo_atari(args.seed, args.device, args.frames)
    elif args.task == "small":
        small()
    elif args.task.startswith("target:"):
        to_target(args.task.split(":", 1)[1], args.seed)
    else:
        parser.error(f"unknown task {args.task!r}")


if __name__ == "__main__":
    main()
