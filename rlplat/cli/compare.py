"""rlplat-compare: compare groups of runs across seeds, with confidence intervals.

    rlplat-compare <parent run id | experiment | run id | filter> ... [group_by=algo,env]
                   [metric=eval/return_mean] [threshold=...] [confidence=0.95] [out=DIR]
                   [tracking.uri=...]

Reads the runs from the MLflow store (by default ``outputs/mlflow.db`` here), groups them
(by default by every override but the seed), and prints per group the number of seeds and
the final score's mean, median and interquartile mean (IQM) with stratified bootstrap
confidence intervals, frames and wall time (to the threshold when one is given), then the
probability of improvement between groups (Agarwal et al. 2021). Writes report.md,
report.csv and plots (learning curves over frames and over wall time, final-score
intervals, performance profiles; PNG and SVG) into ``out``; a sweep's parent run gets them
as artifacts under ``report/`` and the tables as its description. Bad input is one
``rlplat-compare: error:`` line and exit status 2.
"""

from __future__ import annotations

import re
import sys

from rlplat.cli.args import Command, Key, default_tracking_uri, number, output_path, reported, text
from rlplat.command_line import collection_paused, skip_final_collection
from rlplat.registry import ConfigError

PROG = "rlplat-compare"
KEY_VALUE = re.compile(r"([A-Za-z_][\w.]*)=([^\s'\"=<>]*)")
"""A ``key=value`` setting; a filter compares with quotes (``tags.algo = 'ppo'``), so never matches."""


def _keys_list(key: str, value: str) -> list[str]:
    keys = [k.strip() for k in value.split(",") if k.strip()]
    if not keys:
        raise ConfigError(f"{key}={value!r}: give keys separated by commas, e.g. {key}=algo,env")
    return keys


KEYS = {  # report_runs's arguments
    "group_by": Key(_keys_list, None, "keys that make a group (tags, params, overrides); default: all but seed"),
    "metric": Key(text, "eval/return_mean", "metric compared: each run's last value is its score"),
    "threshold": Key(number(), None, "score counted as reached: frames and seconds to it are reported"),
    "confidence": Key(
        number(lambda p: 0 < p < 1, "between 0 and 1, e.g. 0.95"), 0.95, "level of the confidence intervals"
    ),
    "out": Key(
        output_path(), None, "folder for report.md, report.csv and plots; default: a sweep's dir, else outputs/compare/"
    ),
    "tracking.uri": Key(text, None, "MLflow store to read; default: outputs/mlflow.db here"),
}
COMMAND = Command(
    PROG,
    f"{PROG} TARGET [TARGET ...] [key=value ...]",
    __doc__.split("\n\n", 2)[2] if __doc__ else "",
    KEYS,
    "give what to compare: a sweep's parent run id, run ids, experiments or a filter (--help)",
    targets="targets: a sweep's parent run id (its child runs), a run id, an experiment name, or a search\n"
    "filter in MLflow's syntax, e.g. \"tags.algo = 'ppo'\"",
    many=True,
    is_pair=lambda word: KEY_VALUE.fullmatch(word) is not None,
)


@collection_paused()  # a short command: no collections while torch and MLflow import
def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-compare``; returns 0 (bad input exits with status 2)."""
    skip_final_collection()
    with reported(PROG, "no report written"):
        targets, values, _ = COMMAND.parse(argv)
        from rlplat.report.report import report_runs

        written = report_runs(values.pop("tracking.uri") or default_tracking_uri(), targets, **values)
    folder = written.files[0].parent
    print(f"Report written to {folder}/ (report.md, report.csv, plots).")
    if written.logged_on:
        print(f"Logged on the sweep's parent run {written.logged_on} (artifacts report/, description).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
