"""time/train_s and time/to_target_s count the loop's own time, not what its callbacks take
(a tracker waiting for its store, a video being rendered)."""

from __future__ import annotations

import time

from conftest import TINY

from rlplat.build import build
from rlplat.hydra_ext import compose_config
from rlplat.trainer import Trainer


class SlowCallback:
    """Sleeps 0.5 s at each log step and evaluation, as a tracker waiting for its store might."""

    def __init__(self) -> None:
        self.slept = 0.0

    def on_log(self, metrics, frames):
        time.sleep(0.5)
        self.slept += 0.5

    def on_evaluation(self, metrics, frames):
        time.sleep(0.5)
        self.slept += 0.5

    def on_checkpoint(self, path, best):
        pass


def test_train_seconds_leave_out_the_time_callbacks_take(tmp_path):
    overrides = ["algo=ppo", "env=cartpole", "tracking.enabled=false", *TINY, "trainer.target_return=0"]
    built = build(compose_config(overrides))
    slow = SlowCallback()
    start = time.perf_counter()
    summary = Trainer(built.parts, built.trainer, tmp_path, [slow]).fit()
    elapsed = time.perf_counter() - start
    built.parts.close()
    assert slow.slept >= 1.0  # the first evaluation's log step and evaluation
    assert summary["time/train_s"] <= elapsed - slow.slept + 0.05
    assert summary["time/to_target_s"] <= summary["time/train_s"]


def test_a_callback_subclass_writes_only_the_hooks_it_needs(tmp_path):
    from rlplat.trainer import Callback

    class Evaluations(Callback):
        def __init__(self) -> None:
            self.seen: list[int] = []

        def on_evaluation(self, metrics, frames):
            self.seen.append(frames)

    built = build(compose_config(["algo=ppo", "env=cartpole", "tracking.enabled=false", *TINY]))
    evaluations = Evaluations()
    Trainer(built.parts, built.trainer, tmp_path, [evaluations]).fit()
    built.parts.close()
    assert evaluations.seen == [128, 256]  # on_log and on_checkpoint: the base's, which do nothing
