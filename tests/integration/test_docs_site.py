"""The documentation site, built as `make docs` builds it (Sphinx, ``-W --keep-going -n``),
from a copy of docs/ into which three faults are written: a link to a page that does not
exist, a reference to a function that does not exist, and an API directive for a module
that does not exist. The build must fail naming exactly those three, so that everything
else is shown to build without a warning; and with a test plugin installed, the generated
reference must hold a page for the plugin's entry with its YAML keys, defaults and
comments, written by nobody. The built pages are then opened in headless Chromium.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import BIN, install_distribution

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

PLUGIN_NETWORK = '''
from torch import nn


class GatedMLP(nn.Module):
    """A one-layer torso whose output is gated by a sigmoid of itself.

    Args:
        observation_space: Box observations, flattened.
        out_features: Width of the features.
        width: Hidden units.
        gate_bias: Initial bias of the gate.
    """

    def __init__(self, observation_space, out_features, width=32, gate_bias=0.0):
        super().__init__()
        self.out_features = out_features
        self.layer = nn.Linear(int(observation_space.shape[0]), out_features)

    def forward(self, observation):
        hidden = self.layer(observation)
        return hidden * hidden.sigmoid()
'''
PLUGIN_YAML = """# Gated one-layer torso, from the docs test plugin.
name: gated_mlp  # network registry entry
width: 48  # hidden units of the gate
gate_bias: 0.5  # initial bias of the gate, in logits
"""
FAULTS = {
    "guides/training.md": "\nSee [a page that is not there](no-such-page.md).\n",
    "concepts/keys.md": "\nAnd {py:func}`rlplat.functional.no_such_function`.\n\n"
    "```{eval-rst}\n.. automodule:: rlplat.no_such_module\n   :members:\n```\n",
}


def install_plugin(site: Path) -> None:
    """A distribution declaring the network ``gated_mlp`` and a config package with its YAML."""
    install_distribution(
        site,
        "rlplat-docs-test-plugin",
        {"rlplat.networks": {"gated_mlp": "docs_test_plugin:GatedMLP"}, "rlplat.conf": {"docs": "docs_test_conf"}},
        {"docs_test_plugin.py": PLUGIN_NETWORK},
    )
    (site / "docs_test_conf" / "network").mkdir(parents=True)
    (site / "docs_test_conf" / "__init__.py").write_text("")
    (site / "docs_test_conf" / "network" / "gated_mlp.yaml").write_text(PLUGIN_YAML)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The site built from a copy of docs/ with the faults, with the test plugin installed."""
    root = tmp_path_factory.mktemp("docs")
    source = root / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build"))  # the reference is rewritten
    for page, fault in FAULTS.items():
        with open(source / page, "a") as text:
            text.write(fault)
    install_plugin(root / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "site"), os.environ.get("PYTHONPATH", "")])}
    out = root / "html"
    command = [str(BIN / "sphinx-build"), "-W", "--keep-going", "-n", "-q", "-b", "html", str(source), str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return out, done


def test_the_strict_build_fails_on_a_broken_link_and_missing_objects_and_on_nothing_else(built):
    _, done = built
    assert done.returncode != 0
    warnings = [line for line in done.stderr.splitlines() if re.search(r"WARNING|ERROR", line)]
    assert len(warnings) == 3, "\n".join(warnings)
    said = "\n".join(warnings)
    assert "no-such-page" in said
    assert "rlplat.functional.no_such_function" in said
    assert "failed to import 'no_such_module' from module 'rlplat'" in said


def test_a_plugins_registry_entry_gets_a_reference_page_with_its_keys(built):
    out, _ = built
    assert not list(DOCS.rglob("*gated_mlp*"))  # nobody wrote it: the build generated it
    page = (out / "reference" / "registry" / "network" / "gated_mlp.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    assert "A one-layer torso whose output is gated by a sigmoid of itself." in text
    assert "rlplat-docs-test-plugin" in text and "network=gated_mlp" in text
    for key, default, comment in (("width", "48", "hidden units of the gate"),
                                  ("gate_bias", "0.5", "initial bias of the gate, in logits")):  # fmt: skip
        row = re.search(rf"<tr[^>]*>\s*<td><p><code[^>]*><span class=\"pre\">{key}</span>.*?</tr>", page, re.S)
        assert row is not None, key
        cells = re.sub(r"<[^>]+>", " ", row.group(0))
        assert default in cells and comment in cells, cells
    listing = (out / "reference" / "registry" / "network.html").read_text()
    assert "gated_mlp.html" in listing and "mlp.html" in listing
    presets = re.sub(r"<[^>]+>", "", (out / "reference" / "presets" / "network.html").read_text())
    assert "Gated one-layer torso, from the docs test plugin." in presets


def test_the_reference_holds_every_console_scripts_help_and_the_api(built):
    out, _ = built
    cli = re.sub(r"<[^>]+>", "", (out / "reference" / "cli.html").read_text())
    for script in ("rlplat-list", "rlplat-eval", "rlplat-record", "rlplat-compare", "rlplat-sync"):
        assert f"usage: {script}" in cli, script
    assert "rlplat-train resume=<run id | run dir | sweep dir>" in cli.replace("&lt;", "<").replace("&gt;", ">")
    api = (out / "reference" / "api" / "rlplat.functional.html").read_text()
    assert 'id="rlplat.functional.advantages.generalized_advantage_estimate"' in api


CHROMIUM = os.environ.get("RLPLAT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def test_pages_render_in_chromium_with_navigation_and_images(built):
    playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    out, _ = built
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    failed: list[str] = []
    try:
        with playwright.sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            for path, heading, images in (
                ("index.html", "rlplat", 0),
                ("guides/comparing.html", "Comparing runs", 1),
                ("reference/registry/network/mlp.html", "mlp (network)", 0),
                ("benchmarks/results.html", "Results", 1),
            ):
                page.goto(f"{base}/{path}", wait_until="load")
                assert page.locator("h1").first.inner_text().startswith(heading), path
                navigation = page.locator(".sidebar-tree")
                assert navigation.is_visible(), path
                for caption in ("Guides", "Concepts", "Reference", "Benchmarks"):
                    assert navigation.get_by_text(caption, exact=True).first.is_visible(), (path, caption)
                assert navigation.get_by_role("link", name="Sweeps and Optuna").is_visible(), path
                shown = page.eval_on_selector_all(
                    "article img", "imgs => imgs.map(i => i.complete && i.naturalWidth > 0)"
                )
                assert shown == [True] * images, (path, shown)
            browser.close()
    finally:
        server.shutdown()
    assert not failed, failed
