"""Learning benchmark: run each (algo, env) preset for several seeds through rlplat-train and
write a results table from what the runs recorded in MLflow.

    python benchmarks/learning.py                        # every pair, seeds 0 1 2
    python benchmarks/learning.py --only ppo:cartpole --seeds 0

Each run is the plain command ``rlplat-train algo=<algo> env=<env> seed=<seed>`` (the
tuned preset of the pair applies), recorded in the store given by --uri under the
experiment ``learning-benchmark``. Wall time is measured around the whole command, start-up
included. The table goes to --out (Markdown) and the numbers to --json; a full default run
also copies the table into README.md between its results markers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "learning-benchmark"
README_START = "<!-- results: benchmarks/results.md -->"
README_END = "<!-- end results -->"


@dataclass(frozen=True)
class Target:
    """A pair to benchmark and what counts as solved."""

    algo: str
    env: str
    threshold: float  # final deterministic eval/return_mean to reach
    max_seconds: float  # wall time of one run, start-up included
    min_passing: int  # seeds of three that must pass
    max_frames: int | None = None  # frames a run may use at most (None: no bound)


TARGETS = [
    Target("ppo", "pendulum", threshold=-250.0, max_seconds=120.0, min_passing=2),
    Target("ppo", "cartpole", threshold=475.0, max_seconds=60.0, min_passing=3),
    Target("reinforce", "cartpole", threshold=450.0, max_seconds=600.0, min_passing=2, max_frames=300_000),
    Target("a2c", "cartpole", threshold=475.0, max_seconds=600.0, min_passing=2, max_frames=300_000),
    Target("ppo_kl", "pendulum", threshold=-250.0, max_seconds=600.0, min_passing=2, max_frames=200_000),
    Target("dqn", "cartpole", threshold=475.0, max_seconds=600.0, min_passing=2, max_frames=100_000),
    Target("ddpg", "pendulum", threshold=-200.0, max_seconds=600.0, min_passing=2, max_frames=20_000),
    Target("td3", "pendulum", threshold=-200.0, max_seconds=600.0, min_passing=2, max_frames=20_000),
    Target("sac", "pendulum", threshold=-200.0, max_seconds=600.0, min_passing=2, max_frames=20_000),
]


@dataclass
class Result:
    algo: str
    env: str
    seed: int
    command: str
    frames: int
    wall_seconds: float
    eval_return_mean: float
    threshold: float
    max_seconds: float
    passed: bool


def run_one(target: Target, seed: int, uri: str) -> Result:
    args = [f"algo={target.algo}", f"env={target.env}", f"seed={seed}"]
    command = " ".join(["rlplat-train", *args])
    script = shutil.which("rlplat-train") or str(Path(sys.executable).parent / "rlplat-train")
    start = time.perf_counter()
    completed = subprocess.run(
        [script, *args, f"tracking.uri={uri}", f"tracking.experiment={EXPERIMENT}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{completed.stderr}")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    [run] = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.algo = '{target.algo}' and tags.env = '{target.env}' and tags.seed = '{seed}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    history = client.get_metric_history(run.info.run_id, "eval/return_mean")
    final = max(history, key=lambda m: m.step)
    return Result(
        target.algo,
        target.env,
        seed,
        command,
        final.step,
        wall,
        final.value,
        target.threshold,
        target.max_seconds,
        final.value >= target.threshold
        and wall <= target.max_seconds
        and (target.max_frames is None or final.step <= target.max_frames),
    )


def frames_bound(result: Result) -> str:
    bound = next(t.max_frames for t in TARGETS if (t.algo, t.env) == (result.algo, result.env))
    return "" if bound is None else f", ≤ {bound:,} frames"


def markdown(results: list[Result]) -> str:
    lines = [
        "| command | seed | frames | wall time (s) | eval/return_mean | threshold | passed |",
        "|---|---:|---:|---:|---:|---|:-:|",
    ]
    for r in results:
        lines.append(
            f"| `{r.command}` | {r.seed} | {r.frames:,} | {r.wall_seconds:.1f} | {r.eval_return_mean:.1f} "
            f"| ≥ {r.threshold:g} in ≤ {r.max_seconds:g} s{frames_bound(r)} | {'yes' if r.passed else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def copy_into_readme(table: str, readme: Path) -> None:
    """Replace the table between the results markers of the README with ``table``."""
    text = readme.read_text()
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{table}{README_END}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="pairs as algo:env (default: all)")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--uri", default=f"sqlite:///{ROOT / 'outputs' / 'mlflow.db'}", help="MLflow tracking URI")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.md", help="Markdown table")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args()

    targets = [t for t in TARGETS if args.only is None or f"{t.algo}:{t.env}" in args.only]
    if not targets:
        parser.error(f"--only {args.only}: valid pairs: {', '.join(f'{t.algo}:{t.env}' for t in TARGETS)}")
    results, ok = [], True
    for target in targets:
        pair = [run_one(target, seed, args.uri) for seed in args.seeds]
        for r in pair:
            print(f"{r.command:<45} seed {r.seed}: {r.eval_return_mean:8.1f} in {r.wall_seconds:5.1f} s", flush=True)
        needed = min(target.min_passing, len(pair))
        ok &= sum(r.passed for r in pair) >= needed
        results += pair
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(results)
    args.out.write_text(table)
    if args.only is None and args.out == parser.get_default("out"):
        copy_into_readme(table, ROOT / "README.md")  # the full default table is the README's
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    print(f"wrote {args.out}; {'all pairs met their targets' if ok else 'some pair missed its target'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
