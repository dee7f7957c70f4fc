"""The wheel holds every package of the source tree (an editable install would hide a gap)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_in_the_wheel() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
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
