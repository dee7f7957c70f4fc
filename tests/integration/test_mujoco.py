"""Every MuJoCo preset (PPO, SAC and TD3 on Hopper, HalfCheetah, Walker2d and
InvertedPendulum, gymnasium's v5 ids) end to end through the real command line, on budgets of
about two thousand frames: one multirun per algorithm shares the start-up over its four envs."""

from __future__ import annotations

import pytest
import yaml
from conftest import cli

pytest.importorskip("mujoco", reason="the MuJoCo presets need pip install 'rlplat[mujoco]'")

pytestmark = pytest.mark.slow

ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5",
        "inverted_pendulum": "InvertedPendulum-v5"}  # fmt: skip

SHORT = {
    "ppo": ["trainer.total_frames=2048", "trainer.eval_every_frames=1024"],
    "sac": ["trainer.total_frames=2000", "trainer.eval_every_frames=1000", "buffer.learning_starts=1500",
            "loss.warmup_frames=1500"],
    "td3": ["trainer.total_frames=2000", "trainer.eval_every_frames=1000", "buffer.learning_starts=1500",
            "loss.warmup_frames=1500"],
}  # fmt: skip
"""Per algorithm: two evaluations; the off-policy presets' 5,000 to 25,000 frames of random
actions cut to 1,500, so that 500 updates run."""


@pytest.mark.parametrize("algo", ["ppo", "sac", "td3"])
def test_every_mujoco_preset_trains_and_evaluates(algo, tmp_path):
    result = cli(
        "rlplat-train", "-m", f"algo={algo}", f"env={','.join(ENVS)}", *SHORT[algo], "trainer.eval_episodes=2",
        "tracking.enabled=false", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout.count("eval @") == 2 * len(ENVS), result.stdout
    for job, (env, env_id) in enumerate(ENVS.items()):
        run = tmp_path / "sweep" / str(job)
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        choices = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())["hydra"]["runtime"]["choices"]
        assert config["env"]["id"] == env_id
        assert choices["tuned"] == f"{algo}_{env}"  # the pair's preset from conf/tuned/ applied
        assert (run / "checkpoints" / "final.pt").is_file(), sorted(p.name for p in run.iterdir())
