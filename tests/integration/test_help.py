"""What a user sees first: ``rlplat-train --help`` and ``rlplat-list``, run as console scripts."""

from __future__ import annotations

import re

import pytest
from conftest import cli, imported_modules, install_distribution

from rlplat.hydra_ext import GROUPS, PRESET_GROUPS, group_options

STABLE_OVERRIDES = (
    "algo=",
    "env=",
    "seed=",
    "trainer.total_frames=",
    "trainer.device=",
    "tracking.uri=",
    "tracking.experiment=",
)


@pytest.fixture(scope="module")
def help_text(tmp_path_factory) -> str:
    result = cli("rlplat-train", "--help", cwd=tmp_path_factory.mktemp("help"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def test_help_opens_with_rlplats_usage_and_examples(help_text):
    assert help_text.startswith("rlplat-train: train a reinforcement-learning agent")
    assert "Usage:\n  rlplat-train [key=value ...]" in help_text
    for example in (
        "rlplat-train algo=ppo env=pendulum",
        "rlplat-train -m algo=ppo,a2c env=cartpole seed=0,1,2",
        "rlplat-train -m +sweep=ppo_pendulum_hpo",
        "--cfg job",
    ):
        assert example in help_text, example


def test_help_is_not_hydras(help_text):
    assert "powered by hydra" not in help_text.lower()
    assert "== Config ==" not in help_text  # Hydra's default template dumps the whole config


@pytest.mark.parametrize("group", [*GROUPS.values(), *PRESET_GROUPS])
def test_help_lists_every_option_of_every_group(help_text, group):
    """Registered names without a YAML file (env=gym) are options too."""
    assert f"\n{group}: {', '.join(sorted(group_options(group)))}\n" in help_text


def test_help_names_algo_options_env_entries_and_where_presets_live(help_text):
    algos = "a2c, a2c_lstm, ddpg, dqn, impala, ppo, ppo_kl, ppo_lstm, ppo_rnd, reinforce, sac, td3"
    assert re.search(rf"^algo: {algos}$", help_text, re.MULTILINE)
    assert re.search(r"^env: .*\bgym\b", help_text, re.MULTILINE)
    for place in ("conf/", "conf/tuned/", "sweeps/", "rlplat.conf entry point"):
        assert place in help_text, place


def test_help_gives_the_stable_overrides_and_where_to_look_next(help_text):
    for override in STABLE_OVERRIDES:
        assert re.search(rf"^  {re.escape(override)}<", help_text, re.MULTILINE), override
    assert "HYDRA_FULL_ERROR=1" in help_text and "rlplat-list" in help_text


def test_help_imports_neither_torch_mlflow_nor_optuna(tmp_path):
    """--help stays fast: Python's import profile of the command names none of them."""
    result = cli("rlplat-train", "--help", cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    imported = imported_modules(result.stderr)
    assert "hydra" in imported  # the profile was taken
    assert not {m.split(".")[0] for m in imported} & {"torch", "mlflow", "optuna"}


def test_help_shows_a_plugins_env_and_its_yaml_presets(tmp_path):
    site = tmp_path / "site"
    install_distribution(
        site,
        "rlplat-help-demo",
        {"rlplat.envs": {"demo_env": "help_demo:make"}, "rlplat.conf": {"help_demo": "help_demo_conf"}},
        {"help_demo.py": "def make():\n    raise RuntimeError('never built by --help')\n"},
    )
    (site / "help_demo_conf" / "env").mkdir(parents=True)
    (site / "help_demo_conf" / "__init__.py").write_text("")
    (site / "help_demo_conf" / "env" / "demo_preset.yaml").write_text("name: demo_env  # the plugin's env\n")
    result = cli("rlplat-train", "--help", cwd=tmp_path, env={"PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    [env_line] = [line for line in result.stdout.splitlines() if line.startswith("env: ")]
    assert {"demo_env", "demo_preset", "gym", "pendulum"} <= set(env_line.removeprefix("env: ").split(", "))


def test_list_shows_entries_presets_and_how_to_choose_them(tmp_path):
    result = cli("rlplat-list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "env entries, entry-point group rlplat.envs  (env=<name>)" in out
    assert "loss entries, entry-point group rlplat.losses  (loss=<name>)" in out
    for title in ("algo presets", "env presets", "tuned presets", "sweep presets", "hydra/launcher presets"):
        assert f"\n{title}\n" in out, title
    assert re.search(r"^ ppo_pendulum_hpo +rlplat +Optuna search", out, re.MULTILINE)


def test_list_one_group(tmp_path):
    result = cli("rlplat-list", "--kind", "algo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    options = {line.split()[0] for line in result.stdout.splitlines()[3:] if line.strip()}
    assert options == group_options("algo")
    assert "env entries" not in result.stdout


def test_list_a_registry_by_its_config_group_and_whole_preset_sentences(tmp_path):
    result = cli("rlplat-list", "--kind", "optim", cwd=tmp_path)  # the group of the optimizer registry
    assert result.returncode == 0, result.stderr
    assert "optimizer entries" in result.stdout and "\noptim presets\n" in result.stdout
    result = cli("rlplat-list", "--kind", "tuned", cwd=tmp_path)  # a sentence spanning an indented command
    assert "PPO on CartPole-v1, from the trials of rlplat-train -m +sweep=ppo_cartpole_speed" in result.stdout


@pytest.mark.parametrize("args,needle", [(["--kind", "nope"], "--kind='nope' is not known"), (["--bad"], "--bad")])
def test_list_bad_arguments_are_one_line(args, needle, tmp_path):
    result = cli("rlplat-list", *args, cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("rlplat-list: error:") and needle in line, line
