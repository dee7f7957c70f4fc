"""Extending a built-in, as researchers do, through the real CLI: a plugin distribution
registers subclasses of PPO, SAC and the MLP through entry points, and each trains through
its own code, never through rlplat.accel's paths for the exact built-ins. The runs log to
``metrics.csv`` (``tracking.also=[csv]``) without MLflow, whose recording other tests cover."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from conftest import TINY_OFF_POLICY, cli, install_distribution

PLUGIN = '''
"""Subclasses of rlplat's built-ins: each adds to or changes what the built-in computes."""
import torch
from torch import nn

from rlplat.losses.ppo import PPOLoss
from rlplat.losses.sac import SACLoss
from rlplat.networks.mlp import MLP


def squared_norm(module):
    return sum((p * p).sum() for p in module.parameters() if p.requires_grad)


class PPOWithL2(PPOLoss):
    """PPO with a heavy L2 penalty on every parameter."""

    def forward(self, batch):
        out = super().forward(batch)
        out["loss_l2"] = 10.0 * squared_norm(self)
        return out


class SACWithL2(SACLoss):
    """SAC with an L2 penalty on the actor's parameters."""

    def forward(self, batch):
        out = super().forward(batch)
        out["loss_l2"] = 1.0 * squared_norm(self.actor)
        return out


class PPOZeroGrad(PPOLoss):
    """PPO that clears its gradients after each update, as plain PyTorch code often does."""

    def after_update(self):
        super().after_update()
        self.zero_grad()


class PPOLateParameter(PPOLoss):
    """PPO that adds a layer after construction: no optimizer knows it."""

    def after_update(self):
        super().after_update()
        if not hasattr(self, "late"):
            self.late = nn.Linear(2, 2)


class ScaledMLP(MLP):
    """An MLP whose features are scaled by a learned factor, 0.5 at first."""

    def __init__(self, observation_space, out_features, **kwargs):
        super().__init__(observation_space, out_features, **kwargs)
        self.scale = nn.Parameter(torch.full((), 0.5))

    def forward(self, observation):
        return self.scale * super().forward(observation)
'''

ENTRY_POINTS = {
    "rlplat.losses": {
        "ppo_l2": "extending_probe:PPOWithL2",
        "sac_l2": "extending_probe:SACWithL2",
        "ppo_zero_grad": "extending_probe:PPOZeroGrad",
        "ppo_late": "extending_probe:PPOLateParameter",
    },
    "rlplat.networks": {"scaled_mlp": "extending_probe:ScaledMLP"},
}

PPO = ["algo=ppo", "env=cartpole", "seed=0", "trainer.total_frames=4096", "trainer.eval_every_frames=1024"]
SAC = ["algo=sac", "env=pendulum", "seed=0", *TINY_OFF_POLICY, "trainer.total_frames=512", "loss.warmup_frames=64"]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> dict[str, str]:
    """The environment of a subprocess that sees the plugin distribution as installed."""
    site = tmp_path_factory.mktemp("site")
    install_distribution(site, "extending-probe", ENTRY_POINTS, {"extending_probe.py": PLUGIN})
    return {"PYTHONPATH": str(site)}


class Run:
    """One ``rlplat-train`` run: its console, metrics and final state."""

    def __init__(self, root: Path, name: str, args: list[str], env: dict[str, str]) -> None:
        self.dir = root / name
        tracking = ["tracking.enabled=false", "tracking.also=[csv]"]
        result = cli("rlplat-train", *args, *tracking, f"hydra.run.dir={self.dir}", cwd=root, env=env)
        self.returncode, self.stdout, self.stderr = result.returncode, result.stdout, result.stderr

    def accel(self) -> str:
        """The console's ``accel:`` line."""
        [line] = [line for line in self.stdout.splitlines() if line.startswith("accel:")]
        return line

    def history(self, metric: str) -> list[float]:
        with (self.dir / "metrics.csv").open(newline="") as file:
            rows = [row for row in csv.DictReader(file) if row["metric"] == metric]
        return [float(row["value"]) for row in sorted(rows, key=lambda row: int(row["frames"]))]

    def parameters(self, prefix: str = "") -> dict[str, torch.Tensor]:
        state = torch.load(self.dir / "checkpoints" / "final.pt", weights_only=True)["loss"]
        return {k: v for k, v in state.items() if k.startswith(prefix) and v.is_floating_point() and "target" not in k}

    def squared_norm(self, prefix: str = "") -> float:
        return sum(float((v * v).sum()) for v in self.parameters(prefix).values())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, plugin) -> dict[str, Run]:
    """Every run of the module, started once (each a real CLI process)."""
    root = tmp_path_factory.mktemp("runs")
    scaled = ["buffer.epochs=1", "buffer.minibatch_size=null", "trainer.log_every_frames=0"]
    planned = {
        "ppo_autograd": [*PPO, "trainer.accel=false"],
        "ppo_l2": [*PPO, "loss.name=ppo_l2"],
        "ppo_zero_grad": [*PPO, "loss.name=ppo_zero_grad"],
        "ppo_late": [*PPO, "loss.name=ppo_late"],
        "scaled_mlp": [*PPO, "network=scaled_mlp", *scaled],
        "sac": SAC,
        "sac_l2": [*SAC, "loss.name=sac_l2"],
    }
    return {name: Run(root, name, args, plugin) for name, args in planned.items()}


def test_the_exact_builtins_take_the_accelerated_paths_and_say_so(runs):
    assert runs["sac"].returncode == 0, runs["sac"].stderr
    line = runs["sac"].accel()
    assert "update by closed-form gradients in torch, checked against autograd on the first minibatch" in line
    assert "acting by numpy" in line and "parameters flat buffers" in line
    assert runs["ppo_autograd"].accel().count("(trainer.accel=false)") == 3


@pytest.mark.parametrize(
    "name,base,prefix,subclass",
    [
        ("ppo_l2", "ppo_autograd", "", "PPOWithL2, a subclass of PPOLoss"),
        ("sac_l2", "sac", "actor.", "SACWithL2, a subclass of SACLoss"),
    ],
)
def test_a_subclass_penalty_is_logged_and_shrinks_the_parameters(runs, name, base, prefix, subclass):
    """The penalty term is computed, logged and trained on: the parameters' norm falls
    against the base class's run with the same seed."""
    run = runs[name]
    assert run.returncode == 0, run.stderr
    assert f"update by autograd (the loss is extending_probe.{subclass})" in run.accel()
    l2 = run.history("loss/l2")
    assert l2 and l2[-1] < l2[0]
    assert run.squared_norm(prefix) < 0.8 * runs[base].squared_norm(prefix)


def test_a_heavy_penalty_stops_ppo_learning_where_plain_ppo_learns(runs):
    penalised, plain = runs["ppo_l2"].history("eval/return_mean"), runs["ppo_autograd"].history("eval/return_mean")
    assert penalised[-1] < 0.5 * plain[-1]


def test_an_mlp_subclass_acts_and_trains_through_its_own_forward(runs):
    """The probability ratio of the first epoch is 1: the log-probabilities of acting and of
    training both came through the subclass's forward (its scale is 0.5 at first: acting
    through the plain MLP's would give others); its own parameter trains."""
    run = runs["scaled_mlp"]
    assert run.returncode == 0, run.stderr
    [line] = [line for line in run.stdout.splitlines() if line.startswith("accel:")]
    assert (
        "acting by the policy's own act (the actor's network is extending_probe.ScaledMLP, a subclass of MLP)" in line
    )
    ratios = run.history("train/ratio")  # one update per rollout: the first epoch's, each time
    assert ratios and all(ratio == pytest.approx(1.0, abs=1e-6) for ratio in ratios)
    scales = {k: float(v) for k, v in run.parameters("agent.").items() if k.endswith(".scale")}
    assert len(scales) == 2 and all(abs(scale - 0.5) > 1e-3 for scale in scales.values()), scales


def test_a_subclass_that_calls_zero_grad_trains_as_plain_ppo(runs):
    """``zero_grad()`` after each update, harmless in plain PyTorch, is harmless here: the same
    evaluations as PPO with the same seed, computed the same way (autograd)."""
    zero_grad, ppo = runs["ppo_zero_grad"], runs["ppo_autograd"]
    assert zero_grad.returncode == 0, zero_grad.stderr
    evaluations = zero_grad.history("eval/return_mean")
    assert len(evaluations) == 4 and evaluations == ppo.history("eval/return_mean")


def test_a_parameter_added_after_construction_fails_naming_it(runs):
    run = runs["ppo_late"]
    assert run.returncode == 1
    [line] = run.stderr.strip().splitlines()[-1:]
    assert line.startswith("rlplat-train: error: the loss's parameter late.weight was added after its optimizers")
