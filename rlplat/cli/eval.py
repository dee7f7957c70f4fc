"""``rlplat-eval RUN [key=value ...]``: run a trained agent's episodes as the trainer's
evaluation does (:mod:`rlplat.agent`), print the statistics of their returns and lengths, and
record them as a new MLflow run (tag ``rlplat.source_run``) in the source run's store, or in
``tracking.uri`` when the run is unknown. See docs/guides/checkpoints.md.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping

from rlplat.cli.args import Key, default_tracking_uri, integer, reported, run_command
from rlplat.command_line import collection_paused, skip_final_collection

PROG = "rlplat-eval"
COMMAND = run_command(
    PROG,
    "Evaluate a trained agent; record the result as a new MLflow run.",
    {"episodes": Key(integer(1), 100, "episodes to run (one per env, at most 32 envs at once)")},
)


def show(metrics: Mapping[str, float], title: str) -> None:
    """Print the statistics as a table: a row for return, one for length."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table("", "mean", "std", "min", "max", box=box.SIMPLE)
    for name in ("return", "length"):
        table.add_row(name, *(f"{metrics[f'eval/{name}_{stat}']:.2f}" for stat in ("mean", "std", "min", "max")))
    Console(width=None if sys.stdout.isatty() else 10_000, markup=False).print(title, table, sep="\n")


@collection_paused()  # a short command: no collections while torch and MLflow import
def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-eval``; returns 0 (bad input exits with status 2)."""
    skip_final_collection()
    say = lambda line: print(f"{PROG}: {line}", file=sys.stderr)
    with reported(PROG, "nothing recorded"):
        [run], values, env = COMMAND.parse(argv)
        from rlplat.tracking.locate import locate_run, with_source_run

        uri = values["tracking.uri"] or default_tracking_uri()
        located, gone = with_source_run(locate_run(run, uri))
        if gone:
            say(f"{gone}: the evaluation is recorded as a run of its own in {uri}")
        from rlplat.agent import evaluation_tracker, record_evaluation, restore, run_episodes, summarize

        built = restore(located, env, values["seed"], values["device"])  # the build's imports, once the run is found
        try:  # a store that does not answer is bad input
            tracker, name = evaluation_tracker(located, built, uri, default_tracking_uri(), say)
            episodes = run_episodes(built, values["episodes"], values["deterministic"])
        finally:
            built.parts.close()
    acting = "deterministic" if values["deterministic"] else "sampled"
    frames, metrics = int(located.state.get("frames", 0)), summarize(episodes)
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
