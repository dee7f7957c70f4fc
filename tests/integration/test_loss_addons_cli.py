"""Loss add-ons through the real ``rlplat-train``: ``loss.addons.kl_to_reference`` pointing at
a run recorded in the same MLflow store, its term read back from that store.

The slow test is the feature's promise: with the add-on, a new run's policy stays measurably
closer to the reference than the same run without it (the add-on at ``coef: 0``, which logs
the same KL without training on it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import TINY, cli
from mlflow import MlflowClient

from rlplat.tags import RUN_DIR_TAG

CARTPOLE = ["algo=ppo", "env=cartpole", "transforms.obs_norm=null", "trainer.eval_episodes=2"]
"""PPO on CartPole (its tuned preset) without running observation statistics, which a
reference run and the runs compared with it may not have (their observations would differ)."""


def train(tmp_path: Path, store: str, name: str, *overrides: str) -> str:
    """``rlplat-train`` one run named ``name`` into ``store``; returns its run id."""
    named = [f"tracking.uri={store}", f"tracking.run_name={name}"]
    result = cli("rlplat-train", *CARTPOLE, *overrides, *named, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs(
        [client.get_experiment_by_name("rlplat").experiment_id], filter_string=f"attributes.run_name = '{name}'"
    )
    return run.info.run_id


def history(store: str, run_id: str, key: str) -> list[float]:
    """The values a run logged for ``key``, in order of frames."""
    metrics = MlflowClient(tracking_uri=store).get_metric_history(run_id, key)
    return [m.value for m in sorted(metrics, key=lambda m: m.step)]


def kl_to_reference(source: str, coef: float) -> str:
    return f"loss.addons={{kl_to_reference:{{source:{source},coef:{coef}}}}}"


def test_a_run_id_as_source_logs_the_kl_and_its_term(tmp_path, store):
    reference = train(tmp_path, store, "reference", *TINY)
    run = train(tmp_path, store, "with_addon", *TINY, "seed=1", kl_to_reference(reference, 0))
    kl = history(store, run, "train/kl_to_reference")
    assert kl and all(value > 0 for value in kl)  # another seed's policy: not the reference
    assert history(store, run, "loss/kl_to_reference") == [0.0] * len(kl)  # coef 0: logged, not trained on
    params = MlflowClient(tracking_uri=store).get_run(run).data.params
    assert params["loss.addons.kl_to_reference.source"] == reference


@pytest.mark.slow
def test_kl_to_reference_keeps_a_new_run_closer_to_the_reference_run(tmp_path, store):
    """A reference run trained 4096 frames (seed 0); then two runs from seed 1, trained twice
    as long, one with the add-on at coef 1 and one at coef 0 (same draws: loading the
    reference changes no random state). The KL to the reference that each logged, over the
    second half of its training: lower with the add-on.

    Measured when written: last-half mean 0.011 nats with the add-on, 0.024 without."""
    reference = train(tmp_path, store, "reference", "trainer.total_frames=4096", "trainer.eval_every_frames=0")
    longer = ["seed=1", "trainer.total_frames=8192", "trainer.eval_every_frames=0"]
    pulled = train(tmp_path, store, "pulled", *longer, kl_to_reference(reference, 1.0))
    free = train(tmp_path, store, "free", *longer, kl_to_reference(reference, 0))

    def last_half_mean(run_id: str) -> float:
        kl = history(store, run_id, "train/kl_to_reference")
        assert len(kl) >= 4, kl
        half = kl[len(kl) // 2 :]
        return sum(half) / len(half)

    with_addon, without = last_half_mean(pulled), last_half_mean(free)
    print(f"KL to the reference over the last half: {with_addon:.4f} nats with the add-on, {without:.4f} without")
    assert with_addon < 0.7 * without
    assert history(store, pulled, "loss/kl_to_reference")[-1] > 0  # trained on: coef * KL

    # evaluation needs the policy alone: the reference run may be gone
    client = MlflowClient(tracking_uri=store)
    shutil.rmtree(client.get_run(reference).data.tags[RUN_DIR_TAG])
    result = cli("rlplat-eval", pulled, "episodes=2", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
