"""Frames per second of each collector, on a cheap env and on a costly one, tracking off.

    python benchmarks/collectors.py                      # sync, async, ray on cartpole and costly_cartpole
    python benchmarks/collectors.py --collectors sync async --envs costly_cartpole --repeats 5

For each env and collector, ``algo=impala`` (its network and rollout shape: the same policy
acts in every case) with ``collector=<name>``, measures as medians of ``--repeats`` runs:

* collection: frames per second of the collector alone, iterated with no learner between
  rollouts (after a first rollout that starts the workers);
* training: ``time/fps`` of ``Trainer.fit`` over ``--frames`` frames (updates, evaluation at
  the end included): what a run gets, where the asynchronous collector's workers collect while
  the learner updates.

``costly_cartpole`` is CartPole with 1 ms of CPU time spent in every step (``env=costly``,
``env.step_ms``), standing in for a simulator. The ratios are against ``sync`` on the same env.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlplat.build import build
from rlplat.hydra_ext import compose_config
from rlplat.trainer import Trainer

COLLECTORS = ("sync", "async", "ray")
ENVS = ("cartpole", "costly_cartpole")


def overrides(env: str, collector: str, frames: int) -> list[str]:
    return [
        "algo=impala",
        f"env={env}",
        f"collector={collector}",
        f"trainer.total_frames={frames}",
        f"trainer.eval_every_frames={frames}",
        "trainer.eval_episodes=2",
        "tracking.enabled=false",
    ]


def collection_fps(env: str, collector_name: str, frames: int) -> float:
    """Frames per second of the collector alone over about ``frames`` frames."""
    built = build(compose_config(overrides(env, collector_name, 10**12)))
    collector = built.parts.collector
    try:
        rollouts = iter(collector)
        next(rollouts)  # starts the workers, first resets
        count = max(1, frames // collector.frames_per_batch)
        start = time.perf_counter()
        for _ in range(count):
            next(rollouts)
        return count * collector.frames_per_batch / (time.perf_counter() - start)
    finally:
        built.parts.close()


def training_fps(env: str, collector_name: str, frames: int) -> float:
    """``time/fps`` of a training run of ``frames`` frames."""
    built = build(compose_config(overrides(env, collector_name, frames)))
    with tempfile.TemporaryDirectory() as directory:
        try:
            return Trainer(built.parts, built.trainer, Path(directory)).fit()["time/fps"]
        finally:
            built.parts.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collectors", nargs="+", default=list(COLLECTORS), choices=COLLECTORS)
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--frames", type=int, default=20_000, help="frames per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args()
    collectors = [c for c in args.collectors if c != "ray" or importlib.util.find_spec("ray") is not None]
    table = Table(title=f"collectors, algo=impala, medians of {args.repeats} ({args.frames:,} frames each)")
    for column in ("env", "collector", "collection fps", "vs sync", "training fps", "vs sync"):
        table.add_column(column, justify="left" if column in ("env", "collector") else "right")
    for env in args.envs:
        base: tuple[float, float] | None = None
        for name in collectors:
            collect = statistics.median(collection_fps(env, name, args.frames) for _ in range(args.repeats))
            train = statistics.median(training_fps(env, name, args.frames) for _ in range(args.repeats))
            base = base or (collect, train)
            table.add_row(
                env, name, f"{collect:,.0f}", f"{collect / base[0]:.2f}x", f"{train:,.0f}", f"{train / base[1]:.2f}x"
            )
    Console().print(table)


if __name__ == "__main__":
    main()
