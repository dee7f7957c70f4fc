"""Slow learning checks: the tuned presets reach their targets (run by `make test-all`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


PAIRS = [
    ("ppo:cartpole", 3),
    ("ppo:pendulum", 2),
    ("reinforce:cartpole", 2),
    ("a2c:cartpole", 2),
    ("ppo_kl:pendulum", 2),
    ("dqn:cartpole", 2),
    ("ddpg:pendulum", 2),
    ("td3:pendulum", 2),
    ("sac:pendulum", 2),
]


@pytest.mark.slow
@pytest.mark.parametrize("pair,needed", PAIRS)
def test_preset_learns_within_its_budget(pair, needed, tmp_path):
    out = tmp_path / "results.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "learning.py"),
            "--only",
            pair,
            "--uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--out",
            str(tmp_path / "results.md"),
            "--json",
            str(out),
        ],
        check=False,
        timeout=900,
    )
    results = json.loads(out.read_text())
    assert len(results) == 3
    assert sum(r["passed"] for r in results) >= needed, results
