"""Bad input through the real ``rlplat-train``: exit status 2, exactly one stderr line that
names the key, the value and what is valid, no traceback, no run, run directory or store
left behind.

The inputs are the rows of the bad-input table of docs/guides/configuration.md, each with
where it is checked and the exact line the user sees: every row is run here and its line
compared, so the table cannot drift, and :data:`NEEDLES` (what each line must say) must name
exactly the table's rows. How soon each line comes (the promise: within 2 seconds, for the
rows checked before torch is imported) is measured by benchmarks/bad_input.py (``make bench``),
not here: a busy machine would fail a wall-clock bound.
"""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path

import pytest
from conftest import TINY, cli, install_distribution
from mlflow import MlflowClient

TABLE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "configuration.md"
TABLE_START, TABLE_END = "<!-- bad-input-table:start -->", "<!-- bad-input-table:end -->"
NEEDLES = {
    "trainer.total_frames=abc": ["trainer.total_frames='abc'", "must be an integer (int)", "like the default"],
    "optim.lr=[1]": ["optim.lr=[1]", "must be a number (float)", "like the default"],
    "seed=minus": ["seed='minus'", "must be an integer (int)"],
    "trainer.total_frames=-5": ["trainer.total_frames=-5", "integer >= 1"],
    "trainer.device=tpu": ["trainer.device='tpu'", "cpu, cuda, auto"],
    "loss.gamma=1.5": ["loss.gamma=1.5", "[0, 1]"],
    "algo=sac loss.tau=0": ["loss.tau=0", "(0, 1]"],
    "collector.num_envs=0": ["collector.num_envs=0", "at least 1"],
    "buffer.minibatch_size=100000": ["buffer.minibatch_size=100000", "[1, 2048]", "collector.num_envs"],
    "optim.lr=0": ["optim.lr=0", "> 0"],
    "env.id=NoSuchEnv-v0": ["env.id='NoSuchEnv-v0'", "doesn't exist"],
    "env.id=FrozenLake-v1 env.kwargs.map_name=9x9": ["env 'gym'", "FrozenLake-v1", "failed to build", "KeyError"],
    "env=pendulum env.max_episode_steps=-1": ["env.max_episode_steps=-1", "integer >= 1", "null"],
    "hydra.run.dir=notes.txt/run": ["hydra.run.dir='notes.txt/run'", "not writable", "'notes.txt' is a file"],
    "tracking.uri=sqlite:///notes.txt/mlflow.db": ["tracking.uri='sqlite:///notes.txt/mlflow.db'", "not writable"],
    "tracking.uri=nonsense://x": ["tracking.uri='nonsense://x'", "no MLflow store has the scheme 'nonsense'"],
    "tracking.uri=file:///tmp/mlruns": ["tracking.uri='file:///tmp/mlruns'", "MLflow 3 refuses file stores", "sqlite"],
    "tracking.uri=sqlite:///notes.txt": ["tracking.uri='sqlite:///notes.txt'", "not an SQLite database"],
    "trainer.total_frames=[1": ["trainer.total_frames=[1", "not a valid override", "key=value"],
    "foo=bar": ["'foo'", "+foo=bar"],
    "+note=baseline": ["note='baseline'", "no part of rlplat reads 'note'", "Valid top-level keys: seed"],
    "++hydra.job.foo=1": ["hydra.job.foo", "Hydra has no setting", "Valid keys of hydra.job: name"],
    "algo=ppoo": ["algo='ppoo'", "Did you mean 'ppo'?"],
    "algo=dqn env=pendulum": ["loss 'dqn' cannot act in env 'Pendulum-v1'", "Algorithms for this env: a2c, ddpg"],
    "algo=ppo buffer=replay": ["buffer='replay' does not fit loss 'ppo'", "Buffers that fit: rollout"],
    "algo=dqn env=cartpole network.core=lstm": ["network.core='lstm'", "loss 'dqn' takes no recurrent core"],
    "network.hiden_sizes=[8]": ["network.hiden_sizes=[8]", "Did you mean 'hidden_sizes'?"],
    "loss.addons={kl_to_referense:{coef:0.1}}": ["loss.addons.kl_to_referense", "Did you mean 'kl_to_reference'?"],
}
"""Each bad input (the command after ``rlplat-train``) and what its line must say."""


def table_rows() -> list[tuple[str, str, str]]:
    """The bad-input table of docs/guides/configuration.md: (arguments after ``rlplat-train``, where it is checked,
    the exact stderr line)."""
    text = TABLE_PAGE.read_text()
    table = text[text.index(TABLE_START) + len(TABLE_START) : text.index(TABLE_END)]
    rows = []
    for line in table.splitlines():
        if line.startswith("| ``rlplat-train "):
            command, checked, message = (cell.strip() for cell in line.strip()[1:-1].split(" | "))
            rows.append((command[2:-2].strip().removeprefix("rlplat-train "), checked, message[2:-2].strip()))
    return rows


ROWS = table_rows()


def run_bad(args: list[str], cwd: Path, store: str, env: dict[str, str] | None = None):
    """Run ``rlplat-train *args`` in ``cwd`` (where ``notes.txt`` is a file), recording to
    ``store`` unless ``args`` name a store."""
    (cwd / "notes.txt").write_text("a file, not a directory\n")
    store_args = [] if any(a.startswith("tracking.uri=") for a in args) else [f"tracking.uri={store}"]
    return cli("rlplat-train", *args, *store_args, cwd=cwd, env=env, timeout=120)


def assert_reported(result, cwd: Path, store: str) -> str:
    """Exit 2, one ``rlplat-train: error:`` line, no traceback, nothing written; returns the line."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlplat-train: error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (cwd / "outputs").exists(), sorted(map(str, (cwd / "outputs").rglob("*")))
    assert not Path(store.removeprefix("sqlite:///")).exists()
    return lines[0]


def test_the_readme_table_lists_every_tested_input():
    assert [command for command, _, _ in ROWS] == list(NEEDLES)


@pytest.mark.parametrize("command,checked,line", ROWS, ids=[command for command, _, _ in ROWS])
def test_bad_input_is_one_line_and_leaves_nothing(command, checked, line, tmp_path, store):
    reported = assert_reported(run_bad(shlex.split(command), tmp_path, store), tmp_path, store)
    assert reported == line
    for needle in NEEDLES[command]:
        assert needle in reported


def test_a_plugin_env_whose_constructor_raises(tmp_path, store):
    site = tmp_path / "site"
    source = """
        def make():
            raise RuntimeError("no display here")
    """
    install_distribution(
        site, "broken-env", {"rlplat.envs": {"broken": "broken_env:make"}}, {"broken_env.py": textwrap.dedent(source)}
    )
    result = run_bad(["env=broken"], tmp_path, store, env={"PYTHONPATH": str(site)})
    line = assert_reported(result, tmp_path, store)
    assert line == "rlplat-train: error: env 'broken' failed to build: RuntimeError: no display here"


@pytest.mark.parametrize("directory", ["/proc/rlplat/run", "/sys/rlplat"])
def test_a_run_directory_on_a_virtual_file_system_is_one_line(directory, tmp_path, store):
    """/proc and /sys refuse new entries even to root, whom every permission check lets through."""
    line = assert_reported(run_bad([f"hydra.run.dir={directory}"], tmp_path, store), tmp_path, store)
    assert line.startswith(f"rlplat-train: error: hydra.run.dir={directory!r}: not writable (")
    assert not Path(directory).exists()


def test_full_error_keeps_the_traceback_of_hydras_errors_and_rlplats(tmp_path, store):
    for args in (["foo=bar"], ["trainer.total_frames=abc"], ["trainer.total_frames=[1"]):
        result = run_bad(args, tmp_path, store, env={"HYDRA_FULL_ERROR": "1"})
        assert result.returncode != 0 and "Traceback" in result.stderr, args


def test_a_sweep_on_a_store_that_cannot_be_used_is_one_line_before_any_job(tmp_path, store):
    # the sweep's parent run is created by a Hydra callback, whose errors Hydra only warns about
    result = run_bad(["-m", "seed=0,1", "tracking.uri=sqlite:///notes.txt"], tmp_path, store)
    line = assert_reported(result, tmp_path, store)
    assert "'notes.txt' is a file but not an SQLite database" in line


def test_a_deleted_experiment_is_one_line_naming_how_to_restore_it(tmp_path, store):
    result = cli("rlplat-train", *TINY, "tracking.experiment=gone", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("gone").experiment_id
    client.delete_experiment(experiment)
    for sweep in ([], ["-m", "seed=0,1"]):
        result = cli("rlplat-train", *sweep, *TINY, "tracking.experiment=gone", f"tracking.uri={store}", cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert f"tracking.experiment='gone' was deleted from tracking.uri='{store}': restore it" in result.stderr
        assert f"mlflow experiments restore --experiment-id {experiment}" in result.stderr
    assert len(list((tmp_path / "outputs").rglob("rlplat_run.json"))) == 1  # the first run's alone


@pytest.mark.parametrize(
    "command,needle",
    [
        ("algo=sac buffer.replay_ratio=nan", "buffer.replay_ratio=nan: must be a number, not NaN"),
        ("algo=ppo_kl loss.kl_target=nan", "loss.kl_target=nan: must be a number, not NaN"),
        ("algo=sac buffer.replay_ratio=inf", "buffer.replay_ratio=inf: must be a finite number > 0"),
        ("seed=4294967296", "seed=4294967296: must be at most 2^32 - 1"),
        ("algo=sac loss.target_entropy=foo", "loss.target_entropy='foo': give a number of nats, or null (or auto)"),
        ("algo=td3 loss.target_noise_clip=-1", "loss.target_noise_clip=-1: must be >= 0"),
        ("algo=ppo_kl loss.kl_beta_init=0", "loss.kl_beta_init=0: must be > 0"),
        ("algo=dqn env=cartpole loss.exploration_frames=-5", "loss.exploration_frames=-5: must be >= 0 frames"),
    ],
)
def test_values_every_range_check_would_let_through_are_one_line(command, needle, tmp_path, store):
    args = shlex.split(command)
    if not any(a.startswith("env=") for a in args):
        args.append("env=pendulum")
    assert needle in assert_reported(run_bad(args, tmp_path, store), tmp_path, store)


def test_sac_takes_auto_for_its_target_entropy(tmp_path, store):
    args = ["algo=sac", "env=pendulum", "loss.target_entropy=auto", "tracking.enabled=false"]
    args += ["trainer.total_frames=256", "buffer.learning_starts=64", "loss.warmup_frames=64"]
    result = cli("rlplat-train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
