"""Conformance check of a loss entry (:class:`rlplat.losses.base.LossFactory`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.accel import Acceleration, compare_gradients
from rlplat.collectors.base import Policy, act_function
from rlplat.envs.base import space_shape
from rlplat.losses.base import Loss, declared, undeclared_reason
from rlplat.testing._common import (
    BOX_ACTIONS,
    DISCRETE_ACTIONS,
    OBSERVATION_SPACE,
    Entry,
    Subject,
    observation_batch,
    savable,
    shape_text,
    subject,
)
from rlplat.trainer import loss_total

DEFAULT_NETWORK: tuple[Entry, Mapping[str, Any]] = ("mlp", {"hidden_sizes": [16]})
"""The torso the kit's losses are built over, unless the caller names another."""


def check_loss(
    entry: Entry,
    kwargs: Mapping[str, Any] | None = None,
    *,
    action_spaces: Sequence[gymnasium.Space] | None = None,
    observation_space: gymnasium.Space = OBSERVATION_SPACE,
    network: tuple[Entry, Mapping[str, Any]] = DEFAULT_NETWORK,
    rollout_shape: tuple[int, int] = (8, 4),
    batch_size: int = 16,
    updates: int = 3,
    seed: int = 0,
) -> None:
    """Check a loss entry the way rlplat builds it and the trainer drives it.

    For each action space, builds the loss through the registry as rlplat does,
    ``(observation_space, action_space, network, **kwargs)`` with ``network`` the
    configured torso factory, and checks:

    * it implements :class:`rlplat.losses.base.Loss` (every missing member named), and
      subclasses :class:`rlplat.losses.base.LossModule` if it defines an optional member;
    * ``policy.act`` maps ``[N, *obs_shape]`` float32 (N = B and 1, stochastic and
      deterministic) to actions ``[N, A]`` float32 in ``[-1, 1]``-space (Box) or ``[N]``
      int64 in range (Discrete) and ``[N]`` float32 log-probabilities; the policy's
      parameters are the loss's;
    * ``preprocess`` of a ``[T, B]`` rollout (the policy's actions; some episodes
      terminated, some truncated) returns a ``[T, B]`` TensorDict keeping every key;
    * ``param_groups()`` maps names to parameters of the loss, each trainable parameter in
      exactly one group;
    * ``updates`` updates as the trainer makes them on ``[N]`` minibatches (``[N, L]``
      windows when ``sequence_length`` is L > 1), holding only the loss's ``in_keys`` when it
      declares them (:class:`rlplat.losses.base.LossModule`; each a key of the preprocessed
      rollout): the output is a TensorDict of batch size ``[]`` with at least one ``loss_*``
      term, every value a finite scalar, diagnostics without gradients; the summed ``loss_*``
      terms back-propagate finite gradients into every trainable parameter (over the
      updates); an SGD step per group, then ``after_update()``;
    * each accelerated path of :mod:`rlplat.accel` that covers the loss agrees with its
      definition (:mod:`rlplat.accel.check`); ``state_dict()`` is a mapping ``torch.save`` writes.

    Args:
        entry: Registered loss name, or the constructor itself.
        kwargs: The YAML keyword arguments (a ``name`` key is ignored).
        action_spaces: Action spaces to check in; by default a ``Box(2)`` and a
            ``Discrete(3)``, those of the loss's ``LossModule.action_spaces``.
        observation_space: The env observation space rlplat would supply.
        network: ``(network entry, its YAML kwargs)`` of the torso.
        rollout_shape, batch_size: ``(T, B)`` of the synthetic rollout; N, per minibatch.
        updates: Gradient updates made.
        seed: Seed of torch's generator and of the data.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the constructor's signature, as in a run.
    """
    loss_entry = subject("loss", entry)
    if action_spaces is None:
        action_spaces = _declared_action_spaces(loss_entry)
    for action_space in action_spaces:
        torch.manual_seed(seed)
        loss = _build(loss_entry, kwargs, observation_space, action_space, network)
        _check_in(loss_entry, loss, observation_space, action_space, rollout_shape, batch_size, updates, seed)


def _declared_action_spaces(loss_entry: Subject) -> list[gymnasium.Space]:
    """``Box(2)`` and ``Discrete(3)``, those the constructor's class attribute ``action_spaces``
    (:class:`rlplat.losses.base.LossModule`; read before construction, as rlplat does) lists;
    both when it declares none."""
    target = loss_entry.target()
    _check_declared(loss_entry, target)
    supported = declared(target).action_spaces
    spaces: list[gymnasium.Space] = [s for s in (BOX_ACTIONS, DISCRETE_ACTIONS) if isinstance(s, supported)]
    loss_entry.expect(spaces, f"its action_spaces attribute {supported} names neither Box nor Discrete")
    return spaces


def _check_declared(loss_entry: Subject, loss: object) -> None:
    """Fail where ``loss`` (the entry's class, or the loss it built) defines an optional member
    of :class:`rlplat.losses.base.LossModule` without subclassing it, as a run would
    (:func:`rlplat.build.check_declared`)."""
    reason = undeclared_reason(loss)
    loss_entry.expect(reason is None, str(reason))


def _build(loss_entry: Subject, kwargs: Any, observation_space: Any, action_space: Any, network: Any) -> Loss:
    torso = subject("network", network[0])

    def network_factory(out_features: int, space: gymnasium.Space = observation_space) -> nn.Module:
        return torso.build(network[1], space, out_features)

    with loss_entry.running(f"the constructor (action_space={action_space})"):
        loss = loss_entry.build(kwargs, observation_space, action_space, network_factory)
    loss_entry.conforms(loss, Loss)
    _check_declared(loss_entry, loss)
    return loss


def _check_in(
    loss_entry: Subject,
    loss: Loss,
    observation_space: Any,
    action_space: Any,
    rollout_shape: Any,
    batch_size: int,
    updates: int,
    seed: int,
) -> None:
    """Every check of :func:`check_loss` in one action space."""
    what = f" (action_space={action_space})"
    check_policy(loss_entry, loss.policy, observation_space, action_space, seed)
    named = _named_parameters(loss)
    if isinstance(loss.policy, nn.Module):
        foreign = [n for n, p in loss.policy.named_parameters() if id(p) not in {id(q) for q in named.values()}]
        loss_entry.expect(not foreign, f"policy parameters {foreign} are not among the loss's parameters(){what}")
    rollout = _rollout(loss, observation_space, rollout_shape, seed)
    with loss_entry.running(f"preprocess(rollout {shape_text(rollout.batch_size)}){what}"):
        processed = loss.preprocess(rollout.clone())
    loss_entry.expect(
        isinstance(processed, TensorDict) and list(processed.batch_size) == list(rollout_shape),
        f"preprocess returned {type(processed).__name__} {shape_text(getattr(processed, 'batch_size', []))}; "
        f"expected a TensorDict of batch size {list(rollout_shape)}{what}",
    )
    dropped = set(rollout.keys(True, True)) - set(processed.keys(True, True))
    loss_entry.expect(not dropped, f"preprocess dropped the keys {sorted(map(str, dropped))}{what}")
    in_keys = declared(loss).in_keys
    if in_keys is not None:  # the trainer buffers only these
        absent = [str(key) for key in in_keys if key not in processed.keys(True, True)]
        loss_entry.expect(not absent, f"in_keys {absent} are not keys of the preprocessed rollout{what}")
        processed = processed.select(*in_keys)
    groups = check_param_groups(loss_entry, loss)
    _check_updates(loss_entry, loss, processed, groups, named, batch_size, updates, seed)
    savable(loss_entry, loss.state_dict(), "state_dict()")


def check_policy(
    entry: Subject, policy: Policy, observation_space: gymnasium.Space, action_space: gymnasium.Space, seed: int
) -> None:
    """Fail unless ``policy`` implements :class:`rlplat.collectors.base.Policy` with the
    shapes and dtypes a collector stores (see :func:`check_loss`)."""
    entry.conforms(policy, Policy)
    for n in (4, 1):
        observation = observation_batch(observation_space, (n,), seed)
        for deterministic in (False, True):
            call = f"policy.act({shape_text(observation.shape)} float32, deterministic={deterministic})"
            with entry.running(call), torch.inference_mode():
                result = policy.act(observation, deterministic=deterministic)
            entry.expect(isinstance(result, tuple) and len(result) == 2, f"{call} must return (action, log_prob)")
            action, log_prob = result
            if isinstance(action_space, gymnasium.spaces.Discrete):
                good = action.shape == (n,) and action.dtype == torch.int64
                good = good and bool(((action >= 0) & (action < int(action_space.n))).all())
                want = f"[{n}] int64 in [0, {int(action_space.n)})"
            else:
                action_shape = space_shape(action_space)
                good = action.shape == (n, *action_shape) and action.dtype == torch.float32
                good = good and bool(torch.isfinite(action).all())
                want = f"{[n, *action_shape]} float32"
            entry.expect(good, f"{call} returned action {shape_text(action.shape)} {action.dtype}; expected {want}")
            entry.expect(
                log_prob.shape == (n,) and log_prob.dtype == torch.float32,
                f"{call} returned log_prob {shape_text(log_prob.shape)} {log_prob.dtype}; expected [{n}] float32",
            )
            if hasattr(policy, "act_function"):
                _check_act_function(entry, policy, observation, deterministic, seed)


def _check_act_function(entry: Subject, policy: Policy, observation: Tensor, deterministic: bool, seed: int) -> None:
    """Fail unless the policy's optional ``act_function(deterministic)`` returns what ``act``
    does, bit for bit, from the same random state (:func:`rlplat.collectors.base.act_function`)."""
    call = f"policy.act_function({deterministic})({shape_text(observation.shape)} float32)"
    with entry.running(call), torch.inference_mode():
        torch.manual_seed(seed)
        want_action, want_log_prob = policy.act(observation, deterministic=deterministic)
        torch.manual_seed(seed)
        action, log_prob = act_function(policy, deterministic)(observation)
    entry.expect(
        torch.equal(action, want_action) and torch.equal(log_prob, want_log_prob),
        f"{call} returned another action or log_prob than policy.act(..., deterministic={deterministic}) "
        "from the same random state; it must return the same, bit for bit",
    )


def check_param_groups(entry: Subject, loss: Loss) -> dict[str, list[nn.Parameter]]:
    """Fail unless ``loss.param_groups()`` maps names to the loss's parameters, each
    trainable one in exactly one group; returns the groups."""
    with entry.running("param_groups()"):
        groups = loss.param_groups()
    entry.expect(
        isinstance(groups, Mapping) and all(isinstance(k, str) for k in groups),
        f"param_groups() returned {type(groups).__name__}; expected a dict of group name -> parameters",
    )
    names = {id(p): name for name, p in _named_parameters(loss).items()}
    seen: dict[int, str] = {}
    for group, params in groups.items():
        for p in params:
            entry.expect(isinstance(p, nn.Parameter), f"param_groups()[{group!r}] holds a {type(p).__name__}")
            entry.expect(id(p) in names, f"param_groups()[{group!r}] holds a parameter not among parameters()")
            entry.expect(
                id(p) not in seen, f"parameter {names[id(p)]} is in both param groups {seen.get(id(p))!r} and {group!r}"
            )
            seen[id(p)] = group
    missing = [name for name, p in _named_parameters(loss).items() if p.requires_grad and id(p) not in seen]
    entry.expect(not missing, f"trainable parameters in no param group ({', '.join(groups)}): {missing}")
    return dict(groups)


def _named_parameters(loss: Loss) -> dict[str, nn.Parameter]:
    """The loss's parameters by name: ``named_parameters()`` of an ``nn.Module``, else
    ``parameters()[i]``."""
    if isinstance(loss, nn.Module):
        return dict(loss.named_parameters())
    return {f"parameters()[{i}]": p for i, p in enumerate(loss.parameters())}


def _rollout(loss: Loss, observation_space: Any, rollout_shape: tuple[int, int], seed: int) -> TensorDict:
    """A ``[T, B]`` rollout as a collector yields it, acting with ``loss.policy``."""
    T, B = rollout_shape
    observation = observation_batch(observation_space, (T + 1, B), seed)  # s_0 .. s_T
    with torch.inference_mode():
        action, log_prob = loss.policy.act(observation[:T].flatten(0, 1))
    generator = torch.Generator().manual_seed(seed)
    terminated = torch.zeros(T, B, 1, dtype=torch.bool)
    truncated = torch.zeros(T, B, 1, dtype=torch.bool)
    terminated[T // 2, 0] = True
    truncated[T // 3, B - 1] = True
    return TensorDict(
        {
            keys.OBSERVATION: observation[:T].clone(),
            keys.ACTION: action.clone().view(T, B, *action.shape[1:]),
            keys.ACTION_LOG_PROB: log_prob.clone().view(T, B),
            keys.NEXT: {
                keys.OBSERVATION: observation[1:].clone(),
                keys.REWARD: torch.randn(T, B, 1, generator=generator),
                keys.DONE: terminated | truncated,
                keys.TERMINATED: terminated,
                keys.TRUNCATED: truncated,
            },
        },
        batch_size=[T, B],
    )


def _minibatch(processed: TensorDict, batch_size: int, length: int, generator: torch.Generator) -> TensorDict:
    """``[N]`` samples, or ``[N, L]`` windows of consecutive steps of one env."""
    T, B = processed.batch_size
    env = torch.randint(B, (batch_size,), generator=generator)
    start = torch.randint(T - length + 1, (batch_size,), generator=generator)
    if length == 1:
        return processed[start, env]
    rows = start.unsqueeze(1) + torch.arange(length)  # [N, L]
    return processed[rows, env.unsqueeze(1).expand(-1, length)]


def _check_updates(
    entry: Subject,
    loss: Loss,
    processed: TensorDict,
    groups: dict[str, list[nn.Parameter]],
    named: dict[str, nn.Parameter],
    batch_size: int,
    updates: int,
    seed: int,
) -> None:
    """``updates`` trainer-like updates; every trainable parameter gets a gradient in one."""
    length = int(loss.sequence_length)
    entry.expect(
        1 <= length <= processed.batch_size[0],
        f"sequence_length={length}; must be in [1, T={processed.batch_size[0]}] (pass a longer rollout_shape)",
    )
    optimizers = [torch.optim.SGD(ps, lr=1e-4) for ps in groups.values() if any(p.requires_grad for p in ps)]
    generator = torch.Generator().manual_seed(seed)
    reached: set[int] = set()
    fast_updates = _accelerated_updates(entry, loss)

    def autograd(batch: TensorDict) -> TensorDict:
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        output = loss(batch)
        loss_total(output).backward()
        return output.detach()

    trainable = {name: p for name, p in named.items() if p.requires_grad}
    for update in range(updates):
        batch = _minibatch(processed, batch_size, length, generator)
        with entry.running(f"loss(batch {shape_text(batch.batch_size)}) (update {update})"):
            output = loss(batch)
        total = check_loss_output(entry, output)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        with entry.running(f"backward of the summed loss_* terms (update {update})"):
            total.backward()
        for kind, fast in fast_updates.items():
            with entry.running(f"rlplat.accel's closed-form update in {kind} (update {update})"):
                difference = compare_gradients(fast, autograd, batch, trainable).difference
            entry.expect(
                difference is None, f"rlplat.accel's closed-form update in {kind} disagrees with autograd: {difference}"
            )
        for name, p in named.items():
            if p.grad is not None:
                entry.expect(bool(torch.isfinite(p.grad).all()), f"the gradient of {name} holds NaN or inf")
                reached.add(id(p))
        for optimizer in optimizers:
            optimizer.step()
        with entry.running(f"after_update() (update {update})"):
            loss.after_update()
    never = [name for name, p in named.items() if p.requires_grad and id(p) not in reached]
    entry.expect(not never, f"trainable parameters that no loss_* term reached in {updates} updates: {never}")


def _accelerated_updates(entry: Subject, loss: Loss) -> dict[str, Any]:
    """The closed-form updates of :mod:`rlplat.accel` that cover ``loss`` (none unless it and
    its networks are exactly built-in classes), after failing unless its acting in numpy,
    where that covers the policy, acts as ``policy.act`` does."""
    warnings: list[str] = []
    acceleration = Acceleration(loss, warn=warnings.append)
    acceleration.policy()  # compares acting in numpy with the policy's act, where it applies
    entry.expect(not warnings, f"rlplat.accel: {'; '.join(warnings)}")
    return acceleration.fast_updates()


def check_loss_output(entry: Subject, output: Any) -> torch.Tensor:
    """Fail unless ``output`` is what the trainer logs and sums; returns the summed ``loss_*``
    terms, which carry gradients."""
    entry.expect(
        isinstance(output, TensorDict) and output.batch_size == torch.Size([]),
        f"forward returned {type(output).__name__} {shape_text(getattr(output, 'batch_size', []))}; "
        "expected a TensorDict of batch size []",
    )
    terms = [key for key in output.keys() if key.startswith(keys.LOSS_PREFIX)]  # noqa: SIM118  (iter(td) walks the batch dim)
    entry.expect(terms, f"forward returned no {keys.LOSS_PREFIX}* term; it has {sorted(output.keys())}")
    for key, value in output.items():
        if key == keys.TD_ERROR:  # per sample, for a prioritized replay
            entry.expect(
                isinstance(value, torch.Tensor) and value.dim() == 1 and value.dtype == torch.float32,
                f"output {key!r} is {shape_text(getattr(value, 'shape', []))} {getattr(value, 'dtype', type(value))}; "
                "expected [N] float32 |Q(s, a) - y| per sample",
            )
            entry.expect(bool(torch.isfinite(value).all()), f"output {key!r} holds a NaN or inf")
            entry.expect(not value.requires_grad, f"output {key!r} carries gradients; detach it")
            continue
        entry.expect(
            isinstance(value, torch.Tensor) and value.shape == () and value.is_floating_point(),
            f"output {key!r} is {shape_text(getattr(value, 'shape', []))} {getattr(value, 'dtype', type(value))}; "
            "every value must be a scalar float tensor",
        )
        entry.expect(bool(torch.isfinite(value)), f"output {key!r} is {value.item()}")
        if key not in terms:
            entry.expect(not value.requires_grad, f"diagnostic {key!r} carries gradients; detach it")
    total = sum(output[key] for key in terms)
    entry.expect(total.requires_grad, f"none of {terms} carries gradients; nothing would be trained")
    return total
