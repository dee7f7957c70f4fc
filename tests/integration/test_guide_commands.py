"""Every ``rlplat-*`` command shown in a code block of the docs (and the README) runs in the
test suite or is marked as an illustration, with its reason.

The line before each ```` ```bash ```` or ```` ```console ```` block that shows a command
says which:

* ``<!-- run -->``: run here, block by block in the page's order, in one temp directory per
  page (a ``rlplat-train`` command gets a small frame budget, ``rlplat-eval`` and
  ``rlplat-record`` one or two episodes; ``<!-- run: KEY=VALUE ... -->``
  adds overrides of its own); each command must exit 0. In a ``console`` block the lines
  after ``$ command`` are what the command prints, compared line by line.
* ``<!-- test: NAME -->``: run by a test of its own that names the page and ``NAME`` (the
  team guide's blocks need a PostgreSQL server).
* ``<!-- tested: tests/...py ... -->``: the same commands run in those test files; every
  argument of each command must appear there.
* ``<!-- illustration: REASON -->``: shown, not run (a GPU, a cluster, a run id that differs
  at every run), with the reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BIN

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SHELLS = ("bash", "console", "sh", "shell")
MARKER = re.compile(r"<!-- (run|test|tested|illustration)(?::\s*(.*?))?\s*-->")
COMMAND = re.compile(r"^(?:\w+=\S*\s+)*(rlplat-[a-z]+)(?=\s|$)")
BUDGET = {
    "rlplat-train": {"trainer.total_frames": "512", "trainer.eval_episodes": "2"},
    "rlplat-eval": {"episodes": "2"},
    "rlplat-record": {"episodes": "1"},
}
"""The budget of a command run here, by tool (a value the page gives is replaced)."""
NOT_TRAINING = ("resume=", "--help", "--cfg")
"""A ``rlplat-train`` command with one of these trains nothing of its own: no budget."""


@dataclass
class Block:
    """A code block of a page that shows at least one ``rlplat-*`` command."""

    page: Path
    line: int
    language: str
    marker: str | None
    argument: str
    lines: list[str]  # shell lines, continuations joined; a console block's as written

    @property
    def commands(self) -> list[str]:
        """The ``rlplat-*`` commands, without a trailing comment."""
        found = []
        for line in self.lines:
            if self.language == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if COMMAND.match(line):
                found.append(strip_comment(line))
        return found

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` inside quotes stays)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split, lexer.commenters = True, "#"
    return shlex.join(lexer)


def pages() -> list[Path]:
    generated = DOCS / "reference"
    found = [p for p in DOCS.rglob("*.md") if "_build" not in p.parts and not p.is_relative_to(generated)]
    return sorted([ROOT / "README.md", *found])


def blocks(page: Path) -> list[Block]:
    """The blocks of ``page`` that show an ``rlplat-*`` command."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(\S*)", lines[i])
        if fence is None:
            i += 1
            continue
        start, language = i, fence.group(2)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        body = "\n".join(lines[start + 1 : end]).replace("\\\n", " ").splitlines()
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.fullmatch(before.strip())
        block = Block(page, start + 1, language, marker and marker.group(1), (marker and marker.group(2)) or "", body)
        if language in SHELLS and block.commands:
            found.append(block)
        i = end + 1
    return found


ALL = [block for page in pages() for block in blocks(page)]


def test_every_command_shown_runs_in_the_tests_or_is_an_illustration_with_its_reason():
    assert ALL, "no command found in the docs"
    tests = {p: p.read_text() for p in (ROOT / "tests").rglob("test_*.py")}
    counts: dict[str, int] = {}
    for block in ALL:
        counts[block.marker or "unmarked"] = counts.get(block.marker or "unmarked", 0) + len(block.commands)
        assert block.marker is not None, f"{block.where}: a block with rlplat commands needs a marker (see {__file__})"
        if block.marker == "illustration":
            assert block.argument, f"{block.where}: an illustration says why it is not run"
        elif block.marker == "test":
            owners = [t for t, text in tests.items() if block.page.name in text and f'"{block.argument}"' in text]
            assert owners, f"{block.where}: no test names {block.page.name} and the block {block.argument!r}"
        elif block.marker == "tested":
            named = [ROOT / path for path in block.argument.split()]
            assert named and all(p in tests for p in named), f"{block.where}: {block.argument!r} names no test file"
            text = "\n".join(tests[p] for p in named)
            for command in block.commands:
                missing = [a for a in shlex.split(command)[1:] if a != "-m" and a not in text]
                assert not missing, f"{block.where}: {missing} of {command!r} appear in none of {block.argument}"
    total = sum(counts.values())
    print(f"rlplat commands in the docs: {total}; " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


def with_budget(command: str, extra: str) -> str:
    """``command`` with the test's budget for its tool and the block's own overrides."""
    words = shlex.split(command)
    if words[0] not in BUDGET or any(w.startswith(NOT_TRAINING) for w in words):
        return command
    overrides = {**BUDGET[words[0]], **dict(o.split("=", 1) for o in shlex.split(extra))}
    words = [w for w in words if w.split("=", 1)[0] not in overrides]
    return shlex.join([*words, *(f"{k}={v}" for k, v in overrides.items())])


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", COLUMNS="200")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


RUN_PAGES = sorted({block.page for block in ALL if block.marker == "run"})


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_commands_of_a_page_run_as_shown(page: Path, tmp_path: Path):
    for block in [b for b in ALL if b.page == page and b.marker == "run"]:
        if block.language == "console":
            for command, expected in console_pairs(block.lines):
                done = run(command, tmp_path)
                said = (done.stdout + done.stderr).strip().splitlines()
                assert said == expected, f"{block.where}: {command}\n{done.stdout}{done.stderr}"
            continue
        for command in block.commands:
            done = run(with_budget(command, block.argument), tmp_path)
            assert done.returncode == 0, f"{block.where}: {command}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"


def console_pairs(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``(command, the lines it prints)`` for each ``$ command`` of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
    return pairs
