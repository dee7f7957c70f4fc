"""Assemble: composed config -> frozen parts, every cross-component check done here.

:func:`build` reads the composed config once, builds each part through its registry and
checks what no single part can check alone, so that a bad combination stops with one
message before any run is created:

* the loss can act in the env's action space (``algo=dqn env=pendulum``);
* an on-policy loss gets a buffer that serves only the latest rollout, an off-policy loss
  one that replays (``algo=ppo buffer=replay``);
* the buffer's samples have the length the loss needs (n-step DQN: ``loss.n_step`` equal
  to ``buffer.sequence_length``);
* the buffer can hold what the collector yields and the loss samples (replay capacity at
  least one rollout, one sequence and one batch);
* the loss's parameter groups cover each trainable parameter once, and every ``optim.<group>``
  names one of them.

The parts go to :class:`rlplat.trainer.Trainer`, which only runs them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import gymnasium
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from threadpoolctl import threadpool_limits

from rlplat.accel import Acceleration
from rlplat.accel.plan import Warn, warn_on_stderr
from rlplat.buffers.base import Buffer
from rlplat.collectors.base import Collector
from rlplat.envs.base import check_observation_space
from rlplat.envs.pool import EnvPoolTask
from rlplat.envs.probe import (  # the env probe rlplat-train's pre-check runs too
    check_renderable,
    entry_node,
    env_backend,
    probe_env,
)
from rlplat.envs.vector import VectorEnv
from rlplat.loggers import check_loggers
from rlplat.losses.base import Loss
from rlplat.networks.base import CORE_KEYS, ConfiguredNetwork, CoreSpec, NetworkFactory, split_core
from rlplat.optim import Optimizers, make_optimizers
from rlplat.registry import (
    BUFFERS,
    COLLECTORS,
    ENVS,
    LOSSES,
    NETWORKS,
    TRANSFORMS,
    ConfigError,
    PluginError,
    closest,
)
from rlplat.settings import CheckpointConfig, TrackingConfig, TrainerConfig, check_seed
from rlplat.trainer import Gradients, Parts
from rlplat.transforms.base import EnvTransform, Transform, TransformLike

COMPONENT_NODES = ("env", "transforms", "network", "loss", "collector", "buffer", "optim")


class MovableLoss(Loss, Protocol):
    """A :class:`Loss` as a loss entry builds it: on the CPU, moved to the run's device with
    ``.to`` (``nn.Module.to``), as :class:`rlplat.losses.base.LossFactory` states. ``to`` is
    not a member of :class:`Loss`, which lists what the trainer uses."""

    def to(self, device: torch.device) -> Loss:
        """Move the loss's parameters and buffers to ``device``; returns the loss."""
        ...


@dataclass(frozen=True)
class Build:
    """The result of :func:`build`: the parts and the settings of their run.

    Attributes:
        parts: What the trainer runs.
        trainer: The ``trainer`` settings.
        checkpoint: The ``checkpoint`` settings.
        tracking: The ``tracking`` settings (no run exists yet).
        config: The resolved config as plain containers.
        acceleration: Which accelerated paths the run takes, and why (one line for the console).
    """

    parts: Parts
    trainer: TrainerConfig
    checkpoint: CheckpointConfig
    tracking: TrackingConfig
    config: Mapping[str, Any]
    acceleration: str


def build(cfg: DictConfig, warn: Warn = warn_on_stderr) -> Build:
    """Build every part from the composed config, checking each constraint between them.

    Seeds Python, numpy and torch with ``seed`` and sets torch's CPU threads first, so that
    networks are initialised reproducibly; chooses the accelerated paths (:mod:`rlplat.accel`).

    Args:
        cfg: The composed rlplat config (conf/config.yaml and its groups).
        warn: Called with a one-line warning when an accelerated path disagrees with its
            definition (it then gives way to it).

    Returns:
        The frozen :class:`Build`; call ``build.parts.close()`` when done.

    Raises:
        ConfigError: for any invalid value or mismatch, naming the keys, the values and what
            is valid; nothing is running or written then.
        PluginError: for a plugin entry that fails to load or breaks its protocol.
    """
    config = resolve(cfg)
    trainer = TrainerConfig.from_node(config["trainer"])
    tracking = TrackingConfig.from_node(config["tracking"])
    config["tracking"]["uri"] = tracking.uri  # a relative sqlite path made absolute: the checkpoint's config resumes it
    check_loggers(tracking.also)
    checkpoint = CheckpointConfig.from_node(config["checkpoint"])
    seed = check_seed(config["seed"])
    torch.set_num_threads(trainer.num_threads)
    # numpy's BLAS too (policies act in numpy on the CPU): its own pool would otherwise use
    # every core, its idle threads spinning on the ones torch leaves free
    threadpool_limits(trainer.num_threads, user_api="blas")
    device = resolve_device(trainer.device)
    seed_everything(seed)

    env_node = config["env"]
    transforms, observation_space, action_space = build_transforms(config["transforms"], env_node, seed)
    loss = build_loss(config, observation_space, action_space).to(device)
    check_buffer_kind(config, loss)
    acceleration = Acceleration(loss, enabled=trainer.accel, compiled=trainer.compile, warn=warn)
    optimizers, gradients = build_updates(config, loss, trainer, acceleration)
    policy = acceleration.policy()
    collector = COLLECTORS.build(
        "collector",
        config["collector"],
        make_env=env_maker(env_node, transforms),
        policy=policy,
        total_frames=trainer.total_frames,
        device=device,
        seed=seed,
        protocol=Collector,
    )
    try:
        buffer = BUFFERS.build("buffer", config["buffer"], rollout_shape=collector.rollout_shape, protocol=Buffer)
        check_sequence_length(config, loss, buffer)
        eval_env = VectorEnv(single_env(env_node, transforms), trainer.eval_episodes, transforms, False)
    except BaseException:
        collector.close()
        raise
    parts = Parts(loss, policy, gradients, collector, buffer, optimizers, eval_env, transforms, device, seed, config)
    return Build(parts, trainer, checkpoint, tracking, config, acceleration.summary)


def build_updates(
    config: Mapping[str, Any], loss: Loss, trainer: TrainerConfig, acceleration: Acceleration
) -> tuple[Optimizers, Gradients]:
    """The loss's optimizers (over flat buffers where ``acceleration`` lays them out so) and
    how each update gets its gradients (``acceleration``'s checked closed form, or autograd),
    compiled with ``trainer.compile``: the closed form where the run has one, else the loss's
    forward (its backward is compiled with it).

    Raises:
        ConfigError: for a bad ``optim`` setting, or ``trainer.compile=true`` with a loss that
            is not an ``nn.Module``.
    """
    optimizers = build_optimizers(config, loss, acceleration)
    if trainer.compile:
        check_compilable(loss, config["loss"]["name"])
        if acceleration.closed_form is None:  # else the closed-form update is what compiles
            cast(torch.nn.Module, loss).compile(dynamic=False, options=COMPILE_OPTIONS)
    return optimizers, acceleration.gradients(optimizers, COMPILE_OPTIONS if trainer.compile else None)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain containers with interpolations resolved.

    Raises:
        ConfigError: when an interpolation cannot be resolved (names the key).
    """
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
    except Exception as error:  # omegaconf's InterpolationResolutionError and kin
        raise ConfigError(f"the config does not resolve: {error}") from error
    assert isinstance(config, dict), "a DictConfig resolves to a dict"
    config.pop("hydra", None)
    return cast(dict[str, Any], config)  # a composed config's keys are strings


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` -> a torch device.

    Raises:
        ConfigError: for ``cuda`` where CUDA is not available.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device='cuda': CUDA is not available here; use cpu or auto")
    return torch.device(name)


def single_env(env_node: Mapping[str, Any], transforms: Sequence[TransformLike] = ()) -> Any:
    """A factory of one gymnasium env as the ``env`` node configures it (whatever its backend),
    made with the render mode its env transforms need (``transforms.from_pixels``); the env
    transforms themselves are applied by :class:`rlplat.envs.vector.VectorEnv`."""
    node = entry_node(env_node)
    render_mode = env_render_mode(transforms)
    if render_mode is not None:
        node["render_mode"] = render_mode
    return lambda: ENVS.build("env", node)


def env_render_mode(transforms: Sequence[Any]) -> str | None:
    """The render mode the env transforms need (the first one set), or None."""
    modes = [t.render_mode for t in transforms if isinstance(t, EnvTransform) and t.render_mode is not None]
    return modes[0] if modes else None


def build_transforms(
    node: Mapping[str, Any], env_node: Mapping[str, Any], seed: int = 0
) -> tuple[tuple[Transform, ...], gymnasium.Space, gymnasium.Space]:
    """The ``transforms`` node (name -> kwargs, in order) -> the transforms, and the single
    env's observation and action spaces once they apply; a name set to null is left out (a
    preset cannot delete a key that an algo preset set).

    One probe env is built from ``env_node``: each env transform
    (:class:`rlplat.transforms.base.EnvTransform`) is built with the observation space of its
    input and wraps the probe in turn; the transforms over the batch are then built with the
    space after all of them, and fitted on the probe (:meth:`Transform.fit`).

    Returns:
        ``(transforms in the node's order, observation space, action space)``.

    Raises:
        ConfigError: for a name no transform is registered as (the key is the name itself,
            ``transforms.<name>``), listing those that are; a transform that cannot take its
            input; an env that cannot render for ``from_pixels``; an observation entry no
            tensor holds (text not tokenised); or as :func:`rlplat.envs.probe.probe_env`.
    """
    names = TRANSFORMS.names()
    for name in node:
        if name not in names:
            suggestion = closest(name, names)
            hint = f" Did you mean {suggestion!r}?" if suggestion else ""
            raise ConfigError(f"transforms.{name}: no transform is named {name!r}. Valid: {', '.join(names)}.{hint}")
    chosen = [(name, kwargs) for name, kwargs in node.items() if kwargs is not None]
    wraps = {name: _wraps_env(name) for name, _ in chosen}
    renders = [name for name, _ in chosen if wraps[name] and _render_mode(name) is not None]
    probe_node = dict(env_node)
    if renders:
        check_renderable(env_node, f"render pixels for transforms.{renders[0]}")
        probe_node["render_mode"] = _render_mode(renders[0])
    probe = probe_env(probe_node)  # the one env a run builds to read the spaces
    built: dict[str, Transform] = {}
    try:
        for name, kwargs in chosen:
            if wraps[name]:
                built[name] = _build_transform(name, kwargs, probe.observation_space)
                probe = cast(EnvTransform, built[name]).wrap(probe)
        observation_space, action_space = probe.observation_space, probe.action_space
        try:
            check_observation_space(observation_space)
        except TypeError as error:
            raise ConfigError(f"env {env_node.get('name')!r}: {error}") from None
        for name, kwargs in chosen:
            if not wraps[name]:
                built[name] = _build_transform(name, kwargs, observation_space)
                if isinstance(built[name], Transform):  # a TransformLike of a plugin need not have fit
                    built[name].fit(probe, seed)
    finally:
        probe.close()
    return tuple(built[name] for name, _ in chosen), observation_space, action_space


def _wraps_env(name: str) -> bool:
    """Whether transform ``name`` is an env transform (its entry an EnvTransform subclass)."""
    entry = TRANSFORMS.get(name)
    return isinstance(entry, type) and issubclass(entry, EnvTransform)


def _render_mode(name: str) -> str | None:
    """The render mode env transform ``name`` needs (its class attribute), or None."""
    return cast(type[EnvTransform], TRANSFORMS.get(name)).render_mode


def _build_transform(name: str, kwargs: Mapping[str, Any], space: gymnasium.Space) -> Transform:
    return cast(
        Transform, TRANSFORMS.build(f"transforms.{name}", {"name": name, **kwargs}, space, protocol=TransformLike)
    )


def env_maker(env_node: Mapping[str, Any], transforms: tuple[Transform, ...]) -> Any:
    """``(num_envs, vectorization) -> VectorEnv``: the training env, transforms updating; its
    envs are EnvPool's with ``env.backend=envpool``."""
    make_one = (
        EnvPoolTask.from_node(env_node) if env_backend(env_node) == "envpool" else single_env(env_node, transforms)
    )
    return lambda num_envs, vectorization: VectorEnv(make_one, num_envs, list(transforms), True, vectorization)


def build_loss(
    config: Mapping[str, Any], observation_space: gymnasium.Space, action_space: gymnasium.Space
) -> MovableLoss:
    """The ``loss`` node -> the loss, after checking it can act in ``action_space``.

    Raises:
        ConfigError: when the loss cannot act in the env (names both and the losses that can).
    """
    node = config["loss"]
    check_action_space(node.get("name"), action_space, config["env"], observation_space)
    torso_node, core = split_core(config["network"])
    if core is not None:
        check_recurrent_core(node["name"], core)

    def torso(out_features: int, space: gymnasium.Space) -> torch.nn.Module:
        return NETWORKS.build("network", torso_node, space, out_features, also_valid=CORE_KEYS)

    factory: NetworkFactory = ConfiguredNetwork(torso, observation_space, core)
    return LOSSES.build("loss", node, observation_space, action_space, factory, protocol=Loss)


def check_recurrent_core(loss_name: str, core: CoreSpec) -> None:
    """A recurrent core goes only to a loss that puts one after its torsos (class attribute
    ``recurrent_cores``), never ignored.

    Raises:
        ConfigError: naming ``network.core`` and the losses that take one.
    """
    if getattr(LOSSES.get(loss_name, key="loss.name"), "recurrent_cores", False):
        return
    able = []
    for name in LOSSES.names():
        try:
            if getattr(LOSSES.get(name), "recurrent_cores", False):
                able.append(name)
        except PluginError:  # a broken plugin must not hide this message
            continue
    raise ConfigError(
        f"network.core={core.kind!r}: loss {loss_name!r} takes no recurrent core. "
        f"Algorithms with recurrent policies: {', '.join(able)}; or set network.core=null"
    )


# Inductor settings of trainer.compile=true. ``size_asserts``: the generated code re-checks
# every input's sizes and strides at each call, which dynamo's guards have checked just
# before it. Without it PPO's updates at the PPO row's settings of the speed page (docs/benchmarks/speed.md)
# run ~6% more per second (``benchmarks/speed.py <those settings> trainer.compile=true``).
# ``fallback_random``: random draws inside the compiled code (SAC's reparameterised actions)
# come from torch's generator, as in eager mode, not from inductor's own: a seed gives the
# same draws compiled or not (SAC's compiled update at 64 units: no slower).
COMPILE_OPTIONS: dict[str, Any] = {"size_asserts": False, "fallback_random": True}


def check_compilable(loss: Loss, name: str) -> None:
    """``trainer.compile=true`` compiles what each update runs with ``torch.compile``, for
    fixed shapes (every minibatch has the buffer's batch size): an accelerated update's
    closed-form gradients where the run has them, else the loss's forward (its backward is
    compiled with it). The policy's ``act`` in collection stays eager: at one env step's
    batch the compiled call costs more than the few operations it replaces
    (``benchmarks/speed.py``).

    Raises:
        ConfigError: when the loss is not an ``nn.Module``, the kind torch.compile compiles.
    """
    if not isinstance(loss, torch.nn.Module):
        raise ConfigError(f"trainer.compile=true: loss {name!r} is not an nn.Module, the kind torch.compile compiles")


def action_spaces(loss_cls: Any) -> tuple[type, ...]:
    """The action-space types a loss can act in: its ``action_spaces`` attribute, or Box and
    Discrete for a loss that declares none."""
    return getattr(loss_cls, "action_spaces", (gymnasium.spaces.Box, gymnasium.spaces.Discrete))


def check_action_space(
    loss_name: str,
    action_space: gymnasium.Space,
    env_node: Mapping[str, Any],
    observation_space: gymnasium.Space | None = None,
) -> None:
    """Raise ConfigError when the loss cannot act in the env's action space, naming both
    and the (loadable) losses that can; with observations no built-in network takes (not a
    Box: a Tuple, a Dict), saying so."""
    supported = action_spaces(LOSSES.get(loss_name, key="loss.name"))
    if isinstance(action_space, supported):
        return
    able = []
    for name in LOSSES.names():
        try:
            if isinstance(action_space, action_spaces(LOSSES.get(name))):
                able.append(name)
        except PluginError:  # a broken plugin must not hide this message
            continue
    env = env_node.get("id", env_node.get("name"))
    raise ConfigError(
        f"loss {loss_name!r} cannot act in env {env!r}: it needs "
        f"{' or '.join(t.__name__ for t in supported)} actions, the env has {action_space}. "
        f"Algorithms for this env: {', '.join(able)}"
        + (
            f" (with a network that takes its observations, {observation_space}: the built-in ones take Box)."
            if observation_space is not None and not isinstance(observation_space, gymnasium.spaces.Box)
            else "."
        )
    )


def check_buffer_kind(config: Mapping[str, Any], loss: Loss) -> None:
    """The buffer serves what the loss learns from: the latest rollout or replayed data.
    Read from the buffer entry's ``on_policy`` class attribute, before the buffer is built,
    so that the message is about the pairing and not about keys the other kind lacks.

    Raises:
        ConfigError: naming the loss, the buffer and the buffers that fit.
    """
    loss_name, buffer_name = config["loss"]["name"], config["buffer"]["name"]
    if _on_policy(buffer_name) in (None, loss.on_policy):
        return
    need = "only the latest rollout (an on-policy buffer)" if loss.on_policy else "replayed data"
    fit = [name for name in BUFFERS.names() if _on_policy(name) == loss.on_policy]
    raise ConfigError(
        f"buffer={buffer_name!r} does not fit loss {loss_name!r}: the loss is "
        f"{'on' if loss.on_policy else 'off'}-policy and learns from {need}. "
        f"Buffers that fit: {', '.join(fit) or '(none)'}."
    )


def check_sequence_length(config: Mapping[str, Any], loss: Loss, buffer: Buffer) -> None:
    """The buffer's samples have the length the loss needs (n-step returns need windows); a
    recurrent loss (``recurrent`` true) takes the rollout's sequences of any length of at
    least 2 (``buffer.sequence_length``).

    Raises:
        ConfigError: naming the key to set and its value.
    """
    if getattr(loss, "recurrent", False):
        if buffer.sequence_length < 2 or not buffer.on_policy:
            raise ConfigError(
                f"buffer.sequence_length={buffer.sequence_length}: a recurrent core (network.core="
                f"{config['network'].get('core')}) learns through time from sequences of the rollout; set "
                "buffer.sequence_length to the steps back-propagated through (truncated BPTT), e.g. 8"
            )
        return
    if getattr(loss, "recurrent_cores", False) and loss.sequence_length == 1 and buffer.sequence_length > 1:
        raise ConfigError(
            f"buffer.sequence_length={buffer.sequence_length}: sequences are for a recurrent core, and loss "
            f"{config['loss']['name']!r} has none (network.core=null); set network.core=lstm or gru, or "
            "buffer.sequence_length=1"
        )
    if loss.sequence_length != buffer.sequence_length:
        raise ConfigError(
            f"buffer.sequence_length={buffer.sequence_length}: loss {config['loss']['name']!r} needs samples of "
            f"{loss.sequence_length} consecutive steps{_from_n_step(config, loss)}; "
            f"set buffer.sequence_length={loss.sequence_length}"
        )


def _from_n_step(config: Mapping[str, Any], loss: Loss) -> str:
    """`` (loss.n_step=N)`` where the loss has that key (its n-step return sets the length)."""
    return f" (loss.n_step={loss.sequence_length})" if "n_step" in config["loss"] else ""


def _on_policy(buffer_name: str) -> bool | None:
    try:
        return getattr(BUFFERS.get(buffer_name), "on_policy", None)
    except PluginError:  # a broken plugin must not hide the message it is listed in
        return None


def build_optimizers(config: Mapping[str, Any], loss: Loss, acceleration: Acceleration | None = None) -> Optimizers:
    """The ``optim`` node -> one optimizer per configured parameter group of the loss, over
    flat parameter buffers where ``acceleration`` lays them out so.

    Raises:
        PluginError: when the loss's ``param_groups`` miss a trainable parameter or name one
            twice.
        ConfigError: for a bad ``optim`` setting or an ``optim.<group>`` the loss lacks.
    """
    groups = loss.param_groups()
    seen: dict[int, str] = {}
    for group, params in groups.items():
        for p in params:
            if id(p) in seen:
                raise PluginError(
                    f"loss {config['loss']['name']!r}: a parameter is in both "
                    f"param_groups {seen[id(p)]!r} and {group!r}"
                )
            seen[id(p)] = group
    missing = sum(1 for p in loss.parameters() if p.requires_grad and id(p) not in seen)
    if missing:
        raise PluginError(
            f"loss {config['loss']['name']!r}: {missing} trainable parameters are in "
            f"none of its param_groups ({', '.join(groups)})"
        )
    delayed = tuple(getattr(loss, "delayed_groups", ()))
    unknown = [g for g in delayed if g not in groups]
    if unknown:
        raise PluginError(
            f"loss {config['loss']['name']!r}: delayed_groups {', '.join(unknown)} not among its "
            f"param_groups ({', '.join(groups)})"
        )
    return make_optimizers(config["optim"], groups, delayed, None if acceleration is None else acceleration.flatten)
