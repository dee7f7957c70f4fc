"""rlplat.inductor_isa: inductor's check of the CPU's vector instruction sets runs in the
first process on a machine; a later one with the same CPU, compiler and torch skips it and
ends up with the same instruction set; a TORCHINDUCTOR_VEC_ISA_OK the user set is left
alone. Each case runs in a fresh interpreter over one inductor cache directory (the check's
result and inductor's config are process-wide)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() != "x86_64" or shutil.which("g++") is None,
    reason="the check starts processes on x86-64 Linux only, and needs inductor's C++ compiler",
)

PROBE = """
import json
from torch._inductor import config, cpu_vec_isa
from rlplat.inductor_isa import marker_path, skip_repeated_check

skipped = skip_repeated_check()
checks_run = cpu_vec_isa.valid_vec_isa_list.cache_info().misses  # the check, before anything else asks
print(json.dumps({
    "skipped": skipped,
    "checks_run": checks_run,
    "vec_isa_ok": config.cpp.vec_isa_ok,
    "marker": str(marker_path()),
    "picked": str(cpu_vec_isa.pick_vec_isa()),
    "valid": [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()],
}))
"""


def _probe(cache: Path, **env: str) -> dict:
    full_env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_VEC_ISA_OK"}
    full_env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), **env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=full_env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_first_process_checks_and_a_later_one_skips_the_check_with_the_same_result(tmp_path):
    first = _probe(tmp_path)
    assert first["skipped"] and first["checks_run"] == 1 and first["vec_isa_ok"] is True
    marker = Path(first["marker"])
    assert marker.parent == tmp_path / "rlplat-vec-isa" and marker.read_text() == " ".join(first["valid"]) + "\n"

    later = _probe(tmp_path)
    assert later["skipped"] and later["checks_run"] == 0 and later["vec_isa_ok"] is True
    assert later["marker"] == first["marker"]
    assert later["picked"] == first["picked"] and later["valid"] == first["valid"]


def test_a_users_setting_is_left_alone_and_leaves_no_marker(tmp_path):
    result = _probe(tmp_path, TORCHINDUCTOR_VEC_ISA_OK="0")
    assert not result["skipped"] and result["vec_isa_ok"] is False
    assert not (tmp_path / "rlplat-vec-isa").exists()


def test_a_marker_that_cannot_be_written_leaves_the_run_as_checked(tmp_path):
    (tmp_path / "rlplat-vec-isa").write_text("a file where the markers' folder goes\n")
    result = _probe(tmp_path)
    assert result["skipped"] and result["checks_run"] == 1 and result["vec_isa_ok"] is True
    assert (tmp_path / "rlplat-vec-isa").is_file()  # nothing written; the next process checks again
