"""Tracking-timeouts benchmark: how long an absent or hung MLflow tracking server holds rlplat up.

    python benchmarks/tracking_timeouts.py              # 3 runs each
    python benchmarks/tracking_timeouts.py --repeats 5

Four figures, each the median of --repeats runs, against its budget:

- ``rlplat-train`` (PPO, CartPole) with ``tracking.uri`` at a port where nothing listens:
  seconds from the command to its one-line error (exit status 2); budget 10 s.
- ``Tracker`` opened at a hung server (connections made, never answered): seconds until it
  raises ConfigError; budget ``PROBE_TIMEOUT_S`` + 1 (one request, not tried again).
- A log step whose write goes to a hung server: seconds it holds the loop; budget
  ``WRITE_TIMEOUT_S`` + 1.
- The next log step, the retry not due yet: seconds; budget 0.1 (no request at all).

tests/unit/tracking/test_tracker_buffer.py and tests/integration/test_tracking_server.py
check what happens (one request, its timeout, the error line); the seconds are measured
here, where a busy machine cannot fail a test. Exits 1 when a median is over its budget.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mlflow import MlflowClient

from rlplat.registry import ConfigError
from rlplat.tracking import store as tracking
from rlplat.tracking.store import Tracker

BIN = Path(sys.executable).parent
ABSENT_BUDGET_S = 10.0
RUN = ["algo=ppo", "env=cartpole", "trainer.total_frames=256", "collector.num_envs=4", "collector.steps_per_env=64"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def hung_server() -> tuple[socket.socket, str]:
    """A listening socket that never accepts (the kernel completes connections; nothing
    answers), and its URI."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def absent_server_error(cwd: Path) -> float:
    """Seconds until ``rlplat-train`` reports a tracking server that is not there."""
    args = [*RUN, f"tracking.uri=http://127.0.0.1:{free_port()}"]
    start = time.perf_counter()
    result = subprocess.run([str(BIN / "rlplat-train"), *args], cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 2:
        sys.exit(f"rlplat-train {' '.join(args)}: exit status {result.returncode}, not 2:\n{result.stderr[-2000:]}")
    return elapsed


def hung_probe(uri: str) -> float:
    """Seconds until a Tracker opened at the hung server raises ConfigError."""
    start = time.perf_counter()
    try:
        Tracker(uri, "hung", None)
    except ConfigError:
        return time.perf_counter() - start
    sys.exit("a Tracker opened at a hung server did not raise ConfigError")


def hung_log_steps(store: str, uri: str) -> tuple[float, float]:
    """Seconds of a log step written to the hung server, and of the next (its retry not due)."""
    tracker = Tracker(store, "hung", None, say=lambda _: None)
    tracker.start("run", {}, {})
    tracker.client = MlflowClient(tracking_uri=uri)  # the real HTTP transport, to the hung server
    start = time.perf_counter()
    tracker.log_metrics({"time/fps": 1.0}, step=256)
    first = time.perf_counter() - start
    start = time.perf_counter()
    tracker.log_metrics({"time/fps": 2.0}, step=512)
    return first, time.perf_counter() - start


def median(measure: Callable[[], float], repeats: int) -> float:
    return statistics.median(measure() for _ in range(repeats))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (default 3)")
    options = parser.parse_args()
    listener, uri = hung_server()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        absent = median(lambda: absent_server_error(cwd), options.repeats)
        rows.append((absent, ABSENT_BUDGET_S, "rlplat-train: one-line error for an absent tracking server"))
        probe = median(lambda: hung_probe(uri), options.repeats)
        rows.append((probe, tracking.PROBE_TIMEOUT_S + 1, "Tracker opened at a hung server: ConfigError"))
        store = f"sqlite:///{cwd / 'mlflow.db'}"
        steps = [hung_log_steps(store, uri) for _ in range(options.repeats)]
        held = statistics.median(first for first, _ in steps)
        rows.append((held, tracking.WRITE_TIMEOUT_S + 1, "a log step written to a hung server"))
        next_step = statistics.median(second for _, second in steps)
        rows.append((next_step, 0.1, "the next log step, its retry not due"))
    listener.close()
    over = 0
    for seconds, budget, what in rows:
        verdict = "within" if seconds <= budget else "OVER"
        over += seconds > budget
        print(f"{seconds:6.2f} s  {what} ({verdict} the {budget:g} s budget)", flush=True)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
