"""Contracts: every preset and registered entry builds from its config and runs; config checks."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY, make_trainer, tiny

from rlplat.hydra_ext import yaml_options
from rlplat.registry import ConfigError

PAIRS = [(algo, env) for algo in sorted(yaml_options("algo")) for env in sorted(yaml_options("env"))]


@pytest.mark.parametrize("algo,env", PAIRS)
def test_every_algo_env_preset_builds_and_runs_updates_or_names_the_mismatch(algo, env, tmp_path):
    try:
        # impala's preset collects in worker processes (collector=async); rollouts are drawn here
        # from the synchronous collector (tests/integration/test_cli.py runs every preset as it is)
        in_process = ["collector=sync"] if algo == "impala" else []
        trainer = make_trainer(
            [f"algo={algo}", f"env={env}", "tracking.enabled=false", *tiny(algo), *in_process], tmp_path
        )
    except ConfigError as error:  # an algorithm that cannot act in the env's action space
        assert f"loss {algo!r} cannot act in env" in str(error) and "Algorithms for this env:" in str(error)
        return
    parts = trainer.parts
    for _ in range(64 // parts.collector.frames_per_batch + 1):
        rollout = parts.loss.preprocess(parts.collector.rollout())
        parts.buffer.extend(rollout)
    outputs = [trainer._update(batch, frames=0) for batch in parts.buffer.batches()]
    assert outputs
    for losses in outputs:
        assert all(math.isfinite(v.item()) for v in losses.values())
    parts.close()


@pytest.mark.parametrize(
    "override,needle",
    [
        ("trainer.total_frames=-5", "trainer.total_frames=-5: must be an integer >= 1"),
        ("trainer.device=tpu", "trainer.device='tpu': valid: cpu, cuda, auto"),
        ("trainer.totl_frames=5", "Did you mean 'total_frames'"),
        ("network.hiden_sizes=[8]", "Did you mean 'hidden_sizes'"),
        ("buffer.minibatch_size=100000", "buffer.minibatch_size=100000: must be in [1, 2048]"),
        ("env.id=NoSuchEnv-v0", "env.id='NoSuchEnv-v0'"),
    ],
)
def test_bad_values_raise_config_errors_naming_the_key(override, needle, tmp_path):
    with pytest.raises(ConfigError) as error:
        make_trainer(["tracking.enabled=false", override], tmp_path)
    assert needle in str(error.value)


def test_same_seed_same_run(tmp_path):
    def run():
        trainer = make_trainer(["env=cartpole", "seed=7", "tracking.enabled=false", *TINY], tmp_path)
        metrics = trainer.fit()
        trainer.parts.close()
        return metrics, [p.detach().clone() for p in trainer.parts.loss.parameters()]

    (metrics_a, params_a), (metrics_b, params_b) = run(), run()
    assert metrics_a["eval/return_mean"] == metrics_b["eval/return_mean"]
    for a, b in zip(params_a, params_b):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_checkpoint_holds_every_piece_of_state(tmp_path):
    trainer = make_trainer(["tracking.enabled=false", *TINY], tmp_path)
    trainer.fit()
    trainer.parts.close()
    state = torch.load(tmp_path / "checkpoints" / "final.pt", weights_only=True)  # plain data and tensors only
    assert set(state) >= {"loss", "optimizers", "transforms", "collector", "buffer", "rng", "trainer", "config"}
    assert state["collector"]["frames"] == 256
    assert "stats.mean" in state["transforms"][0]
    assert (tmp_path / "checkpoints" / "best.pt").exists()


@pytest.mark.parametrize("threads", [1, 2])
def test_numpy_blas_runs_on_the_trainers_threads(threads, tmp_path):
    """Policies act in numpy on the CPU: its BLAS pool gets trainer.num_threads, as torch does."""
    from threadpoolctl import threadpool_info

    trainer = make_trainer(["env=cartpole", "tracking.enabled=false", f"trainer.num_threads={threads}"], tmp_path)
    try:
        blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
        assert blas and all(pool["num_threads"] == threads for pool in blas)
        assert torch.get_num_threads() == threads
    finally:
        trainer.parts.close()
        torch.set_num_threads(1)


@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_continuous_critics_over_frames_encode_them_before_the_action(algo, tmp_path):
    """TD3 and DDPG on Pendulum's rendered frames (SAC runs through the CLI): critics are
    EncodedCritic over the CNN, and updates run finite."""
    pytest.importorskip("pygame")
    from conftest import TINY_OFF_POLICY

    from rlplat.networks.q import EncodedCritic

    pixels = ["network=cnn", "+transforms.from_pixels={}", "+transforms.grayscale={}", "+transforms.resize={size:48}"]
    overrides = [f"algo={algo}", "env=pendulum", *pixels, "+transforms.frame_stack={k:2}", "tracking.enabled=false"]
    trainer = make_trainer(
        [*overrides, *TINY_OFF_POLICY, "buffer.learning_starts=16", "loss.warmup_frames=16"], tmp_path
    )
    parts = trainer.parts
    try:
        assert all(isinstance(critic, EncodedCritic) for critic in parts.loss.critics.critics)
        for _ in range(4):
            parts.buffer.extend(parts.loss.preprocess(parts.collector.rollout()))
        outputs = [trainer._update(batch, frames=0) for batch in parts.buffer.batches()]
        assert outputs and all(math.isfinite(v.item()) for losses in outputs for v in losses.values())
    finally:
        parts.close()


def test_a_loss_defining_an_optional_member_without_loss_module_is_refused_when_built():
    """rlplat reads in_keys, delayed_groups ... from a LossModule only: one defined on another
    class would be ignored, so it is refused, naming the member and the base class."""
    from torch import nn

    from rlplat.build import check_declared
    from rlplat.losses.base import LossModule
    from rlplat.losses.td3 import TD3Loss
    from rlplat.registry import PluginError

    class Delayed(nn.Module):
        delayed_groups = ("actor",)

    class Declared(LossModule):
        delayed_groups = ("actor",)

    with pytest.raises(PluginError, match=r"loss 'mine': Delayed defines delayed_groups without subclassing "):
        check_declared("mine", Delayed)
    check_declared("mine", Declared)
    check_declared("mine", nn.Module())  # defines none: read with the defaults
    check_declared("td3", TD3Loss)
