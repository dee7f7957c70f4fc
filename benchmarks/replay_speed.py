"""Speed of replay sampling at 1M transitions: prioritized (a batch drawn from the sum-tree, its
storage gathered, then its priorities set from TD errors) against uniform sampling.

    python benchmarks/replay_speed.py                     # batch 256, capacity 1M, 2,000 repetitions
    python benchmarks/replay_speed.py --sequence-length 3 # n-step windows, as DQN's presets sample

The buffer is filled to capacity first with CartPole-sized transitions (observations of 4
float32, an int64 action, reward and flags), one env. Each figure is the median over the
repetitions of one call (prioritized: ``sample()`` then ``update_priorities()``), in ms, in
this process, on the CPU; the target for prioritized replay is under 1 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.buffers.prioritized import PrioritizedReplayBuffer
from rlplat.buffers.replay import ReplayBuffer

CHUNK = 10_000
"""Rows per extend while filling."""


def transitions(T: int, start: int) -> TensorDict:
    """``[T, 1]`` CartPole-sized transitions (values from ``start``, so each is distinct)."""
    x = torch.arange(start, start + T, dtype=torch.float32).view(T, 1, 1)
    flags = torch.zeros(T, 1, 1, dtype=torch.bool)
    return TensorDict(
        {
            keys.OBSERVATION: x.expand(T, 1, 4).clone(),
            keys.ACTION: torch.zeros(T, 1, dtype=torch.int64),
            keys.NEXT: {
                keys.OBSERVATION: (x + 1).expand(T, 1, 4).clone(),
                keys.REWARD: torch.ones(T, 1, 1),
                keys.DONE: flags,
                keys.TERMINATED: flags.clone(),
                keys.TRUNCATED: flags.clone(),
            },
        },
        batch_size=[T, 1],
    )


def filled(buffer: ReplayBuffer, capacity: int) -> ReplayBuffer:
    for start in range(0, capacity, CHUNK):
        buffer.extend(transitions(CHUNK, start))
    return buffer


def median_ms(call: Callable[[], object], repetitions: int) -> float:
    for _ in range(20):  # warm-up
        call()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000, help="transitions held (the buffer is full)")
    parser.add_argument("--batch-size", type=int, default=256, help="samples per batch")
    parser.add_argument("--sequence-length", type=int, default=1, help="steps per sample")
    parser.add_argument("--repetitions", type=int, default=2000, help="timed calls per figure")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    shape = (CHUNK, 1)
    settings = {
        "capacity": args.capacity,
        "batch_size": args.batch_size,
        "learning_starts": 0,
        "sequence_length": args.sequence_length,
    }
    prioritized = filled(PrioritizedReplayBuffer(shape, beta_frames=args.capacity, **settings), args.capacity)
    uniform = filled(ReplayBuffer(shape, **settings), args.capacity)
    td_error = torch.rand(args.batch_size)

    def prioritized_step() -> None:
        batch = prioritized.sample()
        prioritized.update_priorities(batch[keys.SAMPLE_INDEX], td_error)

    def tree_step() -> None:
        position = tree.sample(args.batch_size, prioritized._rng)
        tree.update(position, td_error.numpy())

    tree = prioritized._tree
    assert tree is not None
    print(
        f"batch {args.batch_size}, {len(prioritized):,} transitions held, sequence_length {args.sequence_length}, "
        f"median of {args.repetitions:,} calls"
    )
    print(f"  prioritized sample + update_priorities: {median_ms(prioritized_step, args.repetitions):.3f} ms")
    print(f"    of which the sum-tree's draw + update: {median_ms(tree_step, args.repetitions):.3f} ms")
    print(f"  uniform sample:                         {median_ms(uniform.sample, args.repetitions):.3f} ms")


if __name__ == "__main__":
    main()
