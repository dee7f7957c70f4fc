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
rate that bounds a 256-wide network's update; and the milliseconds of the matrix products of
one SAC update at row 2's sizes (``sac_products_ms``), run in a loop of their own with nothing
else between them: what an update costs with no framework at all, on torch's products.
Training runs are measured through the ``rlplat-train`` command instead (see
benchmarks/peers.py).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from settings import SAC_OVERHEAD, THREADS, report, report_rate

GYM_IDS = {"pendulum": "Pendulum-v1", "cartpole": "CartPole-v1"}
NUM_ENVS = 16
STEPS = 256  # env steps per env per timed rollout
THIN = 4  # columns of a right operand that torch multiplies faster transposed (sac_products_ms)


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
    milliseconds, mflop = sac_products_ms()
    report(gflops=2 * 256**3 * repeats / elapsed / 1e9, sac_products_ms=milliseconds, sac_products_mflop=mflop)


def sac_products_ms(obs_dim: int = 3, act_dim: int = 1, repeats: int = 300) -> tuple[float, float]:
    """Median milliseconds (of 5 timings of ``repeats`` updates) of the matrix products of one
    SAC update at ``settings.SAC_OVERHEAD``'s sizes, and their MFLOP.

    The products of ``benchmarks/peers.py:sac_update_mflop``'s accounting, each one
    ``torch.mm`` chained through each pass's activations with no nonlinearity, loss or
    optimizer between them: the actor forward on s' and on s and back (weights and inputs)
    from the second; two target critics forward; two online critics forward on (s, a), back
    (weights and inputs), forward on (s, a~) and back to the inputs. Weights are held
    ``[in, out]``: forward ``x W``, weight gradient ``x^T g``, input gradient ``g W^T``. A
    product whose right operand has at most ``THIN`` columns (the first layers' 3 or 4
    inputs, the actor's 2 outputs) runs as ``(b^T a^T)^T``: torch's CPU product of a
    contiguous right operand that thin takes a slow path, 75-95 us at 256 rows of 256 against
    15-20 us transposed, which would put a tenth of the time on a hundredth of the FLOP.
    """
    n, (h1, h2) = SAC_OVERHEAD["batch_size"], SAC_OVERHEAD["hidden"]

    def layers(sizes: list[int]) -> list[torch.Tensor]:
        return [torch.randn(inp, out) / inp**0.5 for inp, out in zip(sizes, sizes[1:])]

    actor = layers([obs_dim, h1, h2, 2 * act_dim])
    critics = [layers([obs_dim + act_dim, h1, h2, 1]) for _ in range(4)]  # two online, two target
    s, sa = torch.randn(n, obs_dim), torch.randn(n, obs_dim + act_dim)
    flop = 0

    def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        nonlocal flop
        flop += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        if b.shape[1] <= THIN < a.shape[0]:  # torch's slow path: a thin right operand
            return torch.mm(b.t(), a.t()).t()
        return torch.mm(a, b)

    def forward(weights: list[torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
        activations = [x]
        for weight in weights:
            activations.append(mm(activations[-1], weight))
        return activations

    def backward(weights: list[torch.Tensor], activations: list[torch.Tensor], weight_grads: bool) -> None:
        grad = torch.ones_like(activations[-1])
        for weight, x in zip(reversed(weights), reversed(activations[:-1])):
            if weight_grads:
                mm(x.t(), grad)
            grad = mm(grad, weight.t())

    def update() -> None:
        forward(actor, s)  # a' ~ pi(s'), for the target
        saved = forward(actor, s)
        for target in critics[2:]:
            forward(target, sa)
        for online in critics[:2]:
            backward(online, forward(online, sa), weight_grads=True)
            backward(online, forward(online, sa), weight_grads=False)  # dQ(s, a~)/da~, critics held fixed
        backward(actor, saved, weight_grads=True)

    update()
    mflop = flop / 1e6
    for _ in range(30):
        update()
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            update()
        timings.append((time.perf_counter() - start) / repeats * 1e3)
    return statistics.median(timings), mflop


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
