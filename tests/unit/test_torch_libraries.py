"""rlplat.torch_libraries: torch's shared libraries loaded by a background thread before
torch is imported, and torch's import then runs on them (no second copy of a library).
The loading case runs in a fresh interpreter (a library once loaded stays loaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlplat import torch_libraries

PROBE = """
import json, sys
from rlplat import torch_libraries

def loaded():
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libtorch" in line})

started = torch_libraries.start_loading()
again = torch_libraries.start_loading()
torch_libraries.wait()
before = loaded()
torch_imported_before = "torch" in sys.modules
import torch
print(json.dumps({
    "started": started, "again": again, "before": before, "after": loaded(),
    "torch_imported_before": torch_imported_before, "sum": float(torch.ones(3).sum()),
    "expected": [str(path) for path, _ in torch_libraries.library_paths()],
}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="loads torch's Linux shared libraries")
def test_the_libraries_load_before_torch_is_imported_and_torch_imports_on_them():
    out = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout)
    assert out["started"] and not out["again"]  # one thread per process
    assert not out["torch_imported_before"]  # loading the libraries imports nothing
    assert {os.path.basename(path) for path in out["expected"]} == {name for name, _ in torch_libraries.LIBRARIES}
    for path in out["expected"]:
        assert os.path.realpath(path) in out["before"]
    lib = os.path.dirname(os.path.realpath(out["expected"][0]))
    assert os.path.join(lib, "libtorch_cpu.so") in out["before"]  # libtorch_python's dependencies came with it
    assert out["after"] == out["before"]  # torch's import loaded none of them again
    assert out["sum"] == 3.0


def test_nothing_starts_once_torch_is_imported():
    import torch  # noqa: F401

    assert not torch_libraries.start_loading()
    torch_libraries.wait()  # nothing to wait for


def test_a_torch_without_the_libraries_starts_nothing(monkeypatch):
    monkeypatch.setattr(torch_libraries, "LIBRARIES", (("libtorch_not_there.so", os.RTLD_LOCAL),))
    assert torch_libraries.library_paths() == []
