"""Observation and action kinds through the real CLI: MultiDiscrete and MultiBinary actions
from a plugin env, CartPole from pixels (the issue's command), MiniGrid with its mission read
by the multi-input torso's GRU; each trained by ``rlplat-train`` on a tiny budget. The slow
suite also evaluates the pixel and MiniGrid runs with ``rlplat-eval`` and resumes them from
their middle checkpoint with ``rlplat-train resume=``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import TINY, TINY_OFF_POLICY, cli, install_distribution, only_run
from mlflow import MlflowClient

from rlplat.checkpoint import load_checkpoint

MATCH_ENVS = '''
"""Match a target shown in the observation: a vector action scored component by component."""

import gymnasium
import numpy as np


class Match(gymnasium.Env):
    """Each step shows a random target action; the reward is the fraction of the action's
    components equal to the target's (so a policy can learn to copy it); ``episode_steps``
    steps, then a truncation. An action outside the space raises ValueError."""

    metadata = {"render_modes": []}

    def __init__(self, action_space, episode_steps):
        self.action_space = action_space
        self.sizes = (
            [int(n) for n in action_space.nvec]
            if isinstance(action_space, gymnasium.spaces.MultiDiscrete)
            else [2] * int(action_space.n)
        )
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (sum(self.sizes),), np.float32)
        self.episode_steps = episode_steps

    def _observe(self):
        self.target = np.array([self.np_random.integers(n) for n in self.sizes])
        one_hots = [np.eye(n, dtype=np.float32)[t] for n, t in zip(self.sizes, self.target)]
        return np.concatenate(one_hots)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        if not self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        reward = float(np.mean(np.asarray(action) == self.target))
        self.steps += 1
        return self._observe(), reward, False, self.steps >= self.episode_steps, {}


def make_multi_discrete(episode_steps: int = 8):
    return Match(gymnasium.spaces.MultiDiscrete([3, 2]), episode_steps)


def make_multi_binary(episode_steps: int = 8):
    return Match(gymnasium.spaces.MultiBinary(3), episode_steps)
'''
"""A plugin module: env entries ``match_multi_discrete`` (``MultiDiscrete([3, 2])`` actions)
and ``match_multi_binary`` (``MultiBinary(3)``), 8-step episodes of return in [0, 8]."""

MATCH_ENTRIES = {
    "match_multi_discrete": "rlplat_match_envs:make_multi_discrete",
    "match_multi_binary": "rlplat_match_envs:make_multi_binary",
}

PIXELS = [
    "algo=ppo",
    "env=cartpole",
    "network=cnn",
    "transforms.obs_norm=null",
    "+transforms.from_pixels={}",
    "+transforms.grayscale={}",
    "+transforms.resize={size:64}",
    "+transforms.frame_stack={k:4}",
]
"""The issue's command: PPO on CartPole from rendered pixels, grey, 64x64, 4 frames stacked."""

MINIGRID_MISSION = ["algo=ppo", "env=minigrid_doorkey", "env.keys=[image,direction,mission]", "+transforms.tokenize={}"]
"""PPO on MiniGrid DoorKey with the mission tokenised and read by the multi-input torso's GRU."""

DISPLAY = {"SDL_VIDEODRIVER": "dummy"}
"""pygame renders CartPole without a display."""


@pytest.fixture(scope="module")
def match_site(tmp_path_factory) -> Path:
    """A site dir holding the installed plugin distribution of the two Match envs."""
    site = tmp_path_factory.mktemp("match")
    install_distribution(
        site, "rlplat-match-envs", {"rlplat.envs": MATCH_ENTRIES}, {"rlplat_match_envs.py": MATCH_ENVS}
    )
    return site


def test_ppo_and_a2c_act_in_multi_discrete_and_multi_binary_envs_end_to_end(match_site, tmp_path, store):
    """One sweep, four jobs: each algorithm on each action space trains and evaluates (the
    envs refuse any action outside their space, so a wrong action format fails the job)."""
    result = cli(
        "rlplat-train",
        "-m",
        "algo=ppo,a2c",
        f"env={','.join(MATCH_ENTRIES)}",
        *TINY,
        f"tracking.uri={store}",
        cwd=tmp_path,
        env={"PYTHONPATH": str(match_site)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    jobs = {(r.data.tags["algo"], r.data.tags["env"]): r for r in runs if "algo" in r.data.tags}
    assert set(jobs) == {(algo, env) for algo in ("ppo", "a2c") for env in MATCH_ENTRIES}
    for run in jobs.values():
        assert run.info.status == "FINISHED"
        assert 0 <= run.data.metrics["eval/return_mean"] <= 8  # 8 steps, each scored in [0, 1]
        assert 0 < run.data.metrics["rollout/return_mean"] <= 8
        assert math.isfinite(run.data.metrics["loss/objective"])


@pytest.mark.parametrize(
    "env,space", [("match_multi_discrete", "MultiDiscrete([3 2])"), ("match_multi_binary", "MultiBinary(3)")]
)
def test_dqn_on_vector_actions_exits_2_naming_the_algorithms_that_can_act_there(env, space, match_site, tmp_path):
    result = cli(
        "rlplat-train", "algo=dqn", f"env={env}", "tracking.enabled=false", cwd=tmp_path,
        env={"PYTHONPATH": str(match_site)},
    )  # fmt: skip
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("rlplat-train: error: loss 'dqn' cannot act in env") and f"the env has {space}" in line
    able = line.split("Algorithms for this env: ", 1)[1].rstrip(".").split(", ")
    assert set(able) == {"a2c", "impala", "ppo", "ppo_kl", "ppo_rnd", "reinforce"}
    assert "Traceback" not in result.stderr and not (tmp_path / "outputs").exists()


def train(args: list[str], cwd: Path, store: str):
    """``rlplat-train`` with ``args``, recorded in ``store``: its MLflow run (FINISHED), its
    last ``eval/return_mean`` (at the end of training) and its run directory."""
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=cwd, env=DISPLAY)
    assert result.returncode == 0, result.stderr[-3000:]
    client, run = only_run(store)
    assert run.info.status == "FINISHED"
    final = client.get_metric_history(run.info.run_id, "eval/return_mean")[-1]
    assert final.step == int(run.data.params["trainer.total_frames"])
    return run, final.value, Path(run.data.tags["rlplat.run_dir"])


def evaluate(store: str, run, cwd: Path) -> float:
    """``rlplat-eval`` of ``run``'s final checkpoint, as many episodes as its evaluations ran:
    the evaluation run's ``eval/return_mean``."""
    client = MlflowClient(tracking_uri=store)
    episodes = run.data.params["trainer.eval_episodes"]
    result = cli("rlplat-eval", run.info.run_id, f"episodes={episodes}", f"tracking.uri={store}", cwd=cwd, env=DISPLAY)
    assert result.returncode == 0, result.stderr[-3000:]
    [evaluation] = client.search_runs([run.info.experiment_id], f"tags.`rlplat.source_run` = '{run.info.run_id}'")
    assert evaluation.info.status == "FINISHED"
    return evaluation.data.metrics["eval/return_mean"]


def resume_from_the_middle(store: str, run_dir: Path, cwd: Path):
    """``rlplat-train resume=<run dir>`` of a finished two-rollout run, from its middle
    checkpoint: the periodic checkpoint written at the end is removed first, as if the run
    had been killed before writing it. Returns the CompletedProcess."""
    middle, end = sorted((run_dir / "checkpoints").glob("step_*.pt"))
    end.unlink()
    result = cli("rlplat-train", f"resume={run_dir}", f"tracking.uri={store}", cwd=cwd, env=DISPLAY)
    assert f"from {middle} (" in result.stderr, result.stderr[-3000:]
    return result


def assert_same_weights(resumed: dict[str, torch.Tensor], uninterrupted: dict[str, torch.Tensor]) -> None:
    assert resumed.keys() == uninterrupted.keys()
    different = [k for k in resumed if not torch.equal(resumed[k], uninterrupted[k])]
    assert different == [], f"{len(different)} of {len(resumed)} tensors differ after the resume, e.g. {different[:3]}"


ONE_ROLLOUT = [*TINY, "trainer.total_frames=128"]
"""One rollout of 2 envs x 64 steps, one update, one evaluation at its end."""

TWO_ROLLOUTS = [*TINY, "checkpoint.every_frames=128"]
"""Two rollouts with a checkpoint after each: one to resume from in the middle."""


def test_cartpole_from_pixels_trains_end_to_end(tmp_path, store):
    """The issue's pixel command on a tiny budget: the frames reach the CNN as uint8 [4, 64, 64]."""
    pytest.importorskip("pygame")  # the pixels extra: CartPole renders with pygame
    run, final, run_dir = train([*PIXELS, *ONE_ROLLOUT], tmp_path, store)
    transforms = {k: v for k, v in run.data.params.items() if k.startswith("transforms.")}
    assert transforms == {
        "transforms.obs_norm": "None",
        "transforms.from_pixels": "{}",
        "transforms.grayscale": "{}",
        "transforms.resize.size": "64",
        "transforms.frame_stack.k": "4",
    }
    assert final >= 8  # a CartPole episode lasts 8 steps at least
    state = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    observation = state["collector"]["observation"]
    assert (observation.dtype, tuple(observation.shape)) == (torch.uint8, (2, 4, 64, 64))  # pixels stay uint8
    assert tuple(state["loss"]["agent.actor_torso.layers.0.weight"].shape) == (32, 4, 8, 8)  # 4 stacked frames in


@pytest.mark.slow
def test_cartpole_from_pixels_evaluation_is_reproduced_and_a_resume_ends_with_the_same_weights(tmp_path, store):
    """rlplat-eval reproduces the final evaluation; resumed from its middle checkpoint, the
    run ends with the weights of the uninterrupted run (frame stacks and envs restored)."""
    pytest.importorskip("pygame")
    run, final, run_dir = train([*PIXELS, *TWO_ROLLOUTS], tmp_path, store)
    assert evaluate(store, run, tmp_path) == final  # same weights, seeds and batch: exact
    uninterrupted = load_checkpoint(run_dir / "checkpoints" / "final.pt")["loss"]
    result = resume_from_the_middle(store, run_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(load_checkpoint(run_dir / "checkpoints" / "final.pt")["loss"], uninterrupted)


PENDULUM_PIXELS = [
    "algo=sac",
    "env=pendulum",
    "network=cnn",
    "+transforms.from_pixels={}",
    "+transforms.grayscale={}",
    "+transforms.resize={size:64}",
    "+transforms.frame_stack={k:3}",
]
"""SAC on Pendulum from its rendered frames: Box actions, image observations."""


def test_sac_learns_from_pixels_with_critics_that_encode_the_frames_first(tmp_path, store):
    """A continuous critic over images encodes the frames with the CNN, then takes the action
    (it cannot concatenate an action to a [3, 64, 64] stack); the replay keeps the frames uint8."""
    pytest.importorskip("pygame")
    overrides = [*PENDULUM_PIXELS, *TINY_OFF_POLICY, "env.max_episode_steps=40", "loss.warmup_frames=64"]
    run, final, run_dir = train(overrides, tmp_path, store)
    assert math.isfinite(final) and float(run.data.metrics["train/updates"]) > 0
    state = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    assert tuple(state["loss"]["critics.critics.0.torso.layers.0.weight"].shape) == (32, 3, 8, 8)
    features = int(run.data.params["loss.features"])
    assert tuple(state["loss"]["critics.critics.0.hidden.weight"].shape) == (features, features + 1)  # then the action
    assert state["buffer"]["storage"]["observation"].dtype == torch.uint8


SHORT_EPISODES = ["env.max_episode_steps=50"]
"""MiniGrid episodes cut at 50 env steps (DoorKey's own limit is 250), so that an untrained
policy's evaluations end soon."""


def test_minigrid_with_its_mission_trains_end_to_end(tmp_path, store):
    """Image codes stay uint8 and the tokenised mission int64 in the rollout; the multi-input
    torso reads the mission with a GRU."""
    pytest.importorskip("minigrid")
    run, final, run_dir = train([*MINIGRID_MISSION, *ONE_ROLLOUT, *SHORT_EPISODES], tmp_path, store)
    assert run.data.params["env.keys"] == "['image', 'direction', 'mission']"
    assert run.data.params["network.name"] == "multi_input"
    assert 0 <= final < 1  # DoorKey's reward: 1 - 0.9 * steps / max_steps on success, else 0
    state = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    entries = state["collector"]["observation"]["entries"]
    assert {key: (value.dtype, tuple(value.shape)) for key, value in entries.items()} == {
        "image": (torch.uint8, (2, 7, 7, 3)),
        "direction": (torch.int64, (2,)),
        "mission": (torch.int64, (2, 16)),  # token ids, padded to transforms.tokenize.max_length
    }
    assert (entries["mission"][:, 0] > 1).all()  # a known word: the vocabulary was read from the env's missions
    assert "agent.actor_torso.encoders.mission.gru.weight_ih_l0" in state["loss"]


@pytest.mark.slow
def test_minigrid_with_its_mission_evaluation_is_reproduced_and_a_resume_ends_with_the_same_weights(tmp_path, store):
    pytest.importorskip("minigrid")
    run, final, run_dir = train([*MINIGRID_MISSION, *TWO_ROLLOUTS, *SHORT_EPISODES], tmp_path, store)
    assert evaluate(store, run, tmp_path) == final
    uninterrupted = load_checkpoint(run_dir / "checkpoints" / "final.pt")["loss"]
    result = resume_from_the_middle(store, run_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(load_checkpoint(run_dir / "checkpoints" / "final.pt")["loss"], uninterrupted)


def test_cartpole_without_its_velocities_trains_on_two_entries(tmp_path, store):
    """The partially observed CartPole: mask_observation keeps cart position and pole angle, and
    obs_norm (PPO's preset) normalises the two that are left."""
    run, final, run_dir = train(
        ["algo=ppo", "env=cartpole", "+transforms.mask_observation={keep:[0,2]}", *ONE_ROLLOUT], tmp_path, store
    )
    assert run.data.params["transforms.mask_observation.keep"] == "[0, 2]" and final >= 8
    state = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    assert tuple(state["loss"]["agent.actor_torso.layers.1.weight"].shape)[1] == 2  # two entries in
    assert tuple(state["transforms"][0]["stats.mean"].shape) == (2,)
