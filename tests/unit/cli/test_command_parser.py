"""The one ``key=value`` parser of rlplat-eval, -record, -compare and -sync (``args.Command``), and the settings
fields that declare their checks (``settings.at_least``, ``one_of``, bool)."""

from __future__ import annotations

import re

import pytest

from rlplat.cli import compare, record, sync
from rlplat.cli import eval as evaluate
from rlplat.registry import ConfigError
from rlplat.settings import CheckpointConfig, TrainerConfig
from rlplat.tracking.settings import TrackingConfig


def test_a_run_and_its_keys_come_in_any_order():
    for argv in (
        ["runs/x", "episodes=3", "env.max_episode_steps=50"],
        ["episodes=3", "env.max_episode_steps=50", "runs/x"],
    ):
        targets, values, env = evaluate.COMMAND.parse(argv)
        assert (targets, values["episodes"], env) == (["runs/x"], 3, {"max_episode_steps": 50})
    assert evaluate.COMMAND.parse(["runs/x"])[1] == {
        "episodes": 100, "deterministic": True, "seed": None, "device": None, "tracking.uri": None
    }  # fmt: skip


@pytest.mark.parametrize(
    "command,argv,message",
    [
        (evaluate.COMMAND, ["runs/x", "episode=3"], "episode=3: unknown key 'episode'. Valid keys: episodes, "),
        (record.COMMAND, ["runs/x", "fsp=3"], "fsp=3: unknown key 'fsp'. Valid keys: episodes, fps, out, "),
        (compare.COMMAND, ["abc", "metrc=x"], "metrc=x: unknown key 'metrc'. Valid keys: group_by, metric, "),
        (sync.COMMAND, [".", "wiat=5"], "wiat=5: unknown key 'wiat'. Valid keys: wait. Did you mean 'wait'?"),
        (evaluate.COMMAND, ["runs/x", "runs/y"], "'runs/y': expected key=value, e.g. episodes=100"),
        (evaluate.COMMAND, ["episodes=3"], "give the run: a run id, a run directory or a checkpoint file"),
        (compare.COMMAND, ["confidence=1.5", "x"], "confidence='1.5': must be between 0 and 1, e.g. 0.95"),
        (sync.COMMAND, [".", "wait=x"], "wait='x': must be a number"),
    ],
)
def test_every_tool_refuses_bad_input_in_the_same_words(command, argv, message):
    with pytest.raises(ConfigError) as error:
        command.parse(argv)
    assert str(error.value).startswith(message)


def test_a_filter_with_an_equals_sign_is_compared_not_read_as_a_key():
    targets, values, _ = compare.COMMAND.parse(["tags.algo = 'ppo'", "metric=eval/return_mean", "tags.env='x'"])
    assert targets == ["tags.algo = 'ppo'", "tags.env='x'"]
    assert values["metric"] == "eval/return_mean"


def test_an_existing_path_with_an_equals_sign_is_a_target(tmp_path):
    folder = tmp_path / "seed=1"
    folder.mkdir()
    assert sync.COMMAND.parse([str(folder), "wait=2"])[:2] == ([folder.resolve()], {"wait": 2.0})


@pytest.mark.parametrize(
    "make,message",
    [
        (
            lambda: CheckpointConfig(save_buffer=1, every_frames=0, keep=1),
            "checkpoint.save_buffer=1: must be true or false",
        ),
        (
            lambda: CheckpointConfig(save_buffer=False, every_frames=0, keep=0),
            "checkpoint.keep=0: must be an integer >= 1",
        ),
        (
            lambda: TrackingConfig(
                enabled="yes", uri="sqlite:///x.db", artifact_location=None, experiment="e", run_name=None
            ),
            "tracking.enabled='yes': must be true or false",
        ),
    ],
)
def test_settings_fields_are_checked_as_declared(make, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make()


def test_a_trainer_field_declared_one_of_names_the_valid_values():
    node = {
        "total_frames": 10, "device": "tpu", "num_threads": 1, "lr_schedule": "constant", "eval_every_frames": 0,
        "eval_episodes": 1, "log_every_frames": 0, "objective": "eval/return_mean", "nonfinite": "raise",
        "record_every_frames": 0,
    }  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape("trainer.device='tpu': valid: cpu, cuda, auto")):
        TrainerConfig.from_node(node)
