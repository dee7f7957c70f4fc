"""Plugins for real: the example and the broken plugin pip-installed, used through the CLI.

Both packages in examples/ are installed once per module into a temp dir that the
subprocesses get as PYTHONPATH, so rlplat sees them exactly as installed distributions.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from conftest import TINY, cli, install_distribution
from mlflow import MlflowClient
from omegaconf import OmegaConf

from rlplat.checkpoint import load_checkpoint
from rlplat.registry import check_kwargs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLUGINS = ("rlplat-example-plugin", "rlplat-broken-plugin")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A temp site-packages holding both example plugins, installed by pip from examples/."""
    root = tmp_path_factory.mktemp("plugins")
    sources = []
    for name in PLUGINS:  # build from copies, so no build/ or egg-info lands in the repo
        shutil.copytree(
            EXAMPLES / name, root / name, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        )
        sources.append(str(root / name))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--target",
            str(root / "site"),
            *sources,
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return root / "site"


@pytest.fixture
def example(monkeypatch) -> Iterator[Path]:
    """The example plugin's package importable in this process; returns its conf/ folder."""
    monkeypatch.syspath_prepend(str(EXAMPLES / "rlplat-example-plugin"))
    yield EXAMPLES / "rlplat-example-plugin" / "rlplat_example_plugin" / "conf"
    for module in [m for m in sys.modules if m.startswith("rlplat_example_plugin")]:
        del sys.modules[module]


def yaml_kwargs(path: Path) -> dict:
    return {k: v for k, v in OmegaConf.to_container(OmegaConf.load(path)).items() if k != "name"}


def test_example_entries_build_from_their_yaml_and_keep_the_contracts(example):
    from rlplat_example_plugin.envs import make_point_mass
    from rlplat_example_plugin.networks import ResidualMLP
    from rlplat_example_plugin.transforms import ClipObservation

    kwargs = yaml_kwargs(example / "env" / "point_mass.yaml")
    check_kwargs("env", make_point_mass, kwargs)
    env = make_point_mass(**kwargs)
    assert isinstance(env, gymnasium.Env) and env.action_space == gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    before = np.linalg.norm(obs[2:] - obs[:2])
    to_goal = np.clip((obs[2:] - obs[:2]) / kwargs["step_size"], -1, 1)  # the greedy action
    obs, reward, terminated, truncated, info = env.step(to_goal)
    assert reward == -info["distance"] and 0 < info["distance"] < before
    steps = 1
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        steps += 1
    assert (steps, terminated, truncated) == (kwargs["max_episode_steps"], False, True)

    kwargs = yaml_kwargs(example / "network" / "residual_mlp.yaml")
    check_kwargs("network", ResidualMLP, kwargs, supplied=2)
    features = ResidualMLP(env.observation_space, 16, **kwargs)(torch.zeros(5, 4))
    assert features.shape == (5, 16) and features.dtype == torch.float32

    kwargs = OmegaConf.to_container(OmegaConf.load(example / "tuned" / "ppo_point_mass.yaml"))["transforms"]
    check_kwargs("transforms.clip_observation", ClipObservation, kwargs["clip_observation"], supplied=1)
    clip = ClipObservation(env.observation_space, **kwargs["clip_observation"])
    clipped = clip.transform_observation(torch.tensor([[-9.0, 0.0, 1.0, 9.0]]), update=True)
    assert torch.equal(clipped, torch.tensor([[-3.0, 0.0, 1.0, 3.0]]))


def test_example_yaml_keys_all_have_a_comment(example):
    uncommented = [
        f"{path.name}: {line}"
        for path in example.rglob("*.yaml")
        for line in path.read_text().splitlines()
        if ":" in line and not line.strip().startswith("#") and not line.rstrip().endswith(":") and "#" not in line
    ]
    assert not uncommented, uncommented


def pythonpath(*dirs: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(str(d) for d in dirs)}


def test_example_plugins_own_conformance_tests_pass_against_the_installed_plugin(site, tmp_path):
    """The plugin's tests/ (rlplat.testing over point_mass and residual_mlp), run as its
    author would: pytest in a fresh process that sees the plugin only as installed."""
    tests = site.parent / "rlplat-example-plugin" / "tests"  # the site fixture's copy: no bytecode lands in the repo
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tests.parent), str(tests)],
        cwd=tmp_path,
        env={**os.environ, **pythonpath(site)},
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def section(output: str, title: str) -> list[list[str]]:
    """The rows (split on whitespace) of the table of rlplat-list's output titled ``title...``."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 3 :]:  # title, header, rule
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def has_row(rows: list[list[str]], *cells: str) -> bool:
    return any(row[: len(cells)] == list(cells) for row in rows)


def test_list_shows_plugin_entries_their_presets_and_the_broken_plugin(site, tmp_path):
    result = cli("rlplat-list", cwd=tmp_path, env=pythonpath(site))
    assert result.returncode == 0, result.stderr
    out = result.stdout

    envs = section(out, "env entries")
    assert has_row(envs, "point_mass", "rlplat-example-plugin") and has_row(envs, "gym", "rlplat")
    assert has_row(envs, "broken_env", "rlplat-broken-plugin", "failed")
    networks = section(out, "network entries")
    assert has_row(networks, "residual_mlp", "rlplat-example-plugin") and has_row(networks, "mlp", "rlplat")
    transforms = section(out, "transform entries")
    assert has_row(transforms, "clip_observation", "rlplat-example-plugin")
    assert has_row(transforms, "obs_norm", "rlplat")
    [clip] = [i for i, row in enumerate(transforms) if row[0] == "clip_observation"]
    assert transforms[clip + 1] == ["keys:", "low=-5.0,", "high=5.0"]  # from its signature, observation_space left out
    assert has_row(section(out, "loss entries"), "ppo", "rlplat")
    addons = section(out, "loss_addon entries")
    assert has_row(addons, "entropy_floor", "rlplat-example-plugin") and has_row(addons, "kl_to_reference", "rlplat")

    assert has_row(section(out, "env presets"), "point_mass", "rlplat-example-plugin")
    assert has_row(section(out, "env presets"), "pendulum", "rlplat")
    assert has_row(section(out, "network presets"), "residual_mlp", "rlplat-example-plugin")
    assert has_row(section(out, "tuned presets"), "ppo_point_mass", "rlplat-example-plugin")

    failed = section(out, "Plugins that failed to load")
    [broken_env] = [row for row in failed if row[:3] == ["env", "broken_env", "rlplat-broken-plugin"]]
    assert "ModuleNotFoundError: No module named 'rlplat_missing_dependency'" in " ".join(broken_env)
    [broken_net] = [row for row in failed if row[:3] == ["network", "broken_net", "rlplat-broken-plugin"]]
    assert "AttributeError" in " ".join(broken_net) and "NoSuchTorso" in " ".join(broken_net)


def test_list_one_kind_as_a_module_reports_two_distributions_claiming_one_name(site, tmp_path):
    clash = tmp_path / "clash"
    for dist in ("rlplat-twin-a", "rlplat-twin-b"):
        module = dist.replace("-", "_")
        install_distribution(
            clash, dist, {"rlplat.envs": {"twin": f"{module}:make"}}, {f"{module}.py": "def make():\n    return None\n"}
        )
    result = subprocess.run(
        [sys.executable, "-m", "rlplat.cli.list", "--kind", "env"],
        cwd=tmp_path,
        env={**os.environ, **pythonpath(site, clash)},
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert has_row(section(result.stdout, "env entries"), "point_mass", "rlplat-example-plugin")
    assert "network entries" not in result.stdout and "residual_mlp" not in result.stdout
    [twin] = [" ".join(row) for row in section(result.stdout, "Plugins that failed to load") if row[1] == "twin"]
    assert "claimed by both" in twin and "'rlplat-twin-a'" in twin and "'rlplat-twin-b'" in twin


def test_list_unknown_kind_names_the_valid_kinds(tmp_path):
    result = cli("rlplat-list", "--kind", "enb", cwd=tmp_path)
    assert result.returncode == 2
    assert "rlplat-list: error: --kind='enb' is not known" in result.stderr
    valid = result.stderr.split("Valid: ", 1)[1].split(".")[0].split(", ")
    assert {"env", "network", "optimizer", "algo", "tuned"} <= set(valid)
    assert "Did you mean 'env'" in result.stderr


def test_plugin_env_network_and_tuned_preset_train_end_to_end_beside_a_broken_plugin(site, tmp_path, store):
    result = cli(
        "rlplat-train",
        "algo=ppo",
        "env=point_mass",
        "network=residual_mlp",
        *TINY,
        f"tracking.uri={store}",
        cwd=tmp_path,
        env=pythonpath(site),
    )
    assert result.returncode == 0, result.stderr

    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.status == "FINISHED"
    assert (run.data.tags["algo"], run.data.tags["env"]) == ("ppo", "point_mass")
    params = run.data.params
    assert (params["env.name"], params["env.max_episode_steps"]) == ("point_mass", "50")  # plugin's env/ YAML
    assert (params["network.name"], params["network.num_blocks"]) == ("residual_mlp", "2")  # plugin's network/ YAML
    assert (params["loss.gamma"], params["loss.gae_lambda"]) == ("0.95", "0.9")  # plugin's tuned/ppo_point_mass
    # the plugin's transform, from the same tuned preset, applied after the algo preset's obs_norm
    assert (params["transforms.clip_observation.low"], params["transforms.clip_observation.high"]) == ("-3.0", "3.0")
    state = load_checkpoint(Path(run.data.tags["rlplat.run_dir"]) / "checkpoints" / "final.pt")
    assert list(state["config"]["transforms"]) == ["obs_norm", "clip_observation"] and len(state["transforms"]) == 2
    assert params["trainer.total_frames"] == "256"  # the command line still wins over the tuned preset
    assert math.isfinite(run.data.metrics["eval/return_mean"])


def test_selecting_the_broken_plugin_stops_with_one_message_and_records_nothing(site, tmp_path, store):
    result = cli(
        "rlplat-train", "algo=ppo", "env=broken_env", *TINY, f"tracking.uri={store}", cwd=tmp_path, env=pythonpath(site)
    )
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.startswith("rlplat-train: error:") and len(message.splitlines()) == 1, message
    for needle in ("'broken_env'", "'rlplat-broken-plugin'", "No module named 'rlplat_missing_dependency'"):
        assert needle in message
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "mlflow.db").exists()
    assert [p for p in (tmp_path / "outputs").rglob("*") if p.is_file()] == []
