"""A non-finite loss in an update: trainer.nonfinite=raise stops with a message naming the
term; skip_update skips the optimizer step and counts it."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import TINY, make_trainer

from rlplat.trainer import NonFiniteError, Trainer


def _trainer_with_a_nan_critic(tmp_path, overrides: list[str]) -> Trainer:
    trainer = make_trainer(["algo=ppo", "env=pendulum", "tracking.enabled=false", *TINY, *overrides], tmp_path)
    parts = trainer.parts
    trainer._buffer(parts.collector.rollout())
    with torch.no_grad():
        parts.loss.agent.value_head.bias.fill_(float("nan"))  # V(s) and so the critic loss are NaN
    return trainer


@pytest.mark.parametrize("accel", ["true", "false"])
def test_a_nan_loss_raises_naming_the_term(tmp_path, accel):
    trainer = _trainer_with_a_nan_critic(tmp_path, [f"trainer.accel={accel}"])
    batch = next(iter(trainer.parts.buffer.batches()))
    with pytest.raises(NonFiniteError, match=r"non-finite loss \(loss_critic\) at 7 frames"):
        trainer._update(batch, frames=7)
    trainer.parts.close()


@pytest.mark.parametrize("accel", ["true", "false"])
def test_a_nan_loss_with_skip_update_leaves_the_parameters_and_counts_the_skip(tmp_path, accel):
    overrides = [f"trainer.accel={accel}", "trainer.nonfinite=skip_update"]
    trainer = _trainer_with_a_nan_critic(tmp_path, overrides)
    loss = trainer.parts.loss
    before = [p.detach().clone() for p in loss.agent.head.parameters()]
    batches = list(trainer.parts.buffer.batches())
    assert len(batches) > 1 and all(trainer._update(batch, frames=7) is None for batch in batches)
    assert trainer.progress.skipped_updates == len(batches)
    for kept, parameter in zip(before, loss.agent.head.parameters()):
        assert torch.equal(kept, parameter)  # no optimizer step, though the policy's own gradients are finite
    trainer.parts.close()


@pytest.mark.parametrize(
    "key,value,named",
    [
        ("observation", float("nan"), "observation (observation)"),
        (("next", "observation"), float("-inf"), "next observation (next.observation)"),
        (("next", "reward"), float("inf"), "reward (next.reward)"),
    ],
)
def test_a_non_finite_rollout_is_named_by_its_key(tmp_path, key, value, named):
    trainer = make_trainer(["algo=ppo", "env=pendulum", "tracking.enabled=false", *TINY], tmp_path)
    rollout = trainer.parts.collector.rollout().clone()  # out of inference mode, to be written
    rollout.get(key)[1, 0] = value
    with pytest.raises(NonFiniteError, match=re.escape(f"non-finite {named} in the rollout at 5 frames")):
        trainer._finite_rollout(rollout, frames=5)
    trainer.parts.close()


def test_finite_values_whose_sum_overflows_pass_the_rollout_check(tmp_path):
    trainer = make_trainer(["algo=ppo", "env=pendulum", "tracking.enabled=false", *TINY], tmp_path)
    rollout = trainer.parts.collector.rollout().clone()
    rollout.get("observation").fill_(3e38)  # float32's largest is 3.4e38: the sums overflow to inf
    assert trainer._finite_rollout(rollout, frames=5)
    trainer.parts.close()


class Logged:
    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, metrics, frames):
        self.logs.append(dict(metrics))

    def on_evaluation(self, metrics, frames):
        pass

    def on_checkpoint(self, path, best):
        pass


def test_a_run_whose_every_rollout_is_skipped_still_logs_evaluates_and_counts_them(tmp_path):
    from rlplat.build import build
    from rlplat.hydra_ext import compose_config

    overrides = ["algo=ppo", "env=pendulum", "tracking.enabled=false", *TINY, "trainer.nonfinite=skip_update"]
    built = build(compose_config(overrides))
    collector, logged = built.parts.collector, Logged()
    collect = collector.rollout

    def nan_rewards():
        rollout = collect().clone()  # out of inference mode, to be written
        rollout.get(("next", "reward")).fill_(float("nan"))
        return rollout

    collector.rollout = nan_rewards
    summary = Trainer(built.parts, built.trainer, tmp_path, [logged]).fit()
    built.parts.close()
    rollouts = 256 // 128
    assert logged.logs and logged.logs[-1]["train/skipped_updates"] == rollouts
    assert "eval/return_mean" in logged.logs[-1] and summary["eval/return_mean"] == logged.logs[-1]["eval/return_mean"]
