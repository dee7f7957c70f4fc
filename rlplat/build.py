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
  names one of them;
* ``loss.addons`` go to a loss that takes them, and a reference policy an add-on loads from
  another run reads this run's observations and acts in its action space (:class:`PolicyFromRun`).

The parts go to :class:`rlplat.trainer.Trainer`, which only runs them.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import gymnasium
import numpy as np
import torch
from omegaconf import DictConfig
from threadpoolctl import threadpool_limits

from rlplat.accel import Acceleration
from rlplat.accel.plan import Warn, warn_on_stderr
from rlplat.buffers.base import Buffer
from rlplat.checkpoint import CheckpointError, rng_state, set_rng_state
from rlplat.collectors.base import Collector
from rlplat.envs.base import check_observation_space
from rlplat.envs.pool import EnvPoolTask
from rlplat.envs.probe import (  # the env probe rlplat-train's pre-check runs too
    EnvSpec,
    check_renderable,
    entry_node,
    env_backend,
    probe_env,
)
from rlplat.envs.vector import VectorEnv
from rlplat.loggers import check_loggers
from rlplat.losses.actor_critic import ActorCriticLoss
from rlplat.losses.addons import PolicyLoader, build_addons
from rlplat.losses.addons.base import addon_names
from rlplat.losses.base import Loss, declared, undeclared_reason
from rlplat.networks.actor_critic import ActorCritic
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
from rlplat.settings import CheckpointConfig, TrainerConfig, check_seed, resolve_config
from rlplat.tracking.locate import Located, locate
from rlplat.tracking.settings import TrackingConfig
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
        config: The resolved config as plain containers (what is logged and checkpointed).
        acceleration: Which accelerated paths the run takes, and why (one line for the console).
        env: The ``env`` node, read once (what the commands show and record of the env).
        seed: The run's seed.
    """

    parts: Parts
    trainer: TrainerConfig
    checkpoint: CheckpointConfig
    tracking: TrackingConfig
    config: Mapping[str, Any]
    acceleration: str
    env: EnvSpec
    seed: int


def build(cfg: DictConfig, warn: Warn = warn_on_stderr, probe: gymnasium.Env | None = None) -> Build:
    """Build every part from the composed config, checking each constraint between them.

    Seeds Python, numpy and torch and sets torch's CPU threads first (networks initialised
    reproducibly); chooses the accelerated paths (:mod:`rlplat.accel`).

    Args:
        cfg: The composed rlplat config (conf/config.yaml and its groups).
        warn: Called with a one-line warning when an accelerated path disagrees with its
            definition (it then gives way to it).
        probe: The open env :func:`rlplat.hydra_ext.validate.check_config` built from the
            same ``env`` node, read instead of another (and closed); None: one is built.

    Returns:
        The frozen :class:`Build`; call ``build.parts.close()`` when done.

    Raises:
        ConfigError: for any invalid value or mismatch, naming the keys, values and what is valid.
        PluginError: for a plugin entry that fails to load or breaks its protocol.
    """
    try:
        config, trainer, checkpoint, tracking, seed = read_settings(cfg)
    except BaseException:
        if probe is not None:
            probe.close()
        raise
    set_threads(trainer.num_threads)
    device = resolve_device(trainer.device)
    seed_everything(seed)

    env_node = config["env"]
    transforms, observation_space, action_space = build_transforms(config["transforms"], env_node, seed, probe)
    load_policy = PolicyFromRun(tracking.uri, transforms, observation_space, action_space, device, warn)
    loss = build_loss(config, observation_space, action_space, load_policy).to(device)
    check_buffer_kind(config, loss)
    acts_elsewhere = check_collector_fits(config, loss)
    acceleration = Acceleration(
        loss, enabled=trainer.accel, compiled=trainer.compile, warn=warn, acts_elsewhere=acts_elsewhere
    )
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
    return Build(parts, trainer, checkpoint, tracking, config, acceleration.summary, EnvSpec.from_node(env_node), seed)


def read_settings(cfg: DictConfig) -> tuple[dict[str, Any], TrainerConfig, CheckpointConfig, TrackingConfig, int]:
    """The resolved config and the run's own settings: ``trainer``, ``checkpoint``,
    ``tracking`` (a relative sqlite path made absolute in the config too, so that a resume
    from its checkpoint finds the store) and ``seed``.

    Raises:
        ConfigError: for a bad setting, or a logger of ``tracking.also`` that is not installed.
    """
    config = resolve_config(cfg)
    trainer = TrainerConfig.from_node(config["trainer"])
    tracking = TrackingConfig.from_node(config["tracking"])
    config["tracking"]["uri"] = tracking.uri
    check_loggers(tracking.also)
    return config, trainer, CheckpointConfig.from_node(config["checkpoint"]), tracking, check_seed(config["seed"])


def set_threads(num_threads: int) -> None:
    """torch's CPU threads, and numpy's BLAS's (policies act in numpy on the CPU): its own pool
    would otherwise use every core, its idle threads spinning on the ones torch leaves free."""
    torch.set_num_threads(num_threads)
    threadpool_limits(num_threads, user_api="blas")


def check_collector_fits(config: Mapping[str, Any], loss: Loss) -> str | None:
    """Check that the collector fits the loss (:func:`check_policy_lag`); returns why the policy
    acts in other processes (the entry's ``acts_in_workers``), or None.

    Raises:
        ConfigError: as :func:`check_policy_lag`.
    """
    name = config["collector"]["name"]
    entry = COLLECTORS.get(name)
    check_policy_lag(config, loss, entry)
    return f"collector={name} acts in worker processes" if getattr(entry, "acts_in_workers", False) else None


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
    node: Mapping[str, Any], env_node: Mapping[str, Any], seed: int = 0, probe: gymnasium.Env | None = None
) -> tuple[tuple[Transform, ...], gymnasium.Space, gymnasium.Space]:
    """The ``transforms`` node (name -> kwargs, in order) -> the transforms, and the single
    env's observation and action spaces once they apply; a name set to null is left out (a
    preset cannot delete a key that an algo preset set).

    One probe env is built from ``env_node``: each env transform
    (:class:`rlplat.transforms.base.EnvTransform`) is built with the observation space of its
    input and wraps the probe in turn; the transforms over the batch are then built with the
    space after all of them, and fitted on the probe (:meth:`Transform.fit`). A ``probe``
    given (built from ``env_node`` already) is that env, unless an env transform needs a render
    mode; it is closed either way.

    Returns:
        ``(transforms in the node's order, observation space, action space)``.

    Raises:
        ConfigError: for a name no transform is registered as (the key is the name itself,
            ``transforms.<name>``), listing those that are; a transform that cannot take its
            input; an env that cannot render for ``from_pixels``; an observation entry no
            tensor holds (text not tokenised); or as :func:`rlplat.envs.probe.probe_env`.
    """
    given = probe
    try:
        chosen, wraps = _chosen_transforms(node)
        renders = [name for name, _ in chosen if wraps[name] and _render_mode(name) is not None]
        probe_node = dict(env_node)
        if renders:
            check_renderable(env_node, f"render pixels for transforms.{renders[0]}")
            probe_node["render_mode"] = _render_mode(renders[0])
            probe = None  # the given one was built without the render mode the transforms need
        probe = probe if probe is not None else probe_env(probe_node)  # the run's one probe env
    finally:
        if given is not None and given is not probe:
            given.close()
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


def _chosen_transforms(node: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], dict[str, bool]]:
    """The transforms the node keeps (not null), in order, and whether each wraps the env.

    Raises:
        ConfigError: for a name no transform is registered as, listing those that are.
    """
    names = TRANSFORMS.names()
    for name in node:
        if name not in names:
            suggestion = closest(name, names)
            hint = f" Did you mean {suggestion!r}?" if suggestion else ""
            raise ConfigError(f"transforms.{name}: no transform is named {name!r}. Valid: {', '.join(names)}.{hint}")
    chosen = [(name, kwargs) for name, kwargs in node.items() if kwargs is not None]
    return chosen, {name: _wraps_env(name) for name, _ in chosen}


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
    return TrainingEnvs(make_one, transforms)


@dataclass(frozen=True)
class TrainingEnvs:
    """The training envs' maker (:class:`rlplat.collectors.base.EnvMaker`): ``(num_envs,
    vectorization) -> VectorEnv`` of ``make_one``'s envs with ``transforms`` (updating their
    statistics). Pickles with cloudpickle, for collectors whose workers make their envs."""

    make_one: Any
    transforms: tuple[Transform, ...]

    def __call__(self, num_envs: int, vectorization: str) -> VectorEnv:
        return VectorEnv(self.make_one, num_envs, list(self.transforms), True, vectorization)


def build_loss(
    config: Mapping[str, Any],
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    load_policy: PolicyLoader | None = None,
) -> MovableLoss:
    """The ``loss`` node -> the loss, after checking it can act in ``action_space``, with the
    add-ons of ``loss.addons`` attached (:mod:`rlplat.losses.addons`).

    Args:
        config: The resolved config (its ``loss``, ``network`` and ``env`` nodes are read).
        observation_space: The env's single observation space, transforms applied.
        action_space: The env's single action space.
        load_policy: How add-ons load another run's policy (:class:`PolicyFromRun`); None
            loads none (an add-on that needs one is refused).

    Raises:
        ConfigError: when the loss cannot act in the env (names both and the losses that can);
            for ``loss.addons`` the loss does not take, or that are unknown or misconfigured.
        PluginError: for a loss that defines an optional member without subclassing
            :class:`rlplat.losses.base.LossModule` (:func:`check_declared`).
    """
    node = dict(config["loss"])
    addons = node.pop("addons", None)
    loss_name = config["loss"].get("name")
    check_declared(loss_name, LOSSES.get(loss_name, key="loss.name"))  # before its class attributes are read
    check_action_space(loss_name, action_space, config["env"], observation_space)
    names = addon_names(addons)
    takes_addons = _takes_addons(node["name"])
    if names and not takes_addons:
        raise ConfigError(
            f"loss.addons ({', '.join(names)}): loss {node['name']!r} takes no add-ons. "
            f"Losses that do: {', '.join(addon_losses())}; or leave loss.addons empty"
        )
    torso_node, core = split_core(config["network"])
    if core is not None:
        check_recurrent_core(node["name"], core)

    def torso(out_features: int, space: gymnasium.Space) -> torch.nn.Module:
        return NETWORKS.build("network", torso_node, space, out_features, also_valid=CORE_KEYS)

    factory: NetworkFactory = ConfiguredNetwork(torso, observation_space, core)
    also_valid = ("addons",) if takes_addons else ()
    loss = LOSSES.build("loss", node, observation_space, action_space, factory, protocol=Loss, also_valid=also_valid)
    check_declared(node["name"], loss)
    if names:
        actor_critic = cast(ActorCriticLoss, loss)
        actor_critic.check_addons(names)  # before loading anything
        actor_critic.attach_addons(build_addons(addons, observation_space, action_space, load_policy or _no_loading))
    return cast(MovableLoss, loss)


def _takes_addons(loss_name: str) -> bool:
    """Whether the loss entry takes ``loss.addons``: an :class:`ActorCriticLoss` whose class
    leaves ``takes_addons`` true (read before construction)."""
    target = LOSSES.get(loss_name, key="loss.name")
    return isinstance(target, type) and issubclass(target, ActorCriticLoss) and target.takes_addons


def addon_losses() -> list[str]:
    """The (loadable) loss entries that take ``loss.addons``."""
    able = []
    for name in LOSSES.names():
        try:
            if _takes_addons(name):
                able.append(name)
        except PluginError:  # a broken plugin must not hide the message it is listed in
            continue
    return able


def _no_loading(source: str, key: str) -> ActorCritic:
    raise ConfigError(f"{key}={source!r}: this build loads no other run's policy (build_loss without load_policy)")


@dataclass(frozen=True)
class PolicyFromRun:
    """rlplat's :class:`rlplat.losses.addons.PolicyLoader`: the policy of another run, rebuilt
    from its checkpoint's own config and weights.

    The source is found as ``rlplat-eval`` finds a run (:func:`rlplat.tracking.locate.locate`:
    a run id in ``tracking_uri``, a run directory's ``final.pt`` or newest checkpoint, or a
    checkpoint file). Before its weights are loaded it must fit this run: the same
    observation and action spaces (kind, shape, dtype, size), observation transforms over the
    batch that map observations alike (:func:`check_same_observations`), and a feed-forward
    actor-critic agent (its loss an :class:`ActorCriticLoss`, ``network.core`` null). Python's,
    numpy's and torch's random states are left as they were, so that loading a reference does
    not change this run's draws. The agent is returned frozen (``requires_grad`` false, eval
    mode) on ``device``.

    Attributes:
        tracking_uri: The store a run id is looked up in: this run's ``tracking.uri``.
        transforms: This run's transforms, built and fitted.
        observation_space: This run's single observation space, transforms applied.
        action_space: This run's single action space.
        device: This run's device.
        warn: Called with a warning when an unreadable checkpoint is skipped.
    """

    tracking_uri: str
    transforms: tuple[Transform, ...]
    observation_space: gymnasium.Space
    action_space: gymnasium.Space
    device: torch.device
    warn: Warn = warn_on_stderr

    def __call__(self, source: str, key: str) -> ActorCritic:
        """See :meth:`rlplat.losses.addons.PolicyLoader.__call__`."""
        located = self.locate(source, key)
        where = f"{key}={source!r}"
        config = located.state.get("config")
        if not isinstance(config, Mapping) or not {"env", "loss", "network"} <= set(config):
            config = None  # not a run's checkpoint
        if config is None or "loss" not in located.state:
            raise ConfigError(f"{where}: {str(located.checkpoint)!r} holds no config and loss weights of a run")
        _, core = split_core(config["network"])
        if core is not None:
            raise ConfigError(
                f"{where}: that run's policy is recurrent (network.core={core.kind!r}); a reference is a "
                "feed-forward policy"
            )
        saved = rng_state()
        try:
            agent = self._rebuild(where, located, config)
        finally:
            set_rng_state(saved)
        agent.requires_grad_(False)
        return agent.eval().to(self.device)

    def locate(self, source: str, key: str) -> Located:
        """The checkpoint ``source`` names (``final.pt`` first for a run directory).

        Raises:
            ConfigError: naming ``key`` for a source that is not a non-empty string, or that no
                checkpoint, run directory or run id of ``tracking_uri`` is.
        """
        if not isinstance(source, str) or not source:
            raise ConfigError(f"{key}={source!r}: give a run id, a run directory or a checkpoint file")
        try:
            return locate(key, source, self.tracking_uri, which="final", warn=self.warn)
        except CheckpointError as error:  # a checkpoint file that cannot be read names only the file
            if str(error).startswith(f"{key}="):
                raise
            raise CheckpointError(f"{key}={source!r}: {error}") from error

    def _rebuild(self, where: str, located: Located, config: Mapping[str, Any]) -> ActorCritic:
        """The source run's agent, its weights loaded, after the checks of :class:`PolicyFromRun`."""
        transforms, observation_space, action_space = build_transforms(
            config.get("transforms") or {}, config["env"], int(config.get("seed", 0))
        )
        check_same_spaces(where, (self.observation_space, self.action_space), (observation_space, action_space))
        saved = located.state.get("transforms", [])
        if len(saved) != len(transforms):
            count = f"{len(saved)} transform states, its config {len(transforms)}"
            raise ConfigError(f"{where}: its checkpoint holds {count}")
        for transform, state in zip(transforms, saved, strict=True):
            transform.load_state_dict(state)
        check_same_observations(where, self.transforms, transforms, self.observation_space)
        node = {k: v for k, v in config["loss"].items() if k != "addons"}  # a reference needs no add-ons of its own
        loss = build_loss({**config, "loss": node}, observation_space, action_space)
        if not isinstance(loss, ActorCriticLoss):
            raise ConfigError(
                f"{where}: the run's loss {node.get('name')!r} has no actor-critic policy to compare with; give a run "
                f"of {', '.join(addon_losses())}"
            )
        try:
            loss.load_state_dict(located.state["loss"])
        except (RuntimeError, KeyError, ValueError) as error:
            reason = " ".join(str(error).split())[:300]
            raise ConfigError(f"{where}: its checkpoint's weights do not fit its config ({reason})") from error
        return loss.agent


def space_signature(space: gymnasium.Space) -> tuple[Any, ...]:
    """What a policy's inputs or outputs depend on in a space: its kind, shape, dtype and size
    (``n``, ``nvec``), key by key for a Dict (Box bounds left out: actions are normalised)."""
    if isinstance(space, gymnasium.spaces.Dict):
        return ("Dict", tuple((key, space_signature(sub)) for key, sub in space.spaces.items()))
    nvec = getattr(space, "nvec", None)
    n = getattr(space, "n", None)
    return (
        type(space).__name__,
        tuple(space.shape or ()),
        str(space.dtype),
        None if n is None else int(n),
        None if nvec is None else tuple(int(v) for v in np.ravel(nvec)),
    )


def check_same_spaces(
    where: str, ours: tuple[gymnasium.Space, gymnasium.Space], theirs: tuple[gymnasium.Space, gymnasium.Space]
) -> None:
    """Raise ConfigError (starting with ``where``) unless both (observation, action) spaces
    have the same :func:`space_signature`."""
    if [space_signature(s) for s in ours] != [space_signature(s) for s in theirs]:
        raise ConfigError(
            f"{where}: that run's policy reads observations {theirs[0]} and acts in {theirs[1]}; this run has "
            f"observations {ours[0]} and actions {ours[1]}"
        )


def check_same_observations(
    where: str, ours: Sequence[TransformLike], theirs: Sequence[TransformLike], observation_space: gymnasium.Space
) -> None:
    """Raise ConfigError (starting with ``where``) unless another run's policy reads this run's
    observations as it read its own, for the whole run: this run's and that run's transforms
    over the batch (those that are not env transforms, e.g. ``obs_norm``) map a probe batch of
    observations alike, and this run's keep no running statistics (a copy of them fed the
    probe batch with ``update=True`` maps it as before). Fixed statistics are alike where they
    were given or gathered alike (``transforms.obs_norm.init_steps`` with the same env and seed).
    """
    ours = [t for t in ours if not isinstance(t, EnvTransform)]
    theirs = [t for t in theirs if not isinstance(t, EnvTransform)]
    if not ours and not theirs:
        return
    if not isinstance(observation_space, gymnasium.spaces.Box):
        raise ConfigError(f"{where}: transforms over {observation_space} observations cannot be compared; use none")
    probe = copy.deepcopy(observation_space)
    probe.seed(0)
    batch = torch.as_tensor(np.stack([probe.sample() for _ in range(16)]))
    batch = batch.float() if batch.is_floating_point() else batch

    def mapped(chain: Sequence[TransformLike], update: bool = False) -> torch.Tensor:
        x = batch.clone()
        for transform in chain:
            x = transform.transform_observation(x, update)
        return x.double()

    fix = (
        "give both runs fixed statistics (transforms.obs_norm.init_steps=N with the same env and seed, or "
        "transforms.obs_norm.mean and std) or none (transforms.obs_norm=null)"
    )
    if not torch.allclose(mapped(ours), mapped(theirs), rtol=1e-5, atol=1e-6):
        raise ConfigError(
            f"{where}: that run's transforms ({_names(theirs)}) map observations otherwise than this run's "
            f"({_names(ours)}), so its policy would read inputs it was not trained on; {fix}"
        )
    moving = copy.deepcopy(ours)
    mapped(moving, update=True)
    if not torch.allclose(mapped(moving), mapped(ours), rtol=1e-5, atol=1e-6):
        raise ConfigError(
            f"{where}: this run's transforms ({_names(ours)}) update running statistics as it trains, so that run's "
            f"policy would read observations mapped otherwise than it was trained on; {fix}"
        )


def _names(transforms: Sequence[TransformLike]) -> str:
    return ", ".join(type(t).__name__ for t in transforms) or "none"


def check_declared(loss_name: str, loss: object) -> None:
    """A loss entry's class, or the loss it built, that defines an optional member of
    :class:`rlplat.losses.base.LossModule` (``in_keys``, ``delayed_groups`` ...) subclasses
    it: rlplat reads those members from a ``LossModule`` only, so one defined elsewhere would
    be ignored.

    Raises:
        PluginError: naming the loss, the members and the base class to subclass.
    """
    reason = undeclared_reason(loss)
    if reason is not None:
        raise PluginError(f"loss {loss_name!r}: {reason}")


def check_recurrent_core(loss_name: str, core: CoreSpec) -> None:
    """A recurrent core goes only to a loss that puts one after its torsos (class attribute
    ``LossModule.recurrent_cores``), never ignored.

    Raises:
        ConfigError: naming ``network.core`` and the losses that take one.
    """
    if declared(LOSSES.get(loss_name, key="loss.name")).recurrent_cores:
        return
    able = []
    for name in LOSSES.names():
        try:
            if declared(LOSSES.get(name)).recurrent_cores:
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
    """The action-space types a loss entry can act in: its class attribute
    ``LossModule.action_spaces`` (by default Box and Discrete)."""
    return declared(loss_cls).action_spaces


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
    recurrent loss (``LossModule.recurrent`` true) takes the rollout's
    sequences of any length of at least 2 (``buffer.sequence_length``).

    Raises:
        ConfigError: naming the key to set and its value.
    """
    members = declared(loss)
    if members.recurrent:
        if buffer.sequence_length < 2 or not buffer.on_policy:
            raise ConfigError(
                f"buffer.sequence_length={buffer.sequence_length}: a recurrent core (network.core="
                f"{config['network'].get('core')}) learns through time from sequences of the rollout; set "
                "buffer.sequence_length to the steps back-propagated through (truncated BPTT), e.g. 8"
            )
        return
    if members.recurrent_cores and loss.sequence_length == 1 and buffer.sequence_length > 1:
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


def check_policy_lag(config: Mapping[str, Any], loss: Loss, collector_entry: Any) -> None:
    """An on-policy loss learns from the actions of the policy it updates: a collector whose
    rollouts come from older weights (``asynchronous``) is refused unless the loss corrects
    for the lag (``LossModule.corrects_policy_lag``: V-trace).

    Raises:
        ConfigError: naming the collector, the loss and what fits.
    """
    if not getattr(collector_entry, "asynchronous", False) or not loss.on_policy:
        return
    if declared(loss).corrects_policy_lag:
        return
    name = config["collector"]["name"]
    raise ConfigError(
        f"collector={name} does not fit loss {config['loss']['name']!r}: its workers act with weights some updates "
        "older than the learner's, and the loss is on-policy without a correction for that lag. Use algo=impala "
        "(V-trace corrects it), an off-policy loss (dqn, sac, td3, ddpg), or collector=sync or collector=ray "
        "(whose workers act with the learner's weights)"
    )


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
    delayed = tuple(declared(loss).delayed_groups)
    unknown = [g for g in delayed if g not in groups]
    if unknown:
        raise PluginError(
            f"loss {config['loss']['name']!r}: delayed_groups {', '.join(unknown)} not among its "
            f"param_groups ({', '.join(groups)})"
        )
    return make_optimizers(config["optim"], groups, delayed, None if acceleration is None else acceleration.flatten)
