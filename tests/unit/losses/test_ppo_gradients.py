"""PPO's closed-form gradients (PPOLoss.gradients) against autograd's, and when they apply."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from conftest import DEVICES, TINY, make_trainer
from tensordict import TensorDict

from rlplat import keys
from rlplat.losses.ppo import PPOLoss
from rlplat.networks.mlp import MLP, tanh_
from rlplat.trainer import Trainer

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
    """On the CPU in float32 without value clipping the closed form runs in numpy, else in torch."""
    loss = make_loss(action_space, activation, **kwargs)
    batch = make_batch(loss, action_space).apply(lambda x: x.to(dtype) if x.is_floating_point() else x).to(device)
    loss = loss.to(dtype).to(device)
    assert loss.analytic_gradients
    assert loss.agent.numpy_passes is (dtype == torch.float32 and device == "cpu")
    expected_output, expected = autograd_gradients(loss, batch)
    clipped = float(expected_output["clip_fraction"])
    assert 0.0 < clipped < 1.0  # both branches of the clipped objective are exercised
    for parameter in loss.parameters():
        parameter.grad = torch.full_like(parameter, 7.0)  # replaced, not accumulated
    output = loss.gradients(batch)
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
    loss.gradients(batch)
    for name, parameter in loss.named_parameters():
        if "critic" in name or "value" in name:
            assert torch.allclose(parameter.grad, expected[name], rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize(
    "kwargs,activation",
    [({"share_torso": True}, "tanh"), ({}, "gelu"), ({"analytic_gradients": False}, "tanh")],
    ids=["shared-torso", "gelu", "switched-off"],
)
def test_autograd_where_the_closed_form_does_not_apply(kwargs, activation):
    assert not make_loss(BOX, activation, **kwargs).analytic_gradients


def test_numpy_tanh_matches_torch_to_one_ulp():
    x = torch.linspace(-6.0, 6.0, 4097)
    expected = torch.tanh(x.double())
    assert torch.allclose(tanh_(x.clone()).double(), expected, rtol=0, atol=2 * torch.finfo(torch.float32).eps)


def _trainer(overrides: list[str], tmp_path) -> Trainer:
    return make_trainer(["algo=ppo", "tracking.enabled=false", *TINY, *overrides], tmp_path)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env", ["pendulum", "cartpole"])
def test_a_rollouts_updates_match_autograds_through_the_trainer(env, tmp_path, device):
    """Same seed, one rollout of updates (flat gradient buffers, joint clip, Adam): the same
    parameters, to float rounding, with closed-form gradients as with autograd."""
    params = {}
    for analytic in (True, False):
        overrides = [f"env={env}", f"loss.analytic_gradients={str(analytic).lower()}", f"trainer.device={device}"]
        trainer = _trainer(overrides, tmp_path)
        parts = trainer.parts
        assert parts.loss.analytic_gradients is analytic
        trainer._buffer(parts.collector.rollout())  # as Trainer.fit: only the loss's in_keys
        outputs = [trainer._update(batch, frames=0) for batch in parts.buffer.batches()]
        assert outputs and all(out is not None for out in outputs)
        params[analytic] = [p.detach().clone() for p in parts.loss.parameters()]
        parts.close()
    for closed_form, autograd in zip(params[True], params[False]):
        assert torch.allclose(closed_form, autograd, rtol=1e-4, atol=1e-6)


def test_a_compiled_update_compiles_the_closed_form_gradients(tmp_path, monkeypatch):
    """trainer.compile=true compiles PPO's gradients (torch's tanh inside the compiled code):
    the same gradients as autograd's, to float rounding; the generated code leaves the
    inputs' sizes and strides to dynamo's guards (no ``assert_size_stride`` per call)."""
    guards = torch._C._dynamo.guards  # the generated code takes assert_size_stride from here when loaded
    size_asserts = []
    checked = guards.assert_size_stride
    monkeypatch.setattr(guards, "assert_size_stride", lambda *args: size_asserts.append(args) or checked(*args))
    trainer = _trainer(["env=pendulum", "trainer.compile=true"], tmp_path)
    parts = trainer.parts
    loss = parts.loss
    assert loss.analytic_gradients and "gradients" in vars(loss)  # the compiled function shadows the method
    trainer._buffer(parts.collector.rollout())
    batch = next(iter(parts.buffer.batches()))
    _, expected = autograd_gradients(loss, batch)
    loss.gradients(batch)
    assert not size_asserts
    for name, parameter in loss.named_parameters():
        scale = float(expected[name].abs().max()) + 1e-6
        assert torch.allclose(parameter.grad, expected[name], rtol=1e-4, atol=1e-5 * scale), name
    parts.close()
