"""rlplat's in-process measurements for ``make bench-peers`` (runs in rlplat's virtualenv).

    python benchmarks/peers/rlplat_run.py collection --env cartpole [--backend envpool]
    python benchmarks/peers/rlplat_run.py raw --env cartpole [--backend envpool]
    python benchmarks/peers/rlplat_run.py matmul

``collection``: frames per second of rlplat's collector alone, with PPO's policy acting in
16 envs (without observation normalisation, which raw stepping does not do either);
``raw``: gymnasium's own sync vector env of the same 16 envs stepped with random actions
(``envs.step(envs.action_space.sample())``). ``--backend envpool`` runs the collector with
``env.backend=envpool``, and steps EnvPool's own pool of the 16 envs for ``raw`` (with its
autoreset, one call per step). Both time their loop as rlplat-train runs its
own, with the objects alive before it exempted from Python's garbage collector (``gc.freeze``):
otherwise a full collection of the ~300k objects the imports left (0.1-0.15 s each) falls
inside or outside the half-second loop depending on how many objects came before it, a
swing of 30% between otherwise identical runs;
``matmul``: GFLOP/s of a 256 x 256 by 256 x 256 float32 matrix product on one thread, the
rate that bounds a 256-wide network's update. Training runs are measured through the
``rlplat-train`` command instead (see benchmarks/peers.py).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from settings import THREADS, report, report_rate

GYM_IDS = {"pendulum": "Pendulum-v1", "cartpole": "CartPole-v1"}
NUM_ENVS = 16
STEPS = 256  # env steps per env per timed rollout


def collection(env: str, rollouts: int, backend: str) -> None:
    from rlplat.build import build
    from rlplat.hydra_ext import compose_config

    overrides = [
        "algo=ppo",
        f"env={env}",
        "~transforms.obs_norm",
        f"collector.num_envs={NUM_ENVS}",
        f"collector.steps_per_env={STEPS}",
        "buffer.minibatch_size=64",
        "tracking.enabled=false",
        f"env.backend={backend}",
    ]
    with tempfile.TemporaryDirectory():
        built = build(compose_config(overrides))
        collector = built.parts.collector
        collector.rollout()  # the first reset and warm-up
        gc.freeze()
        start = time.perf_counter()
        for _ in range(rollouts):
            collector.rollout()
        report_rate(rollouts * collector.frames_per_batch, start)
        built.parts.close()


def raw(env: str, rollouts: int, backend: str) -> None:
    import gymnasium

    if backend == "envpool":
        import envpool

        envs = envpool.make_gymnasium(GYM_IDS[env], num_envs=NUM_ENVS, seed=0)  # seeded here
        envs.reset()
        actions = gymnasium.vector.utils.batch_space(envs.action_space, NUM_ENVS)  # its space is one env's
    else:
        envs = gymnasium.make_vec(GYM_IDS[env], num_envs=NUM_ENVS, vectorization_mode="sync")
        envs.reset(seed=0)
        actions = envs.action_space
    actions.seed(0)
    for _ in range(STEPS):  # warm-up, as the collector's first rollout
        envs.step(actions.sample())
    gc.freeze()
    start = time.perf_counter()
    for _ in range(rollouts * STEPS):
        envs.step(actions.sample())
    report_rate(rollouts * STEPS * NUM_ENVS, start)
    envs.close()


def matmul() -> None:
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    for _ in range(200):
        torch.mm(a, b)
    repeats = 4000
    start = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    elapsed = time.perf_counter() - start
    report(gflops=2 * 256**3 * repeats / elapsed / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=["collection", "raw", "matmul"])
    parser.add_argument("--env", choices=sorted(GYM_IDS), default="cartpole")
    parser.add_argument("--rollouts", type=int, default=8, help="timed rollouts of 16 envs x 256 steps")
    parser.add_argument("--backend", choices=["gymnasium", "envpool"], default="gymnasium", help="the envs' engine")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    if args.task == "collection":
        collection(args.env, args.rollouts, args.backend)
    elif args.task == "raw":
        raw(args.env, args.rollouts, args.backend)
    else:
        matmul()


if __name__ == "__main__":
    main()
