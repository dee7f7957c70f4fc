"""SAC's closed-form gradients (rlplat.accel.sac) against autograd's, the stacked products
they run on, and when they apply."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from conftest import DEVICES, make_trainer
from tensordict import TensorDict

from rlplat import keys
from rlplat.accel import Acceleration, CheckedGradients
from rlplat.accel.mlp import stacked_addmm, stacked_input_grad, stacked_linear_grads
from rlplat.accel.sac import SACGradients
from rlplat.losses.sac import SACLoss
from rlplat.networks.actors import LOG_STD_MAX, LOG_STD_MIN
from rlplat.networks.ensemble import per_member
from rlplat.networks.mlp import MLP

OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
# float64 throughout; the actor's gradients differ from autograd's by up to ~1e-10 (relative):
# autograd differentiates log pi's tanh correction through softplus, which torch takes as
# linear beyond 20 (|u| > 10), where the closed form's 2 tanh(u) is exact
RTOL = 1e-8


def assert_gradient_close(got: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """Equal to within RTOL of the gradient's largest element."""
    torch.testing.assert_close(got, expected, rtol=0, atol=RTOL * float(expected.abs().max()), msg=name)


class Wide(torch.nn.Module):  # a torso that is not an MLP: autograd only
    def __init__(self, space: gymnasium.Space, out_features: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(int(np.prod(space.shape)), out_features)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(observation))


def make_loss(activation: str = "relu", hidden: int = 16, torso: str = "mlp", **kwargs) -> SACLoss:
    def network(out_features: int, space: gymnasium.Space = OBS) -> torch.nn.Module:
        if torso == "wide":
            return Wide(space, out_features)
        return MLP(space, out_features, hidden_sizes=[hidden], activation=activation)

    torch.manual_seed(0)
    loss = SACLoss(OBS, BOX, network, features=hidden, alpha_init=0.3, **kwargs).double()
    with torch.no_grad():  # away from the initial weights, so that every term matters
        for parameter in loss.parameters():
            if parameter.requires_grad:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return loss


def make_batch(n: int = 64) -> TensorDict:
    generator = torch.Generator().manual_seed(1)
    return TensorDict(
        {
            keys.OBSERVATION: torch.randn(n, 3, generator=generator, dtype=torch.float64),
            keys.ACTION: torch.rand(n, 2, generator=generator, dtype=torch.float64) * 2 - 1,
            keys.NEXT_OBSERVATION: torch.randn(n, 3, generator=generator, dtype=torch.float64),
            keys.NEXT_REWARD: torch.randn(n, 1, generator=generator, dtype=torch.float64),
            keys.NEXT_TERMINATED: torch.rand(n, 1, generator=generator) < 0.2,
        },
        batch_size=[n],
    )


def closed_form(loss: SACLoss, batch: TensorDict, seed: int) -> TensorDict:
    """The closed-form update, drawing from torch's generator seeded with ``seed``."""
    torch.manual_seed(seed)
    with torch.inference_mode():
        return SACGradients(loss)(batch)


def autograd_gradients(loss: SACLoss, batch: TensorDict, seed: int) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    loss.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    output = loss(batch)
    sum(v for k, v in output.items() if k.startswith(keys.LOSS_PREFIX)).backward()
    return output.detach(), {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}


CASES = [
    pytest.param({}, 64, id="relu"),
    pytest.param({"activation": "tanh"}, 64, id="tanh"),
    pytest.param({"hidden": 64}, 256, id="per-member-value-heads"),  # 256 rows x 64 inputs: per_member
    pytest.param({"num_critics": 1}, 64, id="one-critic"),
    pytest.param({"num_critics": 3}, 64, id="three-critics"),
    pytest.param({"learn_alpha": False}, 64, id="fixed-alpha"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kwargs,n", CASES)
def test_closed_form_gradients_equal_autograds(kwargs, n, device):
    loss = make_loss(**kwargs).to(device)
    batch = make_batch(n).to(device)
    assert Acceleration(loss).closed_form == "torch"
    expected_output, expected = autograd_gradients(loss, batch, seed=5)
    assert ("log_alpha" in expected) is loss.log_alpha.requires_grad
    for parameter in loss.parameters():
        if parameter.requires_grad:
            parameter.grad = torch.full_like(parameter, 7.0)  # replaced, not accumulated
    output = closed_form(loss, batch, seed=5)  # the same draws as the autograd pass
    for key, value in expected_output.items():
        torch.testing.assert_close(output[key], value, rtol=1e-9, atol=1e-12, msg=key)
        assert not output[key].requires_grad
    for name, parameter in loss.named_parameters():
        if name in expected:
            assert_gradient_close(parameter.grad, expected[name], name)
        else:
            assert not parameter.requires_grad, name
    assert "critics_target" not in "".join(expected)  # the target critics take no gradient


def test_the_log_std_clamp_passes_gradients_only_inside_its_range():
    loss = make_loss()
    with torch.no_grad():  # log sigma far above the clamp for the first action dim, far below for the second
        loss.actor.log_std.bias.copy_(torch.tensor([LOG_STD_MAX + 50.0, LOG_STD_MIN - 50.0], dtype=torch.float64))
    batch = make_batch()
    _, expected = autograd_gradients(loss, batch, seed=2)
    closed_form(loss, batch, seed=2)
    assert float(loss.actor.log_std.bias.grad.abs().max()) == 0.0 == float(expected["actor.log_std.bias"].abs().max())
    for name, parameter in loss.actor.named_parameters():
        assert_gradient_close(parameter.grad, expected[f"actor.{name}"], name)


def test_the_actor_follows_the_critic_of_the_minimum():
    """loss_actor = mean(alpha log pi - min_k Q_k(s, a~)): the critics' gradient reaches the
    action through the smaller Q-value of each sample alone, as torch.min's does."""
    loss = make_loss()
    batch = make_batch()
    with torch.no_grad():
        torch.manual_seed(0)
        new_action, _ = loss.actor(batch[keys.OBSERVATION], noise=loss.noise(batch[keys.ACTION])[0])
        q = loss.critics(batch[keys.OBSERVATION], new_action)
        loss.critics.stacked.biases[-1][1] += (q[0] - q[1]).median()  # the critics cross: each the minimum for half
        q = loss.critics(batch[keys.OBSERVATION], new_action)
    chosen = q.min(0).indices
    assert 0 < int(chosen.sum()) < len(chosen)  # both critics are the minimum somewhere
    _, expected = autograd_gradients(loss, batch, seed=0)
    closed_form(loss, batch, seed=0)
    assert_gradient_close(loss.actor.mean.weight.grad, expected["actor.mean.weight"], "actor.mean.weight")


def test_gradients_created_in_inference_mode_can_be_clipped_in_place_outside_it():
    """The closed form runs under torch.inference_mode; a ``.grad`` it has to create is an
    ordinary tensor, which an optimizer's clip (in place, outside inference mode) can scale."""
    loss = make_loss()
    for parameter in loss.parameters():
        parameter.grad = None
    output = closed_form(loss, make_batch(), seed=0)
    assert output["loss_qvalue"].is_inference()  # the terms come from inference mode
    trained = [p for p in loss.parameters() if p.requires_grad]
    assert all(p.grad is not None and not p.grad.is_inference() for p in trained)
    norm = torch.nn.utils.clip_grad_norm_(trained, max_norm=1e-3)
    assert float(norm) > 1e-3
    assert float(torch.nn.utils.get_total_norm([p.grad for p in trained])) == pytest.approx(1e-3, rel=1e-4)


@pytest.mark.parametrize(
    "kwargs,reason",
    [({"activation": "gelu"}, "network.activation='gelu'"), ({"torso": "wide"}, "Wide, not MLP")],
    ids=["gelu", "not-an-mlp"],
)
def test_autograd_where_the_closed_form_does_not_apply(kwargs, reason):
    acceleration = Acceleration(make_loss(**kwargs))
    assert acceleration.closed_form is None and reason in acceleration.summary


@pytest.mark.parametrize("rows,width,out", [(8, 4, 16), (256, 64, 1), (16, 8, 1)])
def test_stacked_products_equal_batched_matrix_products(rows, width, out):
    """The stacked layer's forward, parameter and input gradients, by either path of per_member."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(3, width, out, generator=generator, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, 1, out, generator=generator, dtype=torch.float64, requires_grad=True)
    inputs = torch.randn(rows, width, generator=generator, dtype=torch.float64, requires_grad=True)
    expected = torch.baddbmm(bias, inputs.expand(3, rows, width), weight)
    grad_output = torch.randn(expected.shape, generator=generator, dtype=torch.float64)
    expected.backward(grad_output)
    with torch.no_grad():
        torch.testing.assert_close(stacked_addmm(bias, inputs, weight), expected)
        expected_grads = weight.grad.clone(), bias.grad.clone()
        weight.grad, bias.grad = torch.full_like(weight, 7.0), None  # replaced; created where missing
        stacked_linear_grads(weight, bias, inputs, grad_output)
        torch.testing.assert_close((weight.grad, bias.grad), expected_grads)
        torch.testing.assert_close(stacked_input_grad(weight, grad_output).sum(0), inputs.grad)


def test_per_member_products_only_for_wide_value_heads():
    assert per_member(256, torch.empty(2, 256, 1)) and per_member(256, torch.empty(2, 64, 1))
    assert not per_member(64, torch.empty(2, 64, 1))  # small: one batched product is faster
    assert not per_member(256, torch.empty(2, 256, 256))  # bmm is as fast as K products there


@pytest.mark.parametrize("device", DEVICES)
def test_a_rollouts_updates_match_autograds_through_the_trainer(tmp_path, device):
    """Same seed, updates on the same sampled batches (flat gradient buffers, three fused
    Adams, Polyak targets): the same parameters, to float rounding, either way."""
    overrides = [
        "algo=sac",
        f"trainer.device={device}",
        "env=pendulum",
        "~tuned",  # one update per frame
        "tracking.enabled=false",
        "network.hidden_sizes=[32]",
        "loss.features=32",
        "buffer.batch_size=64",
        "buffer.learning_starts=64",
        "loss.warmup_frames=64",
    ]
    params = {}
    for accel in (True, False):
        trainer = make_trainer([*overrides, f"trainer.accel={str(accel).lower()}"], tmp_path)
        parts = trainer.parts
        assert isinstance(parts.gradients, CheckedGradients) is accel
        torch.manual_seed(0)
        outputs = []
        for _ in range(100):
            trainer._buffer(parts.collector.rollout())
            outputs += [trainer._update(batch, frames=0) for batch in parts.buffer.batches()]
        assert len(outputs) == 100 - 64 + 1 and all(out is not None for out in outputs), len(outputs)
        assert not accel or parts.gradients.agreed
        params[accel] = [p.detach().clone() for p in parts.loss.parameters()]
        parts.close()
    for closed_form, autograd in zip(params[True], params[False]):
        torch.testing.assert_close(closed_form, autograd, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_a_compiled_update_compiles_the_closed_form_gradients(tmp_path, device):
    """trainer.compile=true compiles SAC's gradients: those of autograd on the same batch and
    draws, to float32 rounding."""
    overrides = ["algo=sac", "env=pendulum", "tracking.enabled=false", "trainer.compile=true", "buffer.batch_size=32"]
    overrides.append(f"trainer.device={device}")
    trainer = make_trainer(overrides, tmp_path)
    parts = trainer.parts
    loss = parts.loss
    assert isinstance(parts.gradients, CheckedGradients) and "torch" in parts.gradients.name
    for _ in range(40):
        trainer._buffer(parts.collector.rollout())
    batch = parts.buffer.sample()
    loss.zero_grad(set_to_none=False)
    torch.manual_seed(3)
    output = loss(batch)
    sum(v for k, v in output.items() if k.startswith(keys.LOSS_PREFIX)).backward()
    expected = {name: p.grad.clone() for name, p in loss.named_parameters() if p.requires_grad}
    torch.manual_seed(3)
    parts.gradients.fast(batch)  # the compiled closed form alone
    for name, parameter in loss.named_parameters():
        if name in expected:
            scale = float(expected[name].abs().max()) + 1e-6
            torch.testing.assert_close(parameter.grad, expected[name], rtol=0, atol=1e-4 * scale, msg=name)
    parts.close()


def test_closed_form_gradients_with_importance_weights_equal_autograds():
    """A prioritized replay's batch: loss_qvalue weights each sample's squared errors by
    ``weight``, in the closed form's critic gradient as in autograd's; td_error as the loss's."""
    loss = make_loss()
    batch = make_batch()
    batch[keys.IMPORTANCE_WEIGHT] = torch.rand(64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    expected_output, expected = autograd_gradients(loss, batch, seed=5)
    unweighted, _ = autograd_gradients(loss, batch.exclude(keys.IMPORTANCE_WEIGHT), seed=5)
    assert expected_output["loss_qvalue"] < unweighted["loss_qvalue"]  # weights below 1 scale it down
    output = closed_form(loss, batch, seed=5)
    assert output[keys.TD_ERROR].shape == (64,)
    for key, value in expected_output.items():
        torch.testing.assert_close(output[key], value, rtol=1e-9, atol=1e-12, msg=key)
    for name, parameter in loss.named_parameters():
        if name in expected:
            assert_gradient_close(parameter.grad, expected[name], name)
