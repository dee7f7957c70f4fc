"""A non-editable install ships conf/ and finds it: Hydra resolves pkg://rlplat.conf."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_the_config_groups_and_runs_from_them(tmp_path):
    source = tmp_path / "source"  # build from a copy: setuptools leaves build/ and *.egg-info behind
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "outputs", "build", "*.egg-info", "__pycache__", ".*_cache", "examples"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    [wheel] = tmp_path.glob("rlplat-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (
        "rlplat/conf/config.yaml",
        "rlplat/conf/algo/ppo.yaml",
        "rlplat/conf/env/pendulum.yaml",
        "rlplat/conf/tuned/ppo_pendulum.yaml",
        "hydra_plugins/rlplat_searchpath/__init__.py",
    ):
        assert path in names, path

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import rlplat, sys; print(rlplat.__file__); sys.argv[1:] = ['env=cartpole', '--cfg', 'job'];"
            " from rlplat.cli.launch import main; main()",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith(str(site))
    assert "id: CartPole-v1" in result.stdout and "gamma: 0.98" in result.stdout


def test_every_package_is_in_the_wheel() -> None:
    toml = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    setuptools = toml.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("rlplat", "hydra_plugins")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk - listed == set(), "packages missing from [tool.setuptools] packages in pyproject.toml"
    mapped = setuptools["package-dir"]
    assert (ROOT / mapped["rlplat.conf"] / "config.yaml").is_file()
    assert listed - on_disk == set(mapped), "listed packages that are neither on disk nor mapped"
