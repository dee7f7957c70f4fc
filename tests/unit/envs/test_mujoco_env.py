"""The MuJoCo env presets' ids through the gym env entry, and the message when the mujoco
package is missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import gymnasium
import pytest

from rlplat.envs.gym import dependency_message, make_gym

# What `import mujoco` does where the package is not installed: Python raises ImportError for
# a name whose sys.modules entry is None (the import system's documented way to block a
# module). gymnasium's MuJoCo module then raises its own DependencyNotInstalled.
WITHOUT_MUJOCO = textwrap.dedent(
    """
    import sys
    sys.modules["mujoco"] = None
    from rlplat.envs.gym import make_gym
    from rlplat.registry import ConfigError
    try:
        make_gym("Hopper-v5")
    except ConfigError as error:
        print(error)
    """
)


def test_a_missing_mujoco_package_names_rlplats_extra():
    result = subprocess.run([sys.executable, "-c", WITHOUT_MUJOCO], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    message = result.stdout.strip()
    assert message.startswith("env.id='Hopper-v5' needs the mujoco package: pip install 'rlplat[mujoco]'"), message
    assert "MuJoCo is not installed" in message  # gymnasium's own words kept after it


def test_a_missing_package_without_an_extra_keeps_gymnasiums_message():
    if importlib.util.find_spec("Box2D") is not None:
        pytest.skip("Box2D is installed here: LunarLander makes no error")
    with pytest.raises(gymnasium.error.DependencyNotInstalled) as error:
        gymnasium.make("LunarLander-v3")
    assert dependency_message("LunarLander-v3", error.value) == f"env.id='LunarLander-v3': {error.value}"
    assert "rlplat[" not in dependency_message("LunarLander-v3", error.value)


@pytest.mark.parametrize(
    ("env_id", "observation_dims", "action_dims"),
    [("Hopper-v5", 11, 3), ("HalfCheetah-v5", 17, 6), ("Walker2d-v5", 17, 6), ("InvertedPendulum-v5", 4, 1)],
)
def test_the_presets_ids_make_box_envs_of_1000_steps(env_id, observation_dims, action_dims):
    pytest.importorskip("mujoco")
    env = make_gym(env_id)
    try:
        assert env.observation_space.shape == (observation_dims,)
        assert env.action_space.shape == (action_dims,)
        assert env.spec.max_episode_steps == 1000
    finally:
        env.close()
