"""Bad-input benchmark: seconds from the command to its one-line error, per bad input.

    python benchmarks/bad_input.py              # every input of the bad-input table, 3 runs each
    python benchmarks/bad_input.py --repeats 5

The inputs are the rows of the bad-input table of docs/guides/configuration.md (the ones
tests/integration/test_bad_input.py runs), including the few the build checks after torch is
imported (marked "after torch"). Each is run --repeats times as a subprocess,
``rlplat-train <input>``, in a temp directory where ``notes.txt`` is a file, recording to a
temp sqlite store (never created, since every input fails); each must exit with status 2.
Prints the median wall time of each input and the median over all inputs, and exits 1
when that overall median exceeds the 2-second budget.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
TABLE_PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "configuration.md"
TABLE_START, TABLE_END = "<!-- bad-input-table:start -->", "<!-- bad-input-table:end -->"
BUDGET_S = 2.0


def bad_inputs() -> list[tuple[str, str]]:
    """The bad-input table of docs/guides/configuration.md: (command without ``rlplat-train``, where it is checked)."""
    text = TABLE_PAGE.read_text()
    table = text[text.index(TABLE_START) + len(TABLE_START) : text.index(TABLE_END)]
    rows = []
    for line in table.splitlines():
        if line.startswith("| ``rlplat-train "):
            command, checked, _ = (cell.strip() for cell in line.strip()[1:-1].split(" | "))
            rows.append((command[2:-2].strip().removeprefix("rlplat-train "), checked))
    return rows


def seconds_to_report(command: str, cwd: Path) -> float:
    """Run ``rlplat-train <command>`` in ``cwd``; the wall time until it exits with status 2."""
    args = shlex.split(command)
    if not any(a.startswith("tracking.uri=") for a in args):
        args.append(f"tracking.uri=sqlite:///{cwd / 'mlflow.db'}")
    start = time.perf_counter()
    result = subprocess.run([str(BIN / "rlplat-train"), *args], cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 2:
        sys.exit(f"rlplat-train {command}: exit status {result.returncode}, not 2:\n{result.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per input (default 3)")
    options = parser.parse_args()
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "notes.txt").write_text("a file, not a directory\n")
        for command, checked in bad_inputs():
            medians[command] = statistics.median(seconds_to_report(command, cwd) for _ in range(options.repeats))
            print(f"{medians[command]:6.2f} s  rlplat-train {command}  ({checked})", flush=True)
    overall = statistics.median(medians.values())
    verdict = "within" if overall <= BUDGET_S else "OVER"
    print(f"{overall:6.2f} s  median over {len(medians)} bad inputs ({verdict} the {BUDGET_S:g} s budget)")
    return 0 if overall <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
