"""The light checks rlplat-train runs before torch: types against the defaults, settings,
ranges in the constructors' words, the env probe, overrides that do not parse, output
directories that cannot be written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from hydra.core.hydra_config import HydraConfig

from rlplat.envs.probe import build_env, env_spaces
from rlplat.hydra_ext import compose_config
from rlplat.hydra_ext.validate import check_command_line, check_config, check_types, parse_overrides
from rlplat.registry import ConfigError


def config_error(overrides: list[str]) -> str:
    """check_config's message for the config ``rlplat-train <overrides>`` composes ('' if none)."""
    cfg = compose_config(overrides)
    try:
        check_config(cfg, list(HydraConfig.get().overrides.task))
    except ConfigError as error:
        return str(error)
    return ""


# --- types against the defaults -------------------------------------------------------------


DEFAULTS = {
    "n": 8,
    "lr": 0.0003,
    "flag": True,
    "device": "auto",
    "sizes": [64, 64],
    "betas": [0.9, 0.999],
    "node": {"k": 1},
    "maybe": None,
    "uri": "sqlite:///${hydra:runtime.cwd}/x.db",
}


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("n", "abc", "n='abc': must be an integer (int), like the default 8"),
        ("n", True, "n=True: must be an integer (int), like the default 8"),
        ("n", 2.5, "n=2.5: must be an integer (int), like the default 8"),
        ("lr", [1], "lr=[1]: must be a number (float), like the default 0.0003"),
        ("lr", False, "lr=False: must be a number (float), like the default 0.0003"),
        ("flag", 1, "flag=1: must be true or false (bool), like the default true"),
        ("device", 1, "device=1: must be a string (str), like the default 'auto'"),
        ("sizes", 64, "sizes=64: must be a list, like the default [64, 64]"),
        ("sizes", ["a"], "sizes=['a']: must be a list of integers (int), like the default [64, 64]"),
        ("node", 3, "node=3: must be a mapping of keys, like the default {'k': 1}"),
        ("node", {"k": "x"}, "node.k='x': must be an integer (int), like the default 1"),
        ("device", None, "device=None: must be a string (str), like the default 'auto'"),
    ],
)
def test_a_value_must_have_the_type_of_its_default(key, value, message):
    with pytest.raises(ConfigError) as error:
        check_types({**DEFAULTS, key: value}, DEFAULTS)
    assert str(error.value) == message


@pytest.mark.parametrize(
    "key,value",
    [
        ("lr", 1),
        ("lr", None),  # null disables a number's feature (optim.max_grad_norm=null); its own check decides
        ("betas", [0.9, 1]),
        ("sizes", []),
        ("maybe", "anything"),
        ("uri", 3),
        ("node", {"new": "x"}),
    ],
)
def test_compatible_values_and_free_keys_pass(key, value):
    check_types({**DEFAULTS, key: value, "added": object()}, DEFAULTS)


def test_a_parameter_group_of_optim_defaults_to_the_shared_settings():
    defaults = {"optim": {"name": "adam", "lr": 0.001, "actor": {}}}
    check_types({"optim": {"name": "adam", "lr": 0.001, "actor": {"lr": 1}, "critic": {"lr": 0.1}}}, defaults)
    with pytest.raises(ConfigError, match=r"optim.critic.lr='x': must be a number \(float\), like the default 0.001"):
        check_types({"optim": {"name": "adam", "lr": 0.001, "critic": {"lr": "x"}}}, defaults)


# --- the composed config --------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["trainer.total_frames=abc"], "trainer.total_frames='abc': must be an integer (int), like the default 61440"),
        (["algo=ppo", "env=cartpole", "optim.lr=[1]"], "optim.lr=[1]: must be a number (float), like the default"),
        (["seed=minus"], "seed='minus': must be an integer (int), like the default 0"),
        (["seed=-1"], "seed=-1: must be an integer >= 0"),
        (["trainer.total_frames=0"], "trainer.total_frames=0: must be an integer >= 1"),
        (["trainer.device=tpu"], "trainer.device='tpu': valid: cpu, cuda, auto"),
        (["checkpoint.keep=0"], "checkpoint.keep=0: must be an integer >= 1"),
        (["tracking.experiment=''"], "tracking.experiment is empty"),
        (
            ["tracking.also=[csv,wandb]"],
            "tracking.also=['csv', 'wandb']: 'wandb' is no logger; valid: csv, tensorboard",
        ),
        (["algo=sac", "optim.actor.lr=abc"], "optim.actor.lr='abc': must be a number (float)"),
        (["loss.gamma=null"], "loss.gamma=None: must be in [0, 1]"),  # the constructor would fail on None
        (["optim.max_grad_norm=null"], ""),  # null disables clipping
        (["algo=ppo", "env=pendulum", "transforms.obs_norm=null"], ""),  # null leaves a preset's transform out
        (["env.id=NoSuchEnv-v0"], "env.id='NoSuchEnv-v0': Environment `NoSuchEnv` doesn't exist."),
        (["+note=x"], "note='x': no part of rlplat reads 'note'. Valid top-level keys: seed, transforms, trainer"),
        (["++sed=3"], "sed=3: no part of rlplat reads 'sed'. Valid top-level keys: seed, "),
        (["++sed=3"], "Did you mean 'seed'?"),
        (["algo=sac", "++env.note=x"], "env.note='x': env 'gym' has no key 'note'"),  # a node's keys: its owner's
        (
            ["env.id=FrozenLake-v1", "env.kwargs.map_name=9x9"],
            "env 'gym' (env.id='FrozenLake-v1') failed to build: KeyError: '9x9'",
        ),
    ],
)
def test_bad_values_are_reported_in_the_users_terms(overrides, message):
    reported = config_error(overrides)
    assert message in reported and bool(message) == bool(reported), reported


@pytest.mark.parametrize("overrides", [[], ["algo=sac"], ["algo=dqn", "env=cartpole"], ["algo=ppo", "~tuned"]])
def test_presets_pass(overrides):
    assert config_error(overrides) == ""


RANGES = [
    ["loss.gamma=1.5"],
    ["loss.gae_lambda=-0.1"],
    ["algo=sac", "loss.tau=0"],
    ["algo=td3", "loss.tau=1.5"],
    ["collector.num_envs=0"],
    ["collector.steps_per_env=-3"],
    ["buffer.epochs=0"],
    ["buffer.minibatch_size=0"],
    ["buffer.minibatch_size=100000"],
    ["collector.num_envs=2", "collector.steps_per_env=16", "buffer.minibatch_size=64"],
    ["algo=dqn", "env=cartpole", "buffer.batch_size=0"],
    ["algo=dqn", "env=cartpole", "buffer.capacity=0"],
    ["optim.lr=0"],
    ["algo=a2c", "env=cartpole", "optim.lr=-1e-4"],
    ["algo=sac", "loss.tau=null"],  # null is out of range, in the constructor as in the pre-check
    ["loss.gamma=null"],
    ["buffer.epochs=null"],
    ["collector.num_envs=null"],
    ["optim.lr=null"],
]


@pytest.mark.parametrize("overrides", RANGES, ids=[" ".join(o) for o in RANGES])
def test_range_messages_are_the_constructors_own(overrides):
    """The pre-check reports what building would, word for word: the constructors stay the
    one source of each message."""
    from rlplat.build import build

    message = config_error([*overrides, "tracking.enabled=false"])
    assert message, "the pre-check missed it"
    with pytest.raises(ConfigError) as error:
        build(compose_config([*overrides, "tracking.enabled=false"])).parts.close()
    assert str(error.value) == message


def test_checking_a_config_imports_neither_torch_nor_mlflow(tmp_path):
    code = (
        "import sys\n"
        "from hydra.core.hydra_config import HydraConfig\n"
        "from rlplat.hydra_ext import compose_config\n"
        "from rlplat.hydra_ext.validate import check_config\n"
        "cfg = compose_config(['algo=ppo', 'env=cartpole', 'tracking.also=[csv,tensorboard]'])\n"
        "check_config(cfg, list(HydraConfig.get().overrides.task))\n"
        "print(sorted(m for m in ('torch', 'tensordict', 'mlflow', 'tensorboard') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]"


# --- the env probe --------------------------------------------------------------------------


def _raise_on_construction(**kwargs):
    raise RuntimeError("no display here")


gymnasium.register(id="RlplatTestBroken-v0", entry_point=_raise_on_construction)


def test_an_env_constructor_that_raises_becomes_one_config_error():
    with pytest.raises(ConfigError) as error:
        build_env({"name": "gym", "id": "RlplatTestBroken-v0"})
    assert str(error.value) == "env 'gym' (env.id='RlplatTestBroken-v0') failed to build: RuntimeError: no display here"


def test_config_errors_of_the_env_entry_pass_unchanged():
    with pytest.raises(ConfigError, match=r"^env.id='Nope-v0': Environment `Nope` doesn't exist"):
        env_spaces({"name": "gym", "id": "Nope-v0"})
    with pytest.raises(ConfigError, match="env 'gym' has no key 'idd'"):
        env_spaces({"name": "gym", "idd": "CartPole-v1"})


def test_env_spaces_reads_both_spaces():
    observation_space, action_space = env_spaces({"name": "gym", "id": "CartPole-v1"})
    assert observation_space.shape == (4,) and action_space.n == 2


# --- the command line -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg,needle",
    [
        ("++trainer.total_frames=[1", "trainer.total_frames=[1: not a valid override (no viable alternative"),
        ("seed=${", "seed=${: not a valid override (extraneous input '{'"),
        ("x='a", "x='a: not a valid override"),
    ],
)
def test_an_override_that_does_not_parse_is_named(arg, needle):
    with pytest.raises(ConfigError) as error:
        parse_overrides([arg])
    assert needle in str(error.value) and "Valid forms: key=value" in str(error.value)
    assert "\n" not in str(error.value)


def test_flags_and_their_values_are_not_overrides():
    parsed = parse_overrides(["-m", "--cfg", "job", "-p", "trainer", "seed=1", "~tuned", "+sweep=x"])
    assert [o.key_or_group for o in parsed] == ["seed", "tuned", "sweep"]


def test_run_dir_under_a_file_is_not_writable(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ConfigError) as error:
        check_command_line(["hydra.run.dir=notes.txt/run/${now:%H}"], cwd=tmp_path)
    assert str(error.value) == (
        "hydra.run.dir='notes.txt/run/${now:%H}': not writable ('notes.txt' is a file, not a directory)"
    )
    check_command_line(["-m", "hydra.run.dir=notes.txt/run"], cwd=tmp_path)  # a multirun writes hydra.sweep.dir
    check_command_line(["--cfg", "job", "hydra.run.dir=notes.txt/run"], cwd=tmp_path)  # prints only
    with pytest.raises(ConfigError, match="hydra.sweep.dir='notes.txt/sweep'"):
        check_command_line(["-m", "hydra.sweep.dir=notes.txt/sweep"], cwd=tmp_path)


def test_sqlite_store_directory_must_be_writable(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    bad = f"sqlite:///{tmp_path}/notes.txt/mlflow.db"
    with pytest.raises(ConfigError, match=r"^tracking.uri='sqlite:///.*notes.txt/mlflow.db': not writable \("):
        check_command_line([f"++tracking.uri={bad}"], cwd=tmp_path)
    check_command_line([f"++tracking.uri={bad}", "++tracking.enabled=false"], cwd=tmp_path)
    check_command_line([f"++tracking.uri=sqlite:///{tmp_path}/new/dir/mlflow.db"], cwd=tmp_path)
    check_command_line(["++tracking.uri=http://127.0.0.1:5000"], cwd=tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: permissions cannot be tested as root")
def test_default_run_dir_in_a_read_only_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(ConfigError) as error:
            check_command_line([], cwd=locked)
    finally:
        locked.chmod(0o700)
    assert str(error.value).startswith("hydra.run.dir='outputs/runs/")
    assert str(error.value).endswith("': not writable (no permission to write in the current directory)")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_directory_that_refuses_new_entries_is_named_whatever_the_permissions(tmp_path):
    """/proc lets root through every permission check and refuses a new directory all the same."""
    with pytest.raises(ConfigError) as error:
        check_command_line(["hydra.run.dir=/proc/rlplat/run"], cwd=tmp_path)
    assert str(error.value).startswith("hydra.run.dir='/proc/rlplat/run': not writable (")
    check_command_line([f"hydra.run.dir={tmp_path}/new/run"], cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []  # the check made its directory and removed it


def test_a_directory_without_write_permission_is_named(tmp_path, monkeypatch):
    """As :func:`test_default_run_dir_in_a_read_only_directory`, where root cannot lack permission."""
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path / "locked")
    (tmp_path / "locked").mkdir()
    with pytest.raises(ConfigError) as error:
        check_command_line([f"hydra.run.dir={tmp_path}/locked/run"], cwd=tmp_path)
    assert str(error.value) == (
        f"hydra.run.dir='{tmp_path}/locked/run': not writable (no permission to write in '{tmp_path}/locked')"
    )


def test_default_run_dir_in_a_writable_directory(tmp_path):
    check_command_line([], cwd=tmp_path)
    assert list(Path(tmp_path).iterdir()) == []  # checking writes nothing


@pytest.mark.parametrize("arg", ["+hydra.foo=1", "++hydra.job.foo=1", "++hydra.run.directory=x"])
def test_a_hydra_key_nothing_reads_is_refused_however_it_was_added(arg):
    with pytest.raises(ConfigError, match=r"Hydra has no setting 'hydra\.[a-z.]+', and nothing else reads it"):
        check_command_line([arg])


def test_hydra_keys_that_exist_or_that_open_nodes_take_pass():
    check_command_line(["++hydra.run.dir=x/y", "+hydra.job.env_set.FOO=bar", "++hydra.job.chdir=false"])
