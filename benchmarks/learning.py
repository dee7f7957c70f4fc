"""Learning benchmark: run each (algo, env) preset on several seeds through rlplat-train and
report, per pair, the interquartile mean (IQM) of the final evaluation with its 95%
bootstrap confidence interval, how many seeds reached the threshold, and wall time.

    python benchmarks/learning.py                        # every pair, seeds 0-4 (or the pair's own)
    python benchmarks/learning.py --only ppo:cartpole --seeds 0 1

Each run is the plain command ``rlplat-train algo=<algo> env=<env> seed=<seed>`` (the tuned
preset of the pair applies), followed by the pair's own overrides where it has some (a frame
budget), recorded in the store given by --uri under the experiment ``learning-benchmark``. A
pair with seeds of its own (the MuJoCo pairs, whose runs take minutes) runs those unless
--seeds is given. Wall time is measured around the whole command, start-up included. A pair
passes when its IQM clears the threshold and at least --min-passing of its seeds do (by
default 4 of 5, all of fewer). The statistics are rlplat-compare's (:mod:`rlplat.report`),
and so are the plots it writes per env into --plots: learning curves over frames and wall
time, final-score intervals, performance profiles. The table goes to --out (Markdown) and
the numbers to --json; a full default run also copies the table into README.md and
docs/benchmarks/results.md between their results markers, and the CartPole curves over
frames into docs/images/ for that page.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from mlflow import MlflowClient

from rlplat.report.report import report_runs
from rlplat.report.stats import aggregate

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "learning-benchmark"
README_START = "<!-- results: benchmarks/results.md -->"
README_END = "<!-- end results -->"
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
"""Seeds of a pair that has none of its own, unless --seeds says otherwise."""
RESULTS_JSON = ROOT / "benchmarks" / "results.json"
"""The numbers behind the full table (``make bench-learning`` writes it; ``--merge`` updates it)."""
RESULTS_PAGES = (ROOT / "README.md", ROOT / "docs" / "benchmarks" / "results.md")
"""The pages that show the full results table between the markers above."""


GUIDE_CURVES = {
    "cartpole_masked": "learning_curves_cartpole_masked.png",
    "minigrid_doorkey_8x8": "learning_curves_minigrid_doorkey_8x8.png",
}
"""Env -> the image in docs/images/ of its pairs' learning curves over frames, which a guide
shows (memory: recurrent and memoryless policies on CartPole without velocities;
exploration: RND-PPO and PPO on MiniGrid DoorKey-8x8)."""


@dataclass(frozen=True)
class Target:
    """A pair to benchmark and what counts as solved."""

    algo: str
    env: str
    threshold: float  # final deterministic eval/return_mean to reach
    seeds: tuple[int, ...] | None = None  # the pair's seeds; None: --seeds (by default 0-4)
    overrides: tuple[str, ...] = ()  # key=value overrides after the preset's, e.g. a frame budget
    needed: int | None = None  # seeds that must reach the threshold; None: --min-passing (all of fewer)
    label: str | None = None  # tells apart a second target of one pair (e.g. its overrides' variant)

    @property
    def name(self) -> str:
        """``algo:env``, or ``algo:env:label``, as --only names it."""
        return f"{self.algo}:{self.env}" + (f":{self.label}" if self.label else "")

    def run_name(self, seed: int) -> str:
        """The MLflow run name of one seed: rlplat's default, ``<algo>-<env>-s<seed>``, with the label."""
        return f"{self.algo}-{self.env}" + (f"-{self.label}" if self.label else "") + f"-s{seed}"

    @property
    def command(self) -> str:
        """The command of one seed, as the results table shows it."""
        return " ".join(["rlplat-train", f"algo={self.algo}", f"env={self.env}", "seed=<seed>", *self.overrides])


TARGETS = [
    Target("ppo", "pendulum", threshold=-250.0),
    Target("ppo", "cartpole", threshold=475.0),
    Target("reinforce", "cartpole", threshold=450.0),
    Target("a2c", "cartpole", threshold=475.0),
    # IMPALA on its asynchronous collector (2 worker processes); PPO's tuned setting with its envs on 2 Ray actors
    Target("impala", "cartpole", threshold=475.0, seeds=(0, 1, 2)),
    Target("ppo", "cartpole", 475.0, seeds=(0, 1, 2), overrides=("collector=ray",), needed=2, label="ray"),
    Target("ppo_kl", "pendulum", threshold=-250.0),
    Target("dqn", "cartpole", threshold=475.0),
    # prioritized replay (docs/guides/replay.md): the tuned setting with buffer=prioritized, median of 3 seeds
    Target("dqn", "cartpole", 475.0, seeds=(0, 1, 2), overrides=("buffer=prioritized",), needed=2, label="prioritized"),
    Target("ddpg", "pendulum", threshold=-200.0),
    Target("td3", "pendulum", threshold=-200.0),
    Target("sac", "pendulum", threshold=-200.0),
    # MuJoCo (pip install 'rlplat[mujoco]'): the maximum return of 1000 within 100k frames on 3 seeds
    Target("ppo", "inverted_pendulum", threshold=1000.0, seeds=(0, 1, 2)),
    # SAC's 100k frames are 90k updates of 256 x 256 networks: one seed
    Target("sac", "hopper", threshold=1000.0, seeds=(0,), overrides=("trainer.total_frames=100000",)),
    # MiniGrid (pip install 'rlplat[minigrid]'): DoorKey-5x5 solved within the preset's 300k frames on 3 seeds
    Target("ppo", "minigrid_doorkey", threshold=0.8, seeds=(0, 1, 2)),
    # memory: CartPole without its velocities (env=cartpole_masked) on 3 seeds, the median
    # (2 of 3) at the threshold: recurrent PPO (100k frames) reaches 450 and recurrent A2C (300k)
    # 300; PPO without memory, with recurrent PPO's budget, does not
    Target("ppo_lstm", "cartpole_masked", threshold=450.0, seeds=(0, 1, 2), needed=2),
    Target("ppo", "cartpole_masked", threshold=450.0, seeds=(0, 1, 2), needed=2),
    Target("a2c_lstm", "cartpole_masked", threshold=300.0, seeds=(0, 1, 2), needed=2),
    # exploration (docs/guides/exploration.md): MiniGrid DoorKey-8x8, sparse reward, 1M frames on 3
    # seeds; the goal reached in the final evaluation (a success returns at least 0.1, so a mean of
    # 0.005 over the 20 episodes is one success: a mean above 0) by RND-PPO on 2 of 3 seeds, by PPO on none
    Target("ppo_rnd", "minigrid_doorkey_8x8", threshold=0.005, seeds=(0, 1, 2), needed=2),
    Target("ppo", "minigrid_doorkey_8x8", threshold=0.005, seeds=(0, 1, 2), needed=2),
]


@dataclass
class Run:
    """One seed of a pair."""

    algo: str
    env: str
    seed: int
    run_id: str
    frames: int
    wall_seconds: float
    eval_return_mean: float
    reached: bool
    command: str = ""  # the pair's command (Target.command); empty in runs recorded before it was kept


@dataclass
class Pair:
    """A pair's result over its seeds."""

    algo: str
    env: str
    command: str
    threshold: float
    seeds: int
    iqm: float
    iqm_low: float
    iqm_high: float
    reached: int
    needed: int
    frames: int
    wall_seconds: float  # median over the seeds
    passed: bool


def run_one(target: Target, seed: int, uri: str) -> Run:
    """Run one seed as a fresh process; read its final evaluation back from MLflow."""
    args = [f"algo={target.algo}", f"env={target.env}", f"seed={seed}", *target.overrides]
    name = target.run_name(seed)
    script = shutil.which("rlplat-train") or str(Path(sys.executable).parent / "rlplat-train")
    start = time.perf_counter()
    completed = subprocess.run(
        [script, *args, f"tracking.uri={uri}", f"tracking.experiment={EXPERIMENT}", f"tracking.run_name={name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"rlplat-train {' '.join(args)} failed:\n{completed.stderr}")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    [run] = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"attributes.run_name = '{name}' and tags.seed = '{seed}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    history = client.get_metric_history(run.info.run_id, "eval/return_mean")
    final = max(history, key=lambda m: m.step)
    reached = final.value >= target.threshold
    return Run(target.algo, target.env, seed, run.info.run_id, final.step, wall, final.value, reached, target.command)


def summarize(target: Target, runs: list[Run], min_passing: int) -> Pair:
    """The pair's IQM with its 95% stratified bootstrap interval, seeds reaching the threshold."""
    scores = np.array([r.eval_return_mean for r in runs])
    iqm = aggregate({"": scores}, "iqm")
    reached = sum(r.reached for r in runs)
    needed = min(min_passing, len(runs)) if target.needed is None else target.needed
    return Pair(
        target.algo,
        target.env,
        target.command,
        target.threshold,
        len(runs),
        iqm.value,
        iqm.low,
        iqm.high,
        reached,
        needed,
        int(np.median([r.frames for r in runs])),
        float(np.median([r.wall_seconds for r in runs])),
        iqm.value >= target.threshold and reached >= needed,
    )


def markdown(pairs: list[Pair]) -> str:
    lines = [
        "| command | seeds | frames | IQM [95% CI] | threshold | seeds ≥ threshold | wall time (s), median | passed |",
        "|---|---:|---:|---:|---:|---:|---:|:-:|",
    ]
    for p in pairs:
        digits = 3 if abs(p.threshold) < 10 else 1  # returns in [0, 1] (MiniGrid) keep three decimals
        lines.append(
            f"| `{p.command}` | {p.seeds} | {p.frames:,} | {p.iqm:.{digits}f} [{p.iqm_low:.{digits}f}, "
            f"{p.iqm_high:.{digits}f}] "
            f"| {p.threshold:g} | {p.reached} of {p.seeds} | {p.wall_seconds:.1f} | {'yes' if p.passed else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def copy_into(table: str, page: Path) -> None:
    """Replace the table between the results markers of ``page`` with ``table``."""
    text = page.read_text()
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    page.write_text(f"{head}{README_START}\n{table}{README_END}{tail}")


def merge(pairs: list[Pair], runs: list[Run]) -> list[Pair]:
    """Every pair of :data:`RESULTS_JSON` with ``pairs`` (and their ``runs``) in place of their
    old rows, in the order of :data:`TARGETS`; the file is rewritten with them."""
    saved = json.loads(RESULTS_JSON.read_text())
    new = {p.command for p in pairs}  # a pair's command tells apart two targets of one (algo, env)
    kept = [Pair(**p) for p in saved["pairs"] if p["command"] not in new]
    order = {t.command: i for i, t in enumerate(TARGETS)}
    merged = sorted([*kept, *pairs], key=lambda p: order.get(p.command, len(order)))
    unlabeled = {(t.algo, t.env): t.command for t in TARGETS if t.label is None}  # of runs saved without command
    kept_runs = [r for r in saved["runs"] if (r.get("command") or unlabeled.get((r["algo"], r["env"]))) not in new]
    results = {"pairs": [asdict(p) for p in merged], "runs": [*kept_runs, *(asdict(r) for r in runs)]}
    RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None, help="pairs as algo:env or algo:env:label (default: all)")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="default: the pair's own, else 0-4")
    parser.add_argument("--min-passing", type=int, default=4, help="seeds that must reach the threshold")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (1 for the README's wall times)")
    parser.add_argument("--uri", default=f"sqlite:///{ROOT / 'outputs' / 'mlflow.db'}", help="MLflow tracking URI")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.md", help="Markdown table")
    parser.add_argument("--plots", type=Path, default=None, help="folder for the report per env (default: none)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    parser.add_argument(
        "--merge",
        action="store_true",
        help=f"put these pairs into {RESULTS_JSON.relative_to(ROOT)} (replacing their rows) and write the whole "
        "table from it to --out, README.md and docs/benchmarks/results.md",
    )
    args = parser.parse_args()

    targets = [t for t in TARGETS if args.only is None or t.name in args.only]
    if not targets:
        parser.error(f"--only {args.only}: valid pairs: {', '.join(t.name for t in TARGETS)}")
    jobs = [(t, seed) for t in targets for seed in (args.seeds if args.seeds is not None else t.seeds or DEFAULT_SEEDS)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(lambda job: run_one(job[0], job[1], args.uri), jobs))
    pairs = []
    for target in targets:
        mine = [run for (of, _), run in zip(jobs, runs) if of is target]
        for r in mine:
            print(f"{r.algo}:{r.env} seed {r.seed}: {r.eval_return_mean:8.1f} in {r.wall_seconds:5.1f} s", flush=True)
        pairs.append(summarize(target, mine, args.min_passing))
    table = markdown(merge(pairs, runs) if args.merge else pairs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(table)
    full = args.only is None and args.out == parser.get_default("out")
    if full or args.merge:
        for page in RESULTS_PAGES:  # the full default table is the README's and the results page's
            copy_into(table, page)
    if args.plots is not None:
        for env in dict.fromkeys(t.env for t in targets):
            ids = [r.run_id for r in runs if r.env == env]
            report_runs(args.uri, ids, metric="eval/return_mean", out=args.plots / env, group_by=["algo"])
        curves = args.plots / "cartpole" / "learning_curves_frames.png"
        if full and curves.is_file():  # the results page shows them
            shutil.copyfile(curves, ROOT / "docs" / "images" / "learning_curves_cartpole.png")
        for env, image in GUIDE_CURVES.items():  # a guide shows these envs' curves, from whichever run plots them
            curves = args.plots / env / "learning_curves_frames.png"
            if any(t.env == env for t in targets) and curves.is_file():
                shutil.copyfile(curves, ROOT / "docs" / "images" / image)
    if args.json:
        results = {"pairs": [asdict(p) for p in pairs], "runs": [asdict(r) for r in runs]}
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    ok = all(p.passed for p in pairs)
    print(f"wrote {args.out}; {'every pair passed' if ok else 'some pair failed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
