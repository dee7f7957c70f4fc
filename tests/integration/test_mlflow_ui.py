"""The MLflow UI shows a sweep's report: a real sweep, a real `mlflow server`, headless Chromium.

Skipped, with the reason, where Chromium (Debian's package, /usr/bin/chromium) or the
playwright package is missing; `.ci/run` installs Chromium so that CI runs it. With
RLPLAT_SCREENSHOT=<file.png> the parent run's page is saved there (`make docs-images`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import matplotlib.image
import pytest
from conftest import TINY, cli
from mlflow import MlflowClient

from rlplat.tags import PARENT_TAG

CHROMIUM = os.environ.get("RLPLAT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MACHINE_LEARNING = "workflowType=machine_learning"  # the UI's "Model training" view, not its GenAI one

playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
if not Path(CHROMIUM).is_file():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path, store: str):
    """``mlflow server`` on the test's store, on a free local port; its base URL."""
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).parent / "mlflow")
    process = subprocess.Popen(
        [mlflow, "server", "--backend-store-uri", store, "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"mlflow server did not start: {(tmp_path / 'server.log').read_text()}") from None
            time.sleep(0.3)
    yield url
    process.terminate()
    process.wait(timeout=30)
    log.close()


def test_the_parent_run_page_shows_the_report_and_its_plots(tmp_path, store, server):
    result = cli(
        "rlplat-train", "-m", "algo=ppo,a2c", "env=cartpole", "seed=0,1", f"tracking.uri={store}", *TINY, cwd=tmp_path
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("rlplat")
    [parent] = [r for r in client.search_runs([experiment.experiment_id]) if PARENT_TAG not in r.data.tags]
    run_page = f"{server}/#/experiments/{experiment.experiment_id}/runs/{parent.info.run_id}"

    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.goto(f"{run_page}?{MACHINE_LEARNING}")
        heading = page.get_by_text("rlplat report: eval/return_mean").first
        heading.wait_for(timeout=90_000)  # the description, rendered from Markdown
        assert page.get_by_text(parent.info.run_name).first.is_visible()
        page.get_by_text("Show more").first.click()
        for header in ("IQM [95% CI]", "P(A > B) [95% CI]"):  # Markdown tables, rendered as tables
            assert page.get_by_role("columnheader", name=header).first.is_visible(), header
        for cell in ("algo=ppo", "algo=a2c"):
            assert page.get_by_role("cell", name=cell).first.is_visible(), cell
        heading.scroll_into_view_if_needed()
        if os.environ.get("RLPLAT_SCREENSHOT"):
            Path(os.environ["RLPLAT_SCREENSHOT"]).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=os.environ["RLPLAT_SCREENSHOT"])

        page.goto(f"{run_page}/artifacts/report/learning_curves_frames.png?{MACHINE_LEARNING}")
        preview = page.locator("img[src^='blob:']").first  # the UI shows the fetched artifact as a blob
        preview.wait_for(timeout=60_000)
        page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=preview.element_handle())
        sweep_dir = tmp_path / parent.data.params["sweep.dir"]  # relative to where the sweep ran
        width = matplotlib.image.imread(sweep_dir / "report" / "learning_curves_frames.png").shape[1]
        assert preview.evaluate("img => img.naturalWidth") == width  # the PNG itself, decoded by the browser
        for name in ("final_scores.png", "performance_profiles.png", "report.md"):
            assert page.get_by_text(name).first.is_visible(), name
        browser.close()
