"""PPO's closed-form gradients (rlplat.accel.ppo) against autograd's, and when they apply."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from conftest import DEVICES, TINY, make_trainer
from tensordict import TensorDict

from rlplat import keys
from rlplat.accel import Acceleration, CheckedGradients
from rlplat.accel.ppo import NumpyPPOGradients, PPOGradients
from rlplat.losses.ppo import PPOLoss
from rlplat.networks.mlp import MLP
from rlplat.trainer import Autograd, Trainer

OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE = gymnasium.spaces.Discrete(3)


def make_loss(action_space: gymnasium.Space, activation: str = "tanh", **kwargs) -> PPOLoss:
    def network(out_features: int) -> MLP:
        return MLP(OBS, out_features, hidden_sizes=[16], activation=activation)

    torch.manual_seed(0)
    loss = PPOLoss(OBS, action_space, network, features=8, **kwargs)
    with torch.no_grad():  # away from the initial near-zero policy layer, so that every term matters
        for parameter in loss.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return loss


def make_batch(loss: PPOLoss, action_space: gymnasium.Space, n: int = 32) -> TensorDict:
    generator = torch.Generator().manual_seed(1)
    if isinstance(action_space, gymnasium.spaces.Discrete):
        action = torch.randint(0, int(action_space.n), (n,), generator=generator)
    else:
        action = torch.randn(n, action_space.shape[0], generator=generator)
    observation = torch.randn(n, 3, generator=generator)
    with torch.no_grad():
        log_prob, _ = loss.agent.log_prob_entropy(observation, action)
    return TensorDict(
        {
            keys.OBSERVATION: observation,
            keys.ACTION: action,
            # old log-probs near the new ones, some ratios inside the clip range, some outside
            keys.ACTION_LOG_PROB: log_prob + 0.3 * torch.randn(n, generator=generator),
            keys.ADVANTAGE: torch.randn(n, 1, generator=generator),
            keys.VALUE_TARGET: torch.randn(n, 1, generator=generator),
            keys.STATE_VALUE: torch.randn(n, 1, generator=generator),
        },
        batch_size=[n],
    )


def autograd_gradients(loss: PPOLoss, batch: TensorDict) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    loss.zero_grad(set_to_none=True)
    output = loss(batch)
    sum(v for k, v in output.items() if k.startswith(keys.LOSS_PREFIX)).backward()
    return output.detach(), {name: p.grad.clone() for name, p in loss.named_parameters()}


CASES = [
    pytest.param(BOX, "tanh", {}, id="gaussian"),
    pytest.param(DISCRETE, "tanh", {}, id="categorical"),
    pytest.param(BOX, "tanh", {"entropy_coef": 0.05, "value_clip": 0.2}, id="gaussian-entropy-value-clip"),
    pytest.param(DISCRETE, "tanh", {"entropy_coef": 0.05, "value_clip": 0.2}, id="categorical-entropy-value-clip"),
    pytest.param(BOX, "relu", {"normalize_advantage": False, "clip_epsilon": 0.1}, id="relu-raw-advantages"),
    pytest.param(BOX, "tanh", {"entropy_coef": 0.05}, id="gaussian-entropy"),
    pytest.param(DISCRETE, "relu", {"entropy_coef": 0.05}, id="categorical-entropy-relu"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("action_space,activation,kwargs", CASES)
def test_closed_form_gradients_equal_autograds(action_space, activation, kwargs, dtype, device):
    """In torch on every device and dtype; in numpy too on the CPU in float32 without value
    clipping, where a run takes that one."""
    loss = make_loss(action_space, activation, **kwargs)
    batch = make_batch(loss, action_space).apply(lambda x: x.to(dtype) if x.is_floating_point() else x).to(device)
    loss = loss.to(dtype).to(device)
    numpy = dtype == torch.float32 and device == "cpu" and "value_clip" not in kwargs
    assert Acceleration(loss).closed_form == ("numpy" if numpy else "torch")
    expected_output, expected = autograd_gradients(loss, batch)
    clipped = float(expected_output["clip_fraction"])
    assert 0.0 < clipped < 1.0  # both branches of the clipped objective are exercised
    for update in [PPOGradients(loss), *([NumpyPPOGradients(loss)] if numpy else [])]:
        for parameter in loss.parameters():
            parameter.grad = torch.full_like(parameter, 7.0)  # replaced, not accumulated
        with torch.inference_mode():
            output = update(batch)
        for key, value in expected_output.items():
            assert torch.allclose(output[key], value, rtol=1e-5, atol=1e-6), key
            assert not output[key].requires_grad
        for name, parameter in loss.named_parameters():
            assert parameter.grad is not None
            scale = float(expected[name].abs().max()) + 1e-6
            assert torch.allclose(parameter.grad, expected[name], rtol=1e-4, atol=1e-5 * scale), name


def test_value_clip_gradient_follows_the_larger_squared_error():
    loss = make_loss(BOX, value_clip=0.2)
    batch = make_batch(loss, BOX)
    with torch.no_grad():
        value = loss.agent.value(batch[keys.OBSERVATION])
    batch[keys.STATE_VALUE] = value + torch.linspace(-1.0, 1.0, len(value)).unsqueeze(-1)  # inside and outside
    _, expected = autograd_gradients(loss, batch)
    with torch.inference_mode():
        PPOGradients(loss)(batch)
    for name, parameter in loss.named_parameters():
        if "critic" in name or "value" in name:
            assert torch.allclose(parameter.grad, expected[name], rtol=1e-4, atol=1e-6), name


class PPOWithPenalty(PPOLoss):
    """A subclass: its forward is the definition, whatever the closed form of PPOLoss says."""

    def forward(self, batch):
        output = super().forward(batch)
        output["loss_l2"] = 0.1 * sum((p * p).sum() for p in self.parameters())
        return output


class WiderMLP(MLP):
    def forward(self, observation):
        return 2.0 * super().forward(observation)


@pytest.mark.parametrize(
    "make,reason",
    [
        (lambda: make_loss(BOX, share_torso=True), "loss.share_torso=true"),
        (lambda: make_loss(BOX, "gelu"), "network.activation='gelu'"),
        (lambda: PPOWithPenalty(OBS, BOX, lambda out: MLP(OBS, out)), "PPOWithPenalty, a subclass of PPOLoss"),
        (lambda: PPOLoss(OBS, BOX, lambda out: WiderMLP(OBS, out)), "WiderMLP, a subclass of MLP"),
    ],
    ids=["shared-torso", "gelu", "loss-subclass", "network-subclass"],
)
def test_autograd_where_the_closed_form_does_not_apply_and_the_summary_says_why(make, reason):
    acceleration = Acceleration(make())
    assert acceleration.closed_form is None and acceleration.fast_updates() == {}
    assert reason in acceleration.summary and "update by autograd" in acceleration.summary


def test_switched_off_by_trainer_accel():
    acceleration = Acceleration(make_loss(BOX), enabled=False)
    assert acceleration.closed_form is None and acceleration.acting is None and not acceleration.flat
    assert acceleration.summary.count("trainer.accel=false") == 3


def _trainer(overrides: list[str], tmp_path) -> Trainer:
    return make_trainer(["algo=ppo", "tracking.enabled=false", *TINY, *overrides], tmp_path)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env", ["pendulum", "cartpole"])
def test_a_rollouts_updates_match_autograds_through_the_trainer(env, tmp_path, device):
    """Same seed, one rollout of updates (flat gradient buffers, joint clip, Adam): the same
    parameters, to float rounding, with closed-form gradients as with autograd."""
    params = {}
    for accel in (True, False):
        overrides = [f"env={env}", f"trainer.accel={str(accel).lower()}", f"trainer.device={device}"]
        trainer = _trainer(overrides, tmp_path)
        parts = trainer.parts
        assert isinstance(parts.gradients, CheckedGradients) is accel
        trainer._buffer(parts.collector.rollout())  # as Trainer.fit: only the loss's in_keys
        outputs = [trainer._update(batch, frames=0) for batch in parts.buffer.batches()]
        assert outputs and all(out is not None for out in outputs)
        assert not accel or parts.gradients.agreed  # checked on the first minibatch
        params[accel] = [p.detach().clone() for p in parts.loss.parameters()]
        parts.close()
    for closed_form, autograd in zip(params[True], params[False]):
        assert torch.allclose(closed_form, autograd, rtol=1e-4, atol=1e-6)


def test_a_compiled_update_compiles_the_closed_form_gradients(tmp_path, monkeypatch):
    """trainer.compile=true compiles PPO's closed form in torch (torch's tanh inside the
    compiled code): the same gradients as autograd's, to float rounding; the generated code
    leaves the inputs' sizes and strides to dynamo's guards (no ``assert_size_stride`` per call)."""
    guards = torch._C._dynamo.guards  # the generated code takes assert_size_stride from here when loaded
    size_asserts = []
    checked = guards.assert_size_stride
    monkeypatch.setattr(guards, "assert_size_stride", lambda *args: size_asserts.append(args) or checked(*args))
    trainer = _trainer(["env=pendulum", "trainer.compile=true"], tmp_path)
    parts = trainer.parts
    loss = parts.loss
    assert isinstance(parts.gradients, CheckedGradients) and "torch" in parts.gradients.name
    trainer._buffer(parts.collector.rollout())
    batch = next(iter(parts.buffer.batches()))
    parts.gradients(batch)  # the first minibatch: compiled, and checked against autograd
    assert parts.gradients.agreed
    _, expected = autograd_gradients(loss, batch)
    parts.gradients(batch)
    assert not size_asserts
    for name, parameter in loss.named_parameters():
        scale = float(expected[name].abs().max()) + 1e-6
        assert torch.allclose(parameter.grad, expected[name], rtol=1e-4, atol=1e-5 * scale), name
    parts.close()


def test_the_first_minibatch_trains_on_the_checked_fast_result_or_on_autograds_with_a_warning():
    """Both run on the first minibatch; where they agree the fast path's gradients are kept
    (a resumed run then computes what one that never stopped did), else autograd's, and a
    warning names the parameter."""
    loss = make_loss(BOX)
    batch = make_batch(loss, BOX)
    named = dict(loss.named_parameters())
    with torch.inference_mode():
        fast_output = NumpyPPOGradients(loss)(batch)
    fast = {name: p.grad.clone() for name, p in named.items()}

    class Optimizers:  # what Autograd needs of them: zeroing the gradients
        def zero_grad(self):
            loss.zero_grad(set_to_none=True)

    warnings: list[str] = []
    checked = CheckedGradients(
        torch.inference_mode()(NumpyPPOGradients(loss)), Autograd(loss, Optimizers()), named, "x", warnings.append
    )
    output = checked(batch)
    assert checked.agreed and not warnings
    assert all(torch.equal(named[name].grad, grad) for name, grad in fast.items())  # bit for bit the fast path's
    assert torch.equal(output["loss_objective"], fast_output["loss_objective"])

    class Wrong(NumpyPPOGradients):
        def __call__(self, batch):
            output = super().__call__(batch)
            loss.agent.head.log_std.grad.add_(1.0)
            return output

    checked = CheckedGradients(
        torch.inference_mode()(Wrong(loss)), Autograd(loss, Optimizers()), named, "x", warnings.append
    )
    checked(batch)
    assert checked.agreed is False and checked._update is checked.autograd
    [warning] = warnings
    assert warning.startswith("x disagrees with autograd on parameter agent.head.log_std (its gradient differs by 1")
    _, expected = autograd_gradients(loss, batch)
    assert torch.equal(loss.agent.head.log_std.grad, expected["agent.head.log_std"])


def test_a_resumed_run_updates_as_one_that_never_stopped(tmp_path):
    """Bit for bit: the check of a resumed run's first minibatch keeps the fast path's result."""
    overrides = ["env=pendulum", "collector.num_envs=2", "collector.steps_per_env=128", "buffer.epochs=2"]
    whole = _trainer(overrides, tmp_path)
    for _ in range(2):
        whole._buffer(whole.parts.collector.rollout())
        [whole._update(batch, frames=0) for batch in whole.parts.buffer.batches()]
    first = _trainer(overrides, tmp_path)
    first._buffer(first.parts.collector.rollout())
    [first._update(batch, frames=0) for batch in first.parts.buffer.batches()]
    state = first.state_dict()
    resumed = _trainer(overrides, tmp_path)
    resumed.load_state_dict(state)
    resumed._buffer(resumed.parts.collector.rollout())
    [resumed._update(batch, frames=0) for batch in resumed.parts.buffer.batches()]
    assert resumed.parts.gradients.agreed
    for a, b in zip(whole.parts.loss.parameters(), resumed.parts.loss.parameters()):
        assert torch.equal(a, b)
    for trainer in (whole, first, resumed):
        trainer.parts.close()
