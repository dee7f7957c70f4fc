"""rlplat-eval: evaluate a trained agent and record the result as a new MLflow run.

    rlplat-eval <run id | run dir | checkpoint> [episodes=100] [deterministic=true] [seed=...]
                [env.id=...] [device=...] [tracking.uri=...]

Rebuilds the agent from the checkpoint (:mod:`rlplat.cli.restore`), runs ``episodes``
episodes in batches of at most :data:`BATCH` envs (episode i reset with seed + 10000 + i,
transform statistics frozen, as the trainer's evaluation does: the same episode count and
seed reproduce a finished run's final ``eval/return_mean``), prints mean, std, min and max
of the returns and lengths, and records them as a new MLflow run (tag ``rlplat.source_run``)
in the source run's store and experiment, or in ``tracking.uri`` when the run is unknown.
Bad input is one ``rlplat-eval: error:`` line and exit status 2, with nothing recorded.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlplat.cli.args import Key, default_tracking_uri, integer, reported
from rlplat.cli.locate import with_source_run
from rlplat.cli.restore import (
    COMMON_KEYS,
    argument_parser,
    locate_run,
    parse_command,
    restore,
)
from rlplat.command_line import collection_paused, skip_final_collection
from rlplat.tags import SOURCE_RUN_TAG

if TYPE_CHECKING:
    from rlplat.build import Build
    from rlplat.cli.locate import Located
    from rlplat.envs.base import Episode
    from rlplat.tracking.store import Tracker

PROG = "rlplat-eval"
BATCH = 32
"""Most envs stepped together; ``episodes`` are run in batches of this many."""
KEYS = {"episodes": Key(integer(1), 100, "episodes to run (one per env, at most 32 envs at once)"), **COMMON_KEYS}


def run_episodes(built: Build, episodes: int, deterministic: bool) -> list[Episode]:
    """Run ``episodes`` episodes of the rebuilt agent, ``BATCH`` envs at a time; episode i
    is reset with ``seed + 10000 + i`` (the trainer's evaluation seeds)."""
    from rlplat.build import single_env
    from rlplat.envs.vector import VectorEnv
    from rlplat.trainer import EVAL_SEED_OFFSET, evaluate_policy

    parts = built.parts
    make_env = single_env(built.config["env"], parts.transforms)
    found: list[Episode] = []
    for start in range(0, episodes, BATCH):
        env = VectorEnv(make_env, min(BATCH, episodes - start), list(parts.transforms), update_transforms=False)
        try:
            seed = parts.seed + EVAL_SEED_OFFSET + start
            found += evaluate_policy(parts.policy, env, parts.device, seed, deterministic)
        finally:
            env.close()
    return found


def summarize(episodes: list[Episode]) -> dict[str, float]:
    """``eval/return_{mean,std,min,max}``, ``eval/length_{mean,std,min,max}`` (env steps) and
    ``eval/episodes``; std is the population std, as the trainer logs it."""
    import numpy as np

    metrics: dict[str, float] = {}
    for name, values in (("return", [e.return_ for e in episodes]), ("length", [e.length for e in episodes])):
        array = np.asarray(values, dtype=np.float64)
        for stat, value in (("mean", array.mean()), ("std", array.std()), ("min", array.min()), ("max", array.max())):
            metrics[f"eval/{name}_{stat}"] = float(value)
    metrics["eval/episodes"] = float(len(episodes))
    return metrics


def show(metrics: Mapping[str, float], title: str) -> None:
    """Print the statistics as a table: a row for return, one for length."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table("", "mean", "std", "min", "max", box=box.SIMPLE)
    for name in ("return", "length"):
        table.add_row(name, *(f"{metrics[f'eval/{name}_{stat}']:.2f}" for stat in ("mean", "std", "min", "max")))
    console = Console(markup=False) if sys.stdout.isatty() else Console(width=10_000, markup=False)
    console.print(title)
    console.print(table)


def open_tracker(located: Located, config: Mapping[str, Any], uri: str) -> tuple[Tracker, str]:
    """The tracker of the evaluation's run and the run's name: in the source run's store and
    experiment when the run is known; else in ``uri`` and the run's configured experiment
    (with ``rlplat-train``'s artifact folder for the default store).

    Raises:
        ConfigError: when no tracking server answers at the store's URI.
    """
    from rlplat.tracking.store import Tracker

    say = lambda message: print(f"{PROG}: {message}", file=sys.stderr)
    if located.run_id is not None and located.tracking_uri is not None:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=located.tracking_uri)
        source = client.get_run(located.run_id)
        experiment = client.get_experiment(source.info.experiment_id).name
        name = source.info.run_name or located.run_id
        return Tracker(located.tracking_uri, experiment, None, say=say), f"eval-{name}"
    experiment = str(config.get("tracking", {}).get("experiment") or "rlplat")
    artifacts = str(Path.cwd() / "outputs" / "mlartifacts") if uri == default_tracking_uri() else None
    return Tracker(uri, experiment, artifacts, say=say), f"eval-{located.checkpoint.stem}"


def record(
    tracker: Tracker, name: str, located: Located, built: Build, values: Mapping[str, Any], metrics: Mapping[str, float]
) -> str:
    """Log the evaluation as a new MLflow run ``name`` (params, metrics at step = the
    checkpoint's frames, tag ``rlplat.source_run``, no parent); returns its id."""
    from mlflow.utils.mlflow_tags import MLFLOW_SOURCE_NAME

    from rlplat import __version__

    env = built.config["env"]
    params = {
        "episodes": str(values["episodes"]),
        "deterministic": str(values["deterministic"]).lower(),
        "checkpoint": str(located.checkpoint.resolve()),
        "env.id": str(env.get("id", env.get("name"))),
        "seed": str(built.parts.seed),
        "device": str(built.parts.device),
    }
    tags = {"command": shlex.join([PROG, *sys.argv[1:]]), MLFLOW_SOURCE_NAME: PROG, "rlplat.version": __version__}
    if located.run_id is not None:
        tags[SOURCE_RUN_TAG] = located.run_id
    run_id = tracker.start(name, params, tags)
    status = "FAILED"
    try:
        tracker.log_metrics(metrics, step=int(located.state.get("frames", 0)))
        status = "FINISHED"
    finally:
        tracker.end(status)
    return run_id


@collection_paused()  # a short command: no collections while torch and MLflow import
def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-eval``; returns 0 (bad input exits with status 2)."""
    skip_final_collection()
    parser = argument_parser(PROG, "Evaluate a trained agent; record the result as a new MLflow run.", KEYS)
    with reported(PROG, "nothing recorded"):
        run, values, env = parse_command(parser, argv, KEYS)
        uri = values["tracking.uri"] or default_tracking_uri()
        located, gone = with_source_run(locate_run(run, uri))
        if gone:
            print(f"{PROG}: {gone}: the evaluation is recorded as a run of its own in {uri}", file=sys.stderr)
        built = restore(located, env, values["seed"], values["device"])
        try:
            tracker, name = open_tracker(located, built.config, uri)  # a store that does not answer: bad input
            episodes = run_episodes(built, values["episodes"], values["deterministic"])
        finally:
            built.parts.close()
    metrics = summarize(episodes)
    env_id = built.config["env"].get("id", built.config["env"].get("name"))
    acting = "deterministic" if values["deterministic"] else "sampled"
    frames = int(located.state.get("frames", 0))
    show(metrics, f"{len(episodes)} episodes of {env_id}, {acting} actions, {located.checkpoint} ({frames:,} frames)")
    run_id = record(tracker, name, located, built, values, metrics)
    source = f" (source run {located.run_id})" if located.run_id else ""
    print(f"Recorded as MLflow run {run_id}{source}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
