"""Sweep benchmark: start-up cost per job, and a 4-job sweep serial vs on the parallel launcher.

    python benchmarks/sweeps.py                  # both, 3 repeats each
    python benchmarks/sweeps.py --repeats 5 --frames 40000

Start-up: ``rlplat-train algo=ppo env=cartpole`` with a small budget, run --repeats times;
each run logs ``time/startup_s`` (seconds from the process's start to the first env step),
and the wall time of the whole command is measured around it.

Sweep: ``rlplat-train -m algo=ppo env=cartpole seed=0,1,2,3 trainer.total_frames=<frames>``
with Hydra's basic launcher (jobs one after another in one process) and with
``hydra/launcher=parallel`` (joblib, two worker processes), alternated so that drift on a
shared machine hits both alike. Wall time is the whole command; each sweep must record 4
finished child runs under its parent. Prints medians and the parallel/serial ratio, and
writes the numbers as JSON to --json.

All commands run in one temp directory, so they share one sqlite store, as a user's runs
share outputs/mlflow.db; an untimed first run creates it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow import MlflowClient

BIN = Path(sys.executable).parent
PARENT_TAG = "mlflow.parentRunId"


def run(args: list[str], cwd: Path) -> float:
    """Run ``rlplat-train *args`` in ``cwd``; returns the wall time in seconds."""
    start = time.perf_counter()
    result = subprocess.run([str(BIN / "rlplat-train"), *args], cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"rlplat-train {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return elapsed


def runs(cwd: Path, experiment: str) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=100)


def startup(repeats: int, cwd: Path) -> dict:
    walls, startups = [], []
    for i in range(repeats):
        experiment = f"startup-{i}"
        walls.append(
            run(["algo=ppo", "env=cartpole", "trainer.total_frames=2048", f"tracking.experiment={experiment}"], cwd)
        )
        [record] = runs(cwd, experiment)
        startups.append(record.data.metrics["time/startup_s"])
    return {"startup_s": startups, "wall_s": walls}


def sweep(launcher: str, frames: int | None, cwd: Path, experiment: str) -> dict:
    args = [
        "-m",
        f"hydra/launcher={launcher}",
        "algo=ppo",
        "env=cartpole",
        "seed=0,1,2,3",
        f"tracking.experiment={experiment}",
    ]
    if frames:
        args.append(f"trainer.total_frames={frames}")
    wall = run(args, cwd)
    records = runs(cwd, experiment)
    children = [r for r in records if PARENT_TAG in r.data.tags]
    finished = sum(r.info.status == "FINISHED" for r in children)
    startups = sorted(r.data.metrics["time/startup_s"] for r in children)
    fps = [r.data.metrics["time/fps"] for r in children]  # each job's training speed, frames/s
    return {
        "wall_s": wall,
        "children_finished": finished,
        "parents": len(records) - len(children),
        "job_startup_s": startups,
        "job_fps": fps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each measurement")
    parser.add_argument(
        "--frames",
        type=int,
        default=0,
        help="frames per sweep job; 0 keeps the tuned preset's trainer.total_frames",
    )
    parser.add_argument("--only", choices=("startup", "sweep"), help="run one of the two")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = parser.parse_args()
    report: dict = {}
    tmp = tempfile.TemporaryDirectory()
    cwd = Path(tmp.name)
    run(["algo=ppo", "env=cartpole", "trainer.total_frames=256", "tracking.experiment=warm-up"], cwd)

    if args.only in (None, "startup"):
        report["startup"] = startup(args.repeats, cwd)
        s = report["startup"]
        print(
            f"start-up to first env step: median {statistics.median(s['startup_s']):.2f} s "
            f"(runs: {', '.join(f'{x:.2f}' for x in s['startup_s'])}); "
            f"whole command median {statistics.median(s['wall_s']):.2f} s"
        )

    if args.only in (None, "sweep"):
        serial, parallel = [], []
        for i in range(args.repeats):  # alternate, so that drift hits both alike
            serial.append(sweep("basic", args.frames, cwd, f"serial-{i}"))
            parallel.append(sweep("parallel", args.frames, cwd, f"parallel-{i}"))
        report["sweep"] = {"frames_per_job": args.frames, "serial": serial, "parallel": parallel}
        for name, results in (("serial (basic)", serial), ("parallel (joblib, 2 workers)", parallel)):
            walls = [r["wall_s"] for r in results]
            recorded = [f"{r['children_finished']}/4" for r in results]
            print(
                f"4-job sweep, {name}: median {statistics.median(walls):.1f} s "
                f"(runs: {', '.join(f'{w:.1f}' for w in walls)}); runs recorded: {', '.join(recorded)}; "
                f"per-job start-up s: {[round(x, 2) for x in results[0]['job_startup_s']]}; "
                f"job training speed: median {statistics.median(f for r in results for f in r['job_fps']):.0f} frames/s"
            )
        ratios = [p["wall_s"] / s["wall_s"] for s, p in zip(serial, parallel)]
        report["sweep"]["ratios"] = ratios
        print(
            f"parallel / serial wall time: median {statistics.median(ratios):.2f} "
            f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)})"
        )

    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    tmp.cleanup()


if __name__ == "__main__":
    main()
