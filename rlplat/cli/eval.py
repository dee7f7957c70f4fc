"""rlplat-eval: evaluate a trained agent and record the result as a new MLflow run.

    rlplat-eval <run id | run dir | checkpoint> [episodes=100] [deterministic=true] [seed=...]
                [env.id=...] [device=...] [tracking.uri=...]

Rebuilds the agent from the checkpoint and runs its episodes as the trainer's evaluation does
(:mod:`rlplat.agent`), prints mean, std, min and max of the returns and lengths, and records
them as a new MLflow run (tag ``rlplat.source_run``) in the source run's store and
experiment, or in ``tracking.uri`` when the run is unknown. Bad input is one ``rlplat-eval:
error:`` line and exit status 2, with nothing recorded.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rlplat.cli.args import (
    COMMON_KEYS,
    Key,
    argument_parser,
    default_tracking_uri,
    integer,
    locate_run,
    parse_command,
    reported,
)
from rlplat.command_line import collection_paused, skip_final_collection
from rlplat.tracking.locate import with_source_run

if TYPE_CHECKING:
    pass

PROG = "rlplat-eval"
KEYS = {"episodes": Key(integer(1), 100, "episodes to run (one per env, at most 32 envs at once)"), **COMMON_KEYS}


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
        from rlplat.agent import evaluation_tracker, record_evaluation, restore, run_episodes, summarize

        built = restore(located, env, values["seed"], values["device"])  # the build's imports, once the run is found
        try:  # a store that does not answer is bad input
            say = lambda message: print(f"{PROG}: {message}", file=sys.stderr)  # noqa: E731
            tracker, name = evaluation_tracker(located, built, uri, default_tracking_uri(), say)
            episodes = run_episodes(built, values["episodes"], values["deterministic"])
        finally:
            built.parts.close()
    metrics = summarize(episodes)
    acting = "deterministic" if values["deterministic"] else "sampled"
    frames = int(located.state.get("frames", 0))
    show(metrics, f"{len(episodes)} episodes of {built.env.title}, {acting} actions, {located.checkpoint} "
         f"({frames:,} frames)")  # fmt: skip
    command = shlex.join([PROG, *sys.argv[1:]])
    run_id = record_evaluation(
        tracker, name, located, built, metrics, values["episodes"], values["deterministic"], command
    )
    source = f" (source run {located.run_id})" if located.run_id else ""
    print(f"Recorded as MLflow run {run_id}{source}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
