"""The README's benchmark figures are the ones the benchmarks wrote: the speed comparison is
rendered from benchmarks/peers.json (make bench-peers) and its GPU rows from
benchmarks/peers_cuda.json (make bench-peers-cuda), the results table is
benchmarks/results.md (make bench-learning)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(start: str, end: str) -> str:
    assert start in README and end in README, f"README lacks the markers {start!r} ... {end!r}"
    return README.split(start, 1)[1].split(end, 1)[0]


def test_the_speed_section_is_rendered_from_the_peers_benchmark_file():
    spec = importlib.util.spec_from_file_location("peers_benchmark", ROOT / "benchmarks" / "peers.py")
    assert spec is not None and spec.loader is not None
    peers = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = peers  # its dataclasses look their module up there
    spec.loader.exec_module(peers)
    results = json.loads((ROOT / "benchmarks" / "peers.json").read_text())
    assert _section(peers.README_START, peers.README_END) == "\n" + peers.render(results)


def test_the_results_table_is_the_learning_benchmarks_file():
    table = (ROOT / "benchmarks" / "results.md").read_text()
    assert _section("<!-- results: benchmarks/results.md -->", "<!-- end results -->") == "\n" + table


def test_the_gpu_section_is_rendered_from_the_gpu_benchmark_file():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import peers_cuda
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    results = json.loads((ROOT / "benchmarks" / "peers_cuda.json").read_text())
    assert _section(peers_cuda.README_START, peers_cuda.README_END) == "\n" + peers_cuda.render(results)
    assert set(results["measured"]) == set(peers_cuda.ROWS) and results["machine"]["gpu"]
