"""Speed benchmark of rlplat's hot loop, tracking off.

    python benchmarks/speed.py                        # PPO on Pendulum, 3 repeats
    python benchmarks/speed.py --repeats 5 env=cartpole collector.num_envs=4

Measures, each as the median of ``--repeats`` runs in this process:

* collection: frames per second of the collector alone (policy + envs + storage writes);
* update: gradient updates per second (loss, backward, clip, optimizer step) on minibatches
  drawn beforehand: one rollout's (on-policy) or a replay buffer's (off-policy), after the
  first update, timed on its own;
* first update: seconds of that first update (with ``trainer.compile=true``, the compile;
  later repeats in the same process find more of it cached than a new process does, so
  ``--repeats 1`` gives a run's figure);
* loop: frames per second of ``Trainer.fit`` over ``--frames`` frames (the ``time/fps``
  metric of a run, evaluations included).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlplat.build import build
from rlplat.hydra_ext import compose_config
from rlplat.trainer import Trainer


def make_trainer(overrides: list[str], frames: int, output_dir: Path) -> Trainer:
    built = build(compose_config([*overrides, f"trainer.total_frames={frames}"]))
    return Trainer(built.parts, built.trainer, output_dir)


def time_collection(trainer: Trainer, rollouts: int) -> float:
    collector = trainer.parts.collector
    collector.rollout()  # warm-up, first reset
    start = time.perf_counter()
    for _ in range(rollouts):
        collector.rollout()
    return rollouts * collector.frames_per_batch / (time.perf_counter() - start)


def time_updates(trainer: Trainer, minimum: int = 200) -> tuple[float, float]:
    """Gradient updates per second on at least ``minimum`` minibatches drawn beforehand: one
    rollout's epochs of minibatches (on-policy), or batches from a replay buffer filled to
    ``learning_starts`` (off-policy); and the seconds of the first update, before them."""
    parts = trainer.parts
    batches: list = []
    while len(batches) < minimum:
        trainer._buffer(parts.collector.rollout())
        batches += parts.buffer.batches()
    start = time.perf_counter()
    trainer._update(batches[0], frames=0)  # with trainer.compile=true, the compile
    first = time.perf_counter() - start
    start = time.perf_counter()
    for batch in batches:
        trainer._update(batch, frames=0)
    return len(batches) / (time.perf_counter() - start), first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="config overrides, as for rlplat-train")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--frames", type=int, default=20_480, help="frames of the whole-loop run")
    parser.add_argument("--rollouts", type=int, default=5, help="rollouts of the collection run")
    args = parser.parse_args()
    overrides = ["tracking.enabled=false", *args.overrides]
    results: dict[str, list[float]] = {
        "collection (frames/s)": [],
        "update (updates/s)": [],
        "first update (s)": [],
        "loop (frames/s)": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            trainer = make_trainer(overrides, args.frames, Path(tmp))
            results["collection (frames/s)"].append(time_collection(trainer, args.rollouts))
            rate, first = time_updates(trainer)
            results["update (updates/s)"].append(rate)
            results["first update (s)"].append(first)
            trainer.parts.close()
            trainer = make_trainer(overrides, args.frames, Path(tmp))
            results["loop (frames/s)"].append(trainer.fit()["time/fps"])
            trainer.parts.close()
    table = Table(title=f"rlplat speed: {' '.join(args.overrides) or 'defaults'} (median of {args.repeats})")
    for column in ("measure", "median", "min", "max"):
        table.add_column(column, justify="right")
    for name, values in results.items():
        digits = 2 if name.endswith("(s)") else 0
        table.add_row(name, *(f"{v:.{digits}f}" for v in (statistics.median(values), min(values), max(values))))
    Console().print(table)


if __name__ == "__main__":
    main()
