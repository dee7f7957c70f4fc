"""The benchmark figures of the README and of the site's benchmark pages are the ones the
benchmarks wrote: the speed page's tables are rendered from benchmarks/peers.json (make
bench-peers) and its GPU rows from benchmarks/peers_cuda.json (make bench-peers-cuda), the
README's speed headline from the same file, the results table (README and results page) is
benchmarks/results.md (make bench-learning), and the results page's curves are the
benchmark's plot."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SPEED = ROOT / "docs" / "benchmarks" / "speed.md"
RESULTS = ROOT / "docs" / "benchmarks" / "results.md"


def _section(page: Path, start: str, end: str) -> str:
    text = page.read_text()
    assert start in text and end in text, f"{page} lacks the markers {start!r} ... {end!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def _peers():
    spec = importlib.util.spec_from_file_location("peers_benchmark", ROOT / "benchmarks" / "peers.py")
    assert spec is not None and spec.loader is not None
    peers = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = peers  # its dataclasses look their module up there
    spec.loader.exec_module(peers)
    return peers


def test_the_speed_page_is_rendered_from_the_peers_benchmark_file():
    peers = _peers()
    results = json.loads((ROOT / "benchmarks" / "peers.json").read_text())
    assert _section(SPEED, peers.SECTION_START, peers.SECTION_END) == "\n" + peers.render(results)


def test_the_readmes_speed_headline_is_rendered_from_the_same_file():
    peers = _peers()
    results = json.loads((ROOT / "benchmarks" / "peers.json").read_text())
    headline = _section(README, peers.HEADLINE_START, peers.HEADLINE_END)
    assert headline == "\n" + peers.headline(results)
    assert f"| {peers._interval(results['summary']['ppo']['ratios']['sb3'])} |" in headline


def test_the_results_table_is_the_learning_benchmarks_file_on_both_pages():
    table = (ROOT / "benchmarks" / "results.md").read_text()
    for page in (README, RESULTS):
        assert _section(page, "<!-- results: benchmarks/results.md -->", "<!-- end results -->") == "\n" + table


def test_the_results_pages_curves_are_the_benchmarks_plot():
    plot = ROOT / "benchmarks" / "report" / "cartpole" / "learning_curves_frames.png"
    assert (ROOT / "docs" / "images" / "learning_curves_cartpole.png").read_bytes() == plot.read_bytes()


def test_the_gpu_section_is_rendered_from_the_gpu_benchmark_file():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import peers_cuda
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    results = json.loads((ROOT / "benchmarks" / "peers_cuda.json").read_text())
    assert _section(SPEED, peers_cuda.SECTION_START, peers_cuda.SECTION_END) == "\n" + peers_cuda.render(results)
    assert set(results["measured"]) == set(peers_cuda.ROWS) and results["machine"]["gpu"]
