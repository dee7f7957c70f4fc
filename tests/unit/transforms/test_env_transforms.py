"""Env transforms (gymnasium wrappers inside each env): each against its definition and against
gymnasium's own wrapper where one exists, their state through a checkpoint, construction errors."""

from __future__ import annotations

import os
import pickle
import re

import gymnasium
import numpy as np
import pytest

from rlplat.checkpoint import FORMAT, atomic_save, load_checkpoint
from rlplat.envs.vector import env_state, load_env_state
from rlplat.registry import ConfigError, Registry
from rlplat.transforms import wrappers
from rlplat.transforms.text import Tokenize, words
from rlplat.transforms.wrappers import (
    REWARD_FUNCTIONS,
    ClipAction,
    FrameStack,
    FromPixels,
    Grayscale,
    NoopReset,
    RescaleAction,
    Resize,
    RewardShaping,
    StepCounter,
    TimeLimit,
    ToTensorImage,
)

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders CartPole's frames off screen

CARTPOLE_SPACE = gymnasium.make("CartPole-v1").observation_space
PIXELS = gymnasium.spaces.Box(0, 255, (400, 600, 3), np.uint8)


def doorkey() -> gymnasium.Env:
    """MiniGrid's DoorKey 5x5: a Dict of image [7, 7, 3] uint8, direction and mission text."""
    pytest.importorskip("minigrid")
    return gymnasium.make("MiniGrid-DoorKey-5x5-v0")


def pixels_env() -> gymnasium.Env:
    return gymnasium.make("CartPole-v1", render_mode="rgb_array")


def chain(env: gymnasium.Env, *transforms: tuple[type, dict]) -> gymnasium.Env:
    """``env`` wrapped by each transform, each built with the space of its input (as rlplat does)."""
    for cls, kwargs in transforms:
        env = cls(env.observation_space, **kwargs).wrap(env)
    return env


def rollout(env: gymnasium.Env, seed: int, steps: int) -> list:
    """The observations of a reset and ``steps`` steps of seeded random actions (reset on ends)."""
    env.action_space.seed(seed)
    observations = [env.reset(seed=seed)[0]]
    for _ in range(steps):
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        observations.append(observation)
        if terminated or truncated:
            observations.append(env.reset()[0])
    return observations


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for key in x:
                np.testing.assert_array_equal(x[key], y[key])
        else:
            np.testing.assert_array_equal(x, y)


def through_checkpoint(env: gymnasium.Env, path) -> list:
    return load_checkpoint(atomic_save({"format": FORMAT, "env": env_state(env)}, path))["env"]


# ---- from_pixels


def test_from_pixels_observes_the_rendered_frame_as_gymnasiums_add_render_observation():
    env = chain(pixels_env(), (FromPixels, {}))
    assert env.observation_space == PIXELS
    observation, _ = env.reset(seed=0)
    np.testing.assert_array_equal(observation, env.render())
    observation, *_ = env.step(1)
    np.testing.assert_array_equal(observation, env.render())
    reference = gymnasium.wrappers.AddRenderObservation(pixels_env())
    assert_same(rollout(env, 1, 12), rollout(reference, 1, 12))


def test_from_pixels_keeps_the_state_under_keys_from_yaml():
    env = chain(pixels_env(), (FromPixels, {"keep_state": True, "pixels_key": "frame", "state_key": "vector"}))
    assert set(env.observation_space.spaces) == {"frame", "vector"}
    assert env.observation_space["vector"] == CARTPOLE_SPACE
    observation, _ = env.reset(seed=2)
    np.testing.assert_array_equal(observation["vector"], gymnasium.make("CartPole-v1").reset(seed=2)[0])
    np.testing.assert_array_equal(observation["frame"], env.render())


def test_from_pixels_errors():
    dict_space = gymnasium.spaces.Dict({"pixels": PIXELS})
    with pytest.raises(ConfigError, match="transforms.from_pixels.pixels_key='pixels'.*has this key"):
        FromPixels(dict_space, keep_state=True)
    with pytest.raises(ConfigError, match="transforms.from_pixels.pixels_key='a' equals"):
        FromPixels(CARTPOLE_SPACE, keep_state=True, pixels_key="a", state_key="a")
    with pytest.raises(ConfigError, match="transforms.from_pixels needs the env made with render_mode='rgb_array'"):
        FromPixels(CARTPOLE_SPACE).wrap(gymnasium.make("CartPole-v1"))
    assert FromPixels.render_mode == "rgb_array"


# ---- to_tensor_image, resize, grayscale


def test_to_tensor_image_puts_channels_first_keeping_uint8():
    env = chain(pixels_env(), (FromPixels, {}), (ToTensorImage, {}))
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (3, 400, 600), np.uint8)
    frames = rollout(chain(pixels_env(), (FromPixels, {})), 0, 3)
    for observation, frame in zip(rollout(env, 0, 3), frames):
        assert observation.dtype == np.uint8 and observation.flags.c_contiguous
        np.testing.assert_array_equal(observation, frame.transpose(2, 0, 1))
    gray = chain(pixels_env(), (FromPixels, {}), (Grayscale, {}), (ToTensorImage, {}))
    assert gray.observation_space.shape == (1, 400, 600)


def test_to_tensor_image_on_a_dict_key():
    env = chain(doorkey(), (ToTensorImage, {"key": "image"}))
    assert env.observation_space["image"] == gymnasium.spaces.Box(0, 255, (3, 7, 7), np.uint8)
    raw = doorkey()
    for observation, original in zip(rollout(env, 0, 5), rollout(raw, 0, 5)):
        np.testing.assert_array_equal(observation["image"], original["image"].transpose(2, 0, 1))
        assert observation["direction"] == original["direction"] and observation["mission"] == original["mission"]


def test_resize_matches_gymnasiums_resize_observation_and_opencv():
    import cv2

    env = chain(pixels_env(), (FromPixels, {}), (Resize, {"size": [32, 48]}))
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (32, 48, 3), np.uint8)
    reference = gymnasium.wrappers.ResizeObservation(chain(pixels_env(), (FromPixels, {})), (32, 48))
    assert_same(rollout(env, 3, 8), rollout(reference, 3, 8))
    frame = env.unwrapped.render()
    np.testing.assert_array_equal(env.observation(frame), cv2.resize(frame, (48, 32), interpolation=cv2.INTER_AREA))
    square = chain(pixels_env(), (FromPixels, {}), (Grayscale, {}), (Resize, {"size": 64}))
    assert square.observation_space.shape == (64, 64)


def test_grayscale_matches_its_definition_and_gymnasiums_grayscale_observation():
    env = chain(pixels_env(), (FromPixels, {}), (Grayscale, {}))
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (400, 600), np.uint8)
    frames = rollout(chain(pixels_env(), (FromPixels, {})), 4, 5)
    for observation, frame in zip(rollout(env, 4, 5), frames):
        np.testing.assert_array_equal(observation, (frame @ np.array([0.2125, 0.7154, 0.0721])).astype(np.uint8))
    reference = gymnasium.wrappers.GrayscaleObservation(chain(pixels_env(), (FromPixels, {})))
    assert_same(rollout(env, 5, 5), rollout(reference, 5, 5))
    kept = chain(pixels_env(), (FromPixels, {}), (Grayscale, {"keep_dim": True}))
    assert kept.observation_space.shape == (400, 600, 1)


@pytest.mark.parametrize("cls", [ToTensorImage, Resize, Grayscale])
def test_an_image_transform_on_a_vector_observation_names_both(cls):
    name = {ToTensorImage: "to_tensor_image", Resize: "resize", Grayscale: "grayscale"}[cls]
    with pytest.raises(ConfigError, match=rf"transforms\.{name} needs .*image.*Box\(\[-4\.8"):
        cls(CARTPOLE_SPACE)


def test_image_transform_errors():
    gray = gymnasium.spaces.Box(0, 255, (84, 84), np.uint8)
    chw = gymnasium.spaces.Box(0, 255, (3, 84, 84), np.uint8)
    floats = gymnasium.spaces.Box(0.0, 1.0, (84, 84, 3), np.float32)
    minigrid = doorkey().observation_space
    with pytest.raises(ConfigError, match=r"transforms.grayscale needs RGB images.*\(84, 84\)"):
        Grayscale(gray)
    with pytest.raises(ConfigError, match="transforms.resize needs channels last.*put transforms.to_tensor_image"):
        Resize(chw)
    with pytest.raises(ConfigError, match="transforms.resize needs uint8 pixels in .0, 255., got Box"):
        Resize(floats)
    for size in (0, [84], [84, 84, 3], "84", True):
        with pytest.raises(ConfigError, match="transforms.resize.size="):
            Resize(PIXELS, size=size)
    with pytest.raises(ConfigError, match="transforms.to_tensor_image.key=None.*image keys: image"):
        ToTensorImage(minigrid)
    with pytest.raises(ConfigError, match="transforms.to_tensor_image needs an image.*at key 'direction'"):
        ToTensorImage(minigrid, key="direction")
    with pytest.raises(ConfigError, match="transforms.to_tensor_image.key='image'.*is not a Dict"):
        ToTensorImage(PIXELS, key="image")


# ---- frame_stack


def test_frame_stack_gives_k_grayscale_frames_on_a_leading_axis_as_gymnasium():
    steps = [(FromPixels, {}), (Grayscale, {}), (Resize, {"size": 64})]
    env = chain(pixels_env(), *steps, (FrameStack, {"k": 4}))
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (4, 64, 64), np.uint8)
    frames = rollout(chain(pixels_env(), *steps), 0, 6)
    stacked = rollout(env, 0, 6)
    np.testing.assert_array_equal(stacked[0], np.stack([frames[0]] * 4))  # padded with the reset frame
    for t in range(1, 7):
        window = [frames[max(i, 0)] for i in range(t - 3, t + 1)]
        np.testing.assert_array_equal(stacked[t], np.stack(window))
    reference = gymnasium.wrappers.FrameStackObservation(chain(pixels_env(), *steps), 4)
    assert_same(rollout(env, 1, 6), rollout(reference, 1, 6))
    zero = chain(gymnasium.make("CartPole-v1"), (FrameStack, {"k": 3, "padding": "zero"}))
    first = zero.reset(seed=0)[0]
    assert first.shape == (3, 4) and not first[:2].any() and first[2].any()


def test_frame_stack_state_round_trips_through_a_checkpoint(tmp_path):
    a = chain(gymnasium.make("CartPole-v1"), (FrameStack, {"k": 4}))
    actions = [0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0]
    a.reset(seed=0)
    for action in actions[:5]:
        a.step(action)
    saved = through_checkpoint(a, tmp_path / "e.pt")
    b = chain(gymnasium.make("CartPole-v1"), (FrameStack, {"k": 4}))
    b.reset(seed=7)
    load_env_state(b, saved)
    for action in actions[5:]:
        step_a, step_b = a.step(action), b.step(action)
        np.testing.assert_array_equal(step_a[0], step_b[0])  # all four frames: the stack came along


def test_frame_stack_errors():
    with pytest.raises(ConfigError, match="transforms.frame_stack.k=0"):
        FrameStack(PIXELS, k=0)
    with pytest.raises(ConfigError, match="transforms.frame_stack.padding='same': valid: reset, zero"):
        FrameStack(PIXELS, padding="same")
    with pytest.raises(ConfigError, match="transforms.frame_stack needs a Box observation, got Dict"):
        FrameStack(doorkey().observation_space)


# ---- noop_reset


def test_noop_reset_takes_one_to_noop_max_noops_from_the_envs_generator():
    env = chain(gymnasium.make("CartPole-v1"), (NoopReset, {"noop_max": 8}))
    counts = set()
    for seed in range(20):
        observation, _ = env.reset(seed=seed)
        raw = gymnasium.make("CartPole-v1")
        expected, _ = raw.reset(seed=seed)
        noops = int(raw.unwrapped.np_random.integers(1, 9))
        for _ in range(noops):
            expected = raw.step(0)[0]
        np.testing.assert_array_equal(observation, expected)
        counts.add(env.env._elapsed_steps)  # the no-ops, as counted by gymnasium.make's TimeLimit
    assert counts <= set(range(1, 9)) and len(counts) > 3


def test_noop_reset_matches_gymnasiums_atari_preprocessing_noops():
    pytest.importorskip("ale_py")
    gymnasium.register_envs(__import__("ale_py"))
    make = lambda: gymnasium.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)  # noqa: E731
    env = chain(make(), (NoopReset, {"noop_max": 30}))
    reference = gymnasium.wrappers.AtariPreprocessing(
        make(),
        noop_max=30,
        frame_skip=1,
        screen_size=(160, 210),
        grayscale_obs=False,  # (width, height): no resize
    )
    try:
        for seed in (0, 1, 2):
            np.testing.assert_array_equal(env.reset(seed=seed)[0], reference.reset(seed=seed)[0])
            assert env.unwrapped.ale.getEpisodeFrameNumber() == reference.unwrapped.ale.getEpisodeFrameNumber() > 0
    finally:
        env.close()
        reference.close()


def test_noop_reset_errors():
    with pytest.raises(ConfigError, match="transforms.noop_reset.noop_max=-1"):
        NoopReset(CARTPOLE_SPACE, noop_max=-1)
    with pytest.raises(ConfigError, match=r"transforms.noop_reset.noop_action=5 is not an action of Discrete\(2\)"):
        NoopReset(CARTPOLE_SPACE, noop_action=5).wrap(gymnasium.make("CartPole-v1"))
    pendulum = gymnasium.make("Pendulum-v1")
    env = NoopReset(pendulum.observation_space, noop_max=2, noop_action=[0.0]).wrap(pendulum)
    assert env.reset(seed=0)[0].shape == (3,)


# ---- step_counter, time_limit


def test_step_counter_counts_truncates_and_appends_the_remaining_time():
    env = chain(gymnasium.make("Pendulum-v1"), (StepCounter, {"max_steps": 4, "time_feature": True}))
    assert env.observation_space.shape == (4,) and env.observation_space.dtype == np.float32
    assert env.observation_space.low[-1] == 0.0 and env.observation_space.high[-1] == 1.0
    raw = gymnasium.make("Pendulum-v1")
    observation, _ = env.reset(seed=0)
    np.testing.assert_array_equal(observation, np.append(raw.reset(seed=0)[0], np.float32(1.0)))
    for t in range(1, 5):
        observation, reward, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
        expected, raw_reward, *_ = raw.step(np.zeros(1, np.float32))
        np.testing.assert_allclose(observation, np.append(expected, 1.0 - t / 4), rtol=0, atol=1e-7)
        assert reward == raw_reward and not terminated and truncated == (t == 4)
        assert env.step_count == t
    counting = chain(gymnasium.make("CartPole-v1"), (StepCounter, {}))
    assert counting.observation_space == CARTPOLE_SPACE
    counting.reset(seed=0)
    counting.step(0)
    assert counting.step_count == 1


def test_step_counter_truncates_as_gymnasiums_time_limit():
    def ends(env: gymnasium.Env) -> list[tuple[bool, bool]]:
        env.reset(seed=0)
        env.action_space.seed(0)
        found = []
        for _ in range(200):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            found.append((terminated, truncated))
            if terminated or truncated:
                env.reset()
        return found

    env = chain(gymnasium.make("CartPole-v1"), (StepCounter, {"max_steps": 15}))
    found = ends(env)
    assert found == ends(gymnasium.wrappers.TimeLimit(gymnasium.make("CartPole-v1"), 15))
    assert (True, False) in found and (False, True) in found  # both kinds of episode end were met


@pytest.mark.parametrize(
    ("cls", "kwargs", "attribute"),
    [(StepCounter, {"max_steps": 10, "time_feature": True}, "step_count"), (TimeLimit, {"max_episode_steps": 10}, "")],
)
def test_step_counts_round_trip_through_a_checkpoint(cls, kwargs, attribute, tmp_path):
    a = chain(gymnasium.make("Pendulum-v1"), (cls, kwargs))
    a.reset(seed=0)
    for _ in range(6):
        a.step(np.zeros(1, np.float32))
    b = chain(gymnasium.make("Pendulum-v1"), (cls, kwargs))
    b.reset(seed=1)
    load_env_state(b, through_checkpoint(a, tmp_path / "e.pt"))
    for _ in range(4):
        step_a, step_b = a.step(np.ones(1, np.float32)), b.step(np.ones(1, np.float32))
        np.testing.assert_array_equal(step_a[0], step_b[0])
        assert step_a[3] == step_b[3]
    assert step_b[3]  # truncated at the 10th step, counting the 6 before the checkpoint
    if attribute:
        assert getattr(b, attribute) == 10


def test_time_limit_is_gymnasiums():
    env = chain(gymnasium.make("CartPole-v1"), (TimeLimit, {"max_episode_steps": 5}))
    assert isinstance(env, gymnasium.wrappers.TimeLimit)
    env.reset(seed=0)
    assert [env.step(0)[3] for _ in range(5)] == [False] * 4 + [True]


def test_step_counter_and_time_limit_errors():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="transforms.step_counter.max_steps="):
            StepCounter(CARTPOLE_SPACE, max_steps=bad)
        with pytest.raises(ConfigError, match="transforms.time_limit.max_episode_steps="):
            TimeLimit(CARTPOLE_SPACE, max_episode_steps=bad)
    with pytest.raises(ConfigError, match="time_feature=true needs transforms.step_counter.max_steps"):
        StepCounter(CARTPOLE_SPACE, time_feature=True)
    with pytest.raises(ConfigError, match=r"time_feature=true needs a flat float Box observation, got Box\(0, 255"):
        StepCounter(PIXELS, max_steps=10, time_feature=True)


# ---- clip_action, rescale_action


def test_clip_action_clips_to_the_envs_bounds_as_gymnasium():
    env = chain(gymnasium.make("Pendulum-v1"), (ClipAction, {}))
    assert isinstance(env, gymnasium.wrappers.ClipAction)
    assert np.isinf(env.action_space.high).all()
    raw = gymnasium.make("Pendulum-v1")
    env.reset(seed=0)
    raw.reset(seed=0)
    for action in (5.0, -7.0, 0.5):
        np.testing.assert_array_equal(
            env.step(np.array([action], np.float32))[0], raw.step(np.array([np.clip(action, -2, 2)], np.float32))[0]
        )


def test_rescale_action_maps_its_bounds_onto_the_envs():
    env = chain(gymnasium.make("Pendulum-v1"), (RescaleAction, {"min_action": -1.0, "max_action": 1.0}))
    assert env.action_space == gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    raw = gymnasium.make("Pendulum-v1")
    env.reset(seed=0)
    raw.reset(seed=0)
    for action, env_action in ((0.5, 1.0), (-1.0, -2.0), (0.0, 0.0)):
        np.testing.assert_allclose(
            env.step(np.array([action], np.float32))[0], raw.step(np.array([env_action], np.float32))[0], atol=1e-6
        )


def test_action_transform_errors():
    cartpole = gymnasium.make("CartPole-v1")
    with pytest.raises(ConfigError, match=r"transforms.clip_action needs a Box .* action space, got Discrete\(2\)"):
        ClipAction(CARTPOLE_SPACE).wrap(cartpole)
    with pytest.raises(ConfigError, match=r"transforms.rescale_action needs a Box .* action space, got Discrete"):
        RescaleAction(CARTPOLE_SPACE).wrap(cartpole)
    with pytest.raises(ConfigError, match="transforms.rescale_action.min_action=1.0 must be below max_action=1.0"):
        RescaleAction(CARTPOLE_SPACE, min_action=1.0, max_action=1.0)
    pendulum = gymnasium.make("Pendulum-v1")
    with pytest.raises(ConfigError, match="one bound or one per dim of Box"):
        RescaleAction(pendulum.observation_space, min_action=[-1, -1], max_action=[1, 1]).wrap(pendulum)


# ---- reward_shaping

SHAPING_MODULE = """
import numpy as np

def upright_bonus(obs, action, reward, terminated):
    return reward + (0.0 if terminated else 1.0 - abs(float(obs[2])))

minus_one = lambda obs, action, reward, terminated: reward - 1.0

def two_arguments(obs, reward):
    return reward
"""


@pytest.fixture
def shaping_module(tmp_path, monkeypatch):
    (tmp_path / "shaping_functions.py").write_text(SHAPING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "shaping_functions"


def test_reward_shaping_applies_an_importable_function_per_step(shaping_module):
    transform = RewardShaping(CARTPOLE_SPACE, function=f"{shaping_module}:upright_bonus")
    env = transform.wrap(gymnasium.make("CartPole-v1"))
    raw = gymnasium.make("CartPole-v1")
    env.reset(seed=0)
    raw.reset(seed=0)
    for action in (0, 1, 1, 0):
        observation, reward, terminated, *_ = env.step(action)
        expected, raw_reward, *_ = raw.step(action)
        np.testing.assert_array_equal(observation, expected)
        assert reward == pytest.approx(raw_reward + 1.0 - abs(float(expected[2])))
    # a lambda does not pickle; the transform does, finding its function again by the path
    copy = pickle.loads(pickle.dumps(RewardShaping(CARTPOLE_SPACE, function=f"{shaping_module}:minus_one")))
    shaped = copy.wrap(gymnasium.make("CartPole-v1"))
    shaped.reset(seed=0)
    assert shaped.step(0)[1] == 0.0


def test_reward_shaping_by_a_registered_name(monkeypatch):
    registry = Registry("reward function", "rlplat.reward_functions")
    monkeypatch.setattr(wrappers, "REWARD_FUNCTIONS", registry)
    registry.register("doubled")(lambda obs, action, reward, terminated: 2.0 * reward)
    env = RewardShaping(CARTPOLE_SPACE, function="doubled").wrap(gymnasium.make("CartPole-v1"))
    env.reset(seed=0)
    assert env.step(0)[1] == 2.0
    assert REWARD_FUNCTIONS.group == "rlplat.reward_functions"


def test_reward_shaping_by_a_plugins_entry_point(tmp_path, monkeypatch):
    from conftest import install_distribution

    install_distribution(
        tmp_path,
        "shaping-plugin",
        {"rlplat.reward_functions": {"halved": "shaping_plugin:halved"}},
        {"shaping_plugin.py": "def halved(obs, action, reward, terminated):\n    return reward / 2\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(wrappers, "REWARD_FUNCTIONS", Registry("reward function", "rlplat.reward_functions"))
    env = RewardShaping(CARTPOLE_SPACE, function="halved").wrap(gymnasium.make("CartPole-v1"))
    env.reset(seed=0)
    assert env.step(0)[1] == 0.5


@pytest.mark.parametrize(
    ("function", "needle"),
    [
        ("no_such_module_here:f", "module 'no_such_module_here' does not import"),
        ("shaping_functions:missing", "module 'shaping_functions' has no 'missing'"),
        ("shaping_functions:two_arguments", r"cannot be called as f\(obs, action, reward, terminated\)"),
        ("no_such_name", "is not known. Valid:"),
        ("", "give 'module:function' or a registered reward function's name"),
    ],
)
def test_a_bad_reward_function_names_the_key(function, needle, shaping_module):
    with pytest.raises(ConfigError, match=rf"transforms\.reward_shaping\.function.*{needle}"):
        RewardShaping(CARTPOLE_SPACE, function=function)


# ---- tokenize

MISSION = "use the key to open the door and then get to the goal"


def test_tokenize_maps_words_to_ids_after_padding_and_unknown():
    vocabulary = ["use", "the", "key", "door", "goal"]
    env = chain(doorkey(), (Tokenize, {"vocabulary": vocabulary, "max_length": 14}))
    assert env.observation_space["mission"] == gymnasium.spaces.Box(0, 6, (14,), np.int64)
    assert env.observation_space["image"] == doorkey().observation_space["image"]
    observation, _ = env.reset(seed=0)
    ids = {word: i + 2 for i, word in enumerate(vocabulary)}
    expected = [ids.get(word, 1) for word in MISSION.split()] + [0]  # 13 words, one padding
    np.testing.assert_array_equal(observation["mission"], expected)
    assert observation["mission"].dtype == np.int64 and observation["mission"] in env.observation_space["mission"]
    cut = Tokenize(doorkey().observation_space, vocabulary=vocabulary, max_length=3)
    np.testing.assert_array_equal(cut.tokens("Use THE, key!"), [2, 3, 4])
    np.testing.assert_array_equal(cut.tokens("the  rock"), [3, 1, 0])
    assert words("Go to the red-ball, 2x") == ["go", "to", "the", "red", "ball", "x"]


def test_tokenize_reads_the_words_of_a_mission_space_without_a_vocabulary():
    doorkey()
    fetch = gymnasium.make("MiniGrid-Fetch-5x5-N2-v0").observation_space
    vocabulary = Tokenize(fetch).vocabulary
    assert vocabulary == sorted(vocabulary) and {"fetch", "purple", "ball", "must"} <= set(vocabulary)
    env = chain(doorkey(), (Tokenize, {}))
    assert 1 not in env.reset(seed=0)[0]["mission"]  # every word known


def test_tokenize_errors():
    minigrid = doorkey().observation_space
    with pytest.raises(ConfigError, match=r"transforms.tokenize.key='mission': needs a Dict .*got Box\(\[-4.8"):
        Tokenize(CARTPOLE_SPACE)
    with pytest.raises(ConfigError, match="transforms.tokenize.key='goal'"):
        Tokenize(minigrid, key="goal")
    with pytest.raises(ConfigError, match=r"transforms.tokenize.key='image': the entry Box\(0, 255.* is not text"):
        Tokenize(minigrid, key="image")
    with pytest.raises(ConfigError, match="transforms.tokenize.max_length=0"):
        Tokenize(minigrid, max_length=0)
    with pytest.raises(ConfigError, match=r"transforms.tokenize.vocabulary: \['the'\] appear more than once"):
        Tokenize(minigrid, vocabulary=["the", "key", "The"])
    with pytest.raises(ConfigError, match=r"transforms.tokenize.vocabulary: \['red-ball'\] are not words"):
        Tokenize(minigrid, vocabulary=["red-ball"])
    with pytest.raises(ConfigError, match="transforms.tokenize.vocabulary is required for the text entry Text"):
        Tokenize(gymnasium.spaces.Dict({"mission": gymnasium.spaces.Text(20)}))


# ---- every transform


def all_transforms() -> list:
    return [
        FromPixels(CARTPOLE_SPACE, keep_state=True),
        ToTensorImage(PIXELS),
        Resize(PIXELS, size=32),
        Grayscale(PIXELS),
        FrameStack(PIXELS),
        NoopReset(CARTPOLE_SPACE),
        StepCounter(CARTPOLE_SPACE, max_steps=5, time_feature=True),
        TimeLimit(CARTPOLE_SPACE, 5),
        ClipAction(CARTPOLE_SPACE),
        RescaleAction(CARTPOLE_SPACE),
        Tokenize(gymnasium.spaces.Dict({"mission": gymnasium.spaces.Text(40)}), vocabulary=["go", "to"]),
    ]


@pytest.mark.parametrize("transform", all_transforms(), ids=lambda t: type(t).__name__)
def test_every_transform_pickles(transform):
    copy = pickle.loads(pickle.dumps(transform))
    assert type(copy) is type(transform) and vars(copy).keys() == vars(transform).keys()


def test_pixels_through_async_vector_envs():
    """Each subprocess unpickles the transforms and wraps its env (collector.vectorization=async)."""
    from rlplat.envs.vector import VectorEnv

    probe, transforms = pixels_env(), []
    for cls, kwargs in ((FromPixels, {}), (Grayscale, {}), (Resize, {"size": 32}), (FrameStack, {"k": 2})):
        transforms.append(cls(probe.observation_space, **kwargs))
        probe = transforms[-1].wrap(probe)
    envs = VectorEnv(pixels_env, 2, transforms, vectorization="async")
    try:
        observation = envs.reset(seed=0)
        assert tuple(observation.shape) == (2, 2, 32, 32) and str(observation.dtype) == "torch.uint8"
    finally:
        envs.close()


def test_mask_observation_keeps_the_chosen_entries_in_order():
    from rlplat.transforms.wrappers import MaskObservation

    env = gymnasium.make("CartPole-v1")
    mask = MaskObservation(env.observation_space, keep=[2, 0])
    masked = mask.wrap(gymnasium.make("CartPole-v1"))
    assert masked.observation_space == gymnasium.spaces.Box(
        env.observation_space.low[[2, 0]], env.observation_space.high[[2, 0]], dtype=np.float32
    )
    full, _ = env.reset(seed=4)
    observation, _ = masked.reset(seed=4)
    np.testing.assert_array_equal(observation, full[[2, 0]])
    for _ in range(5):
        full = env.step(1)[0]
        np.testing.assert_array_equal(masked.step(1)[0], full[[2, 0]])


@pytest.mark.parametrize(
    ("space", "keep", "needle"),
    [
        (gymnasium.spaces.Box(0, 255, (4, 4), np.uint8), [0], "needs a vector observation"),
        (gymnasium.spaces.Box(-1, 1, (4,)), [0, 4], "keep=[0, 4]: must be distinct indices in [0, 4)"),
        (gymnasium.spaces.Box(-1, 1, (4,)), [1, 1], "keep=[1, 1]: must be distinct"),
        (gymnasium.spaces.Box(-1, 1, (4,)), [], "keep=[]: must be distinct"),
    ],
)
def test_mask_observation_errors_name_the_key(space, keep, needle):
    from rlplat.transforms.wrappers import MaskObservation

    with pytest.raises(ConfigError, match=re.escape(needle)):
        MaskObservation(space, keep=keep)
