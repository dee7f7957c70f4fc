"""Memory of DQN's replay on Atari frames: the process's resident memory before and after the
replay holds N transitions collected by the preset's own collector (random actions at first,
as a run's first frames are), and the bytes its storage holds.

    python benchmarks/replay_memory.py                          # algo=dqn env=pong, 100k transitions
    python benchmarks/replay_memory.py buffer.frame_stack=null  # observations stored whole, for comparison

Needs the atari extra (``pip install 'rlplat[atari]'``). The second form stores each
transition's two stacks of four 84x84 frames: about 5.6 GB at 100k transitions.
"""

from __future__ import annotations

import argparse
import os
import time

from rlplat.build import build
from rlplat.hydra_ext import compose_config


def resident_mib() -> float:
    """The process's resident memory now, in MiB (Linux /proc)."""
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000, help="transitions to fill the replay with")
    parser.add_argument("overrides", nargs="*", help="config overrides after algo=dqn env=pong")
    args = parser.parse_args()
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
