"""Memory of DQN's replay on Atari frames: the process's resident memory before and after the
replay holds N transitions collected by the preset's own collector (random actions at first,
as a run's first frames are), and the bytes its storage holds.

    python benchmarks/replay_memory.py                          # algo=dqn env=pong, 100k transitions
    python benchmarks/replay_memory.py buffer.frame_stack=null  # observations stored whole, for comparison
    python benchmarks/replay_memory.py --train-frames 10000     # memory-mapped replay of 1M transitions

Needs the atari extra (``pip install 'rlplat[atari]'``). The second form stores each
transition's two stacks of four 84x84 frames: about 5.6 GB at 100k transitions.

The third trains DQN on Pong for that many frames through ``rlplat-train`` (updates from
frame 1,000, one evaluation game, tracking off) with a replay of ``--capacity`` transitions
(default 1M: 7 GB of frames) in memory-mapped files (``buffer.storage=memmap``), and reports
the training process's peak resident memory (``getrusage``'s ``ru_maxrss`` of the child
process) and what the replay's files take on disk (they are sparse: only what was written).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlplat.build import build
from rlplat.hydra_ext import compose_config


def resident_mib() -> float:
    """The process's resident memory now, in MiB (Linux /proc)."""
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def train_on_memmap(frames: int, capacity: int, overrides: list[str]) -> None:
    """Train DQN on Pong for ``frames`` frames on a memory-mapped replay of ``capacity``
    transitions as a child process; print its peak resident memory and the replay's files."""
    script = shutil.which("rlplat-train") or str(Path(sys.executable).parent / "rlplat-train")
    with tempfile.TemporaryDirectory(prefix="rlplat-memmap-") as folder:
        run_dir = Path(folder) / "run"
        command = [
            script, "algo=dqn", "env=pong", f"buffer.capacity={capacity}", "buffer.storage=memmap",
            f"trainer.total_frames={frames}", "buffer.learning_starts=1000", "trainer.eval_episodes=1",
            "tracking.enabled=false", f"hydra.run.dir={run_dir}", *overrides,
        ]  # fmt: skip
        start = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if completed.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**10  # KiB on Linux
        files = [p for p in (run_dir / "replay").rglob("*") if p.is_file()]
        apparent = sum(p.stat().st_size for p in files) / 2**30
        on_disk = sum(p.stat().st_blocks * 512 for p in files) / 2**20
    print(f"rlplat-train {' '.join(command[1:-1])}: {frames:,} frames in {seconds:.0f} s")
    print(f"  peak resident memory of the training process: {peak:.0f} MiB")
    print(f"  replay files: {apparent:.2f} GiB apparent size, {on_disk:.0f} MiB on disk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000, help="transitions to fill the replay with")
    parser.add_argument("--train-frames", type=int, default=None, help="train on a memory-mapped replay instead")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="its capacity, with --train-frames")
    parser.add_argument("overrides", nargs="*", help="config overrides after algo=dqn env=pong")
    args = parser.parse_args()
    if args.train_frames is not None:
        train_on_memmap(args.train_frames, args.capacity, args.overrides)
        return
    overrides = ["algo=dqn", "env=pong", "tracking.enabled=false", f"buffer.capacity={args.transitions}"]
    built = build(compose_config([*overrides, *args.overrides]))
    parts = built.parts
    before, start, frames = resident_mib(), time.perf_counter(), 0
    try:
        while frames < args.transitions:
            rollout = parts.collector.rollout()
            parts.buffer.extend(parts.loss.preprocess(rollout))
            frames += rollout.numel()
        batch = parts.buffer.sample()
    finally:
        parts.close()
    held = parts.buffer.storage_bytes / 2**20
    print(f"{' '.join(args.overrides) or 'the preset'}: {frames:,} transitions in {time.perf_counter() - start:.0f} s")
    print(f"  resident memory: {before:.0f} MiB before the replay, {resident_mib():.0f} MiB with it")
    print(f"  replay storage: {held:.0f} MiB; a sample's observations {list(batch['observation'].shape)} "
          f"{batch['observation'].dtype}")  # fmt: skip


if __name__ == "__main__":
    main()
