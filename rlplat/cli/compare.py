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

import argparse
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

from rlplat.cli.args import ArgumentParser, Key, default_tracking_uri, output_folder, reported, shown, text
from rlplat.command_line import collection_paused, skip_final_collection
from rlplat.registry import ConfigError, closest

PROG = "rlplat-compare"
KEY_VALUE = re.compile(r"([A-Za-z_][\w.]*)=([^\s'\"=<>]*)")
"""A ``key=value`` setting; a filter compares with quotes (``tags.algo = 'ppo'``), so never matches."""


def _keys_list(key: str, value: str) -> list[str]:
    keys = [k.strip() for k in value.split(",") if k.strip()]
    if not keys:
        raise ConfigError(f"{key}={value!r}: give keys separated by commas, e.g. {key}=algo,env")
    return keys


def _number(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{key}={value!r}: must be a number") from None
    if not math.isfinite(number):
        raise ConfigError(f"{key}={value!r}: must be a finite number")
    return number


def _level(key: str, value: str) -> float:
    level = _number(key, value)
    if not 0 < level < 1:
        raise ConfigError(f"{key}={value!r}: must be between 0 and 1, e.g. 0.95")
    return level


KEYS = {
    "group_by": Key(_keys_list, None, "keys that make a group (tags, params, overrides); default: all but seed"),
    "metric": Key(text, "eval/return_mean", "metric compared: each run's last value is its score"),
    "threshold": Key(_number, None, "score counted as reached: frames and seconds to it are reported"),
    "confidence": Key(_level, 0.95, "level of the confidence intervals"),
    "out": Key(
        output_folder, None, "folder for report.md, report.csv and plots; default: a sweep's dir, else outputs/compare/"
    ),
    "tracking.uri": Key(text, None, "MLflow store to read; default: outputs/mlflow.db here"),
}


def parse(argv: Sequence[str] | None) -> tuple[list[str], dict[str, Any]]:
    """Command line -> (targets, the values of ``KEYS``).

    Raises:
        ConfigError: for no target, an unknown ``key=value`` key or a bad value.
    """
    listed = "\n".join(f"  {name}={shown(k.default)}".ljust(28) + k.help for name, k in KEYS.items())
    parser = ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n", 2)[2] if __doc__ else None,
        usage=f"{PROG} TARGET [TARGET ...] [key=value ...]",
        epilog=f"targets: a sweep's parent run id (its child runs), a run id, an experiment name, or a search\n"
        f"filter in MLflow's syntax, e.g. \"tags.algo = 'ppo'\"\n\nkeys:\n{listed}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("words", nargs="*", metavar="TARGET or key=value")
    words = parser.parse_args(argv).words
    values = {name: key.default for name, key in KEYS.items()}
    targets = []
    for word in words:
        match = KEY_VALUE.fullmatch(word)
        if match is None:
            targets.append(word)
            continue
        name, value = match.groups()
        if name not in KEYS:
            suggestion = closest(name, list(KEYS))
            hint = f" Did you mean {suggestion!r}?" if suggestion else ""
            raise ConfigError(f"{word}: unknown key {name!r}. Valid keys: {', '.join(KEYS)}.{hint}")
        values[name] = KEYS[name].parse(name, value)
    if not targets:
        raise ConfigError("give what to compare: a sweep's parent run id, run ids, experiments or a filter (--help)")
    return targets, values


@collection_paused()  # a short command: no collections while torch and MLflow import
def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-compare``; returns 0 (bad input exits with status 2)."""
    skip_final_collection()
    with reported(PROG, "no report written"):
        targets, values = parse(argv)
        from rlplat.report.report import report_runs

        written = report_runs(
            values["tracking.uri"] or default_tracking_uri(),
            targets,
            metric=values["metric"],
            out=values["out"],
            group_by=values["group_by"],
            threshold=values["threshold"],
            confidence=values["confidence"],
        )
    folder = written.files[0].parent
    print(f"Report written to {folder}/ (report.md, report.csv, plots).")
    if written.logged_on:
        print(f"Logged on the sweep's parent run {written.logged_on} (artifacts report/, description).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
