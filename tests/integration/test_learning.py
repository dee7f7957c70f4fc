"""Slow learning checks: the tuned presets reach their targets (run by `make test-all`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


PAIRS = [
    "ppo:cartpole",
    "ppo:pendulum",
    "reinforce:cartpole",
    "a2c:cartpole",
    "ppo_kl:pendulum",
    "dqn:cartpole",
    "ddpg:pendulum",
    "td3:pendulum",
    "sac:pendulum",
]


@pytest.mark.slow
@pytest.mark.parametrize("pair", PAIRS)
def test_preset_learns_on_4_of_5_seeds(pair, tmp_path):
    """The pair passes as the results table counts it: IQM over 5 seeds above the threshold,
    and at least 4 of the 5 seeds above it too."""
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
        timeout=3600,
    )
    results = json.loads(out.read_text())
    [summary] = results["pairs"]
    assert summary["seeds"] == 5
    assert summary["passed"], summary
