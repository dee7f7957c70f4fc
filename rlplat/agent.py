"""A trained agent from its checkpoint: rebuilt, loaded, evaluated, recorded to video.

The agent is rebuilt with :func:`rlplat.build.build` from the config stored in the
checkpoint (``env`` overrides applied, tracking off, without the loss's add-ons: they shape
training only, and their reference runs need not exist any more), then the loss's weights
and the transforms' statistics are loaded. Episodes are run as the trainer's evaluation runs
them: episode i reset with ``seed + 10000 + i``, transform statistics frozen, so that the
same episode count and seed reproduce a finished run's final ``eval/return_mean``.
What ``rlplat-eval`` does, from Python::

    from rlplat.agent import restore, run_episodes, summarize
    from rlplat.tracking.locate import locate

    located = locate("run", "outputs/2026-01-01/12-00-00", "sqlite:///outputs/mlflow.db")
    built = restore(located, {}, seed=None, device="cpu")
    try:
        metrics = summarize(run_episodes(built, episodes=10, deterministic=True))
    finally:
        built.parts.close()
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import OmegaConf

from rlplat.build import Build, build, single_env
from rlplat.checkpoint import CheckpointError
from rlplat.envs.base import Episode
from rlplat.envs.probe import env_spaces
from rlplat.envs.vector import VectorEnv
from rlplat.registry import ConfigError
from rlplat.tags import SOURCE_RUN_TAG
from rlplat.tracking.locate import Located
from rlplat.trainer import EVAL_SEED_OFFSET, evaluate_policy

if TYPE_CHECKING:
    from rlplat.tracking.store import Tracker

BATCH = 32
"""Most envs stepped together; :func:`run_episodes` runs its episodes in batches of this many."""


def restored_env_node(located: Located, env_overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's ``env`` node with ``env_overrides`` applied.

    Args:
        located: The checkpoint (:func:`rlplat.tracking.locate.locate`).
        env_overrides: Keys of the env node to replace or add (e.g. ``{"id": "Pendulum-v1"}``).

    Raises:
        CheckpointError: when the checkpoint holds no config with an env node.
    """
    config = located.state.get("config")
    if not isinstance(config, Mapping) or not isinstance(config.get("env"), Mapping):
        raise CheckpointError(f"checkpoint {str(located.checkpoint)!r} holds no config with an env node")
    return {**config["env"], **env_overrides}


def restore(located: Located, env_overrides: Mapping[str, Any], seed: int | None, device: str | None) -> Build:
    """Rebuild the run's parts from its checkpoint and load the agent: loss weights and
    transform statistics. Tracking is off in the rebuilt config.

    Args:
        located: The checkpoint (:func:`rlplat.tracking.locate.locate`).
        env_overrides: Keys of the env node to override (e.g. ``{"id": "Pendulum-v1"}``); the
            env must keep the observation shape and the kind and size of actions.
        seed: Replaces the run's seed (evaluation seeds derive from it); None keeps it.
        device: Replaces ``trainer.device`` (``cpu``, ``cuda`` or ``auto``); None keeps it.

    Returns:
        The :class:`rlplat.build.Build`; call ``.parts.close()`` when done.

    Raises:
        ConfigError: for overrides the build rejects (naming the key), or a checkpoint whose
            networks do not fit the rebuilt ones (another env's shapes).
        CheckpointError: for a checkpoint without config, weights or transform statistics.
    """
    config = copy.deepcopy(dict(located.state.get("config") or {}))
    config["env"] = restored_env_node(located, env_overrides)
    if env_overrides:
        check_same_spaces(located.state["config"]["env"], config["env"], env_overrides)
    config["tracking"] = {**config.get("tracking", {}), "enabled": False}
    if isinstance(config.get("loss"), Mapping):  # add-ons shape training; evaluation needs the policy alone
        config["loss"] = {key: value for key, value in config["loss"].items() if key != "addons"}
    if seed is not None:
        config["seed"] = seed
    if device is not None:
        config["trainer"] = {**config.get("trainer", {}), "device": device}
    built = build(OmegaConf.create(config))
    try:
        load_agent(built, located, env_overrides)
    except BaseException:
        built.parts.close()
        raise
    return built


def check_same_spaces(trained: Mapping[str, Any], given: Mapping[str, Any], overrides: Mapping[str, Any]) -> None:
    """Check that the env node ``given`` has the observation shape and the kind and size of
    actions of the env node ``trained`` (Box bounds may differ: actions are normalised). Both
    envs are made once, to read their spaces.

    Args:
        trained: The env node the agent was trained on.
        given: The env node with ``overrides`` applied.
        overrides: The env keys given, named in the error.

    Raises:
        ConfigError: naming the overrides and both envs' spaces.
    """

    def signature(space: Any) -> tuple[Any, ...]:
        return type(space).__name__, space.shape, getattr(space, "n", None)

    (obs_a, act_a), (obs_b, act_b) = env_spaces(trained), env_spaces(given)
    if (signature(obs_a), signature(act_a)) != (signature(obs_b), signature(act_b)):
        raise ConfigError(
            f"{' '.join(f'env.{k}={v!r}' for k, v in overrides.items())}: the agent was trained on observations "
            f"{obs_a} and actions {act_a}; this env has observations {obs_b} and actions {act_b}"
        )


def load_agent(built: Build, located: Located, env_overrides: Mapping[str, Any]) -> None:
    """Load the checkpoint's ``loss`` and ``transforms`` state into the rebuilt parts.

    Args:
        built: The parts rebuilt from the checkpoint's config.
        located: The checkpoint.
        env_overrides: The env keys given, named in the error when the state does not fit.

    Raises:
        CheckpointError: when the checkpoint lacks them, or holds another number of
            transform states than the config has transforms.
        ConfigError: when they do not fit (the env overrides changed the shapes).
    """
    state, parts, where = located.state, built.parts, str(located.checkpoint)
    for name in ("loss", "transforms"):
        if name not in state:
            raise CheckpointError(f"checkpoint {where!r} holds no {name!r} state")
    if len(state["transforms"]) != len(parts.transforms):
        raise CheckpointError(f"checkpoint {where!r} holds {len(state['transforms'])} transform states, "
                              f"the run's config {len(parts.transforms)}")  # fmt: skip
    try:
        loss: Any = parts.loss  # an nn.Module (LossFactory); Loss lists only what the trainer uses
        loss.load_state_dict(state["loss"])
        for transform, saved in zip(parts.transforms, state["transforms"]):
            transform.load_state_dict(saved)
    except (RuntimeError, KeyError, ValueError) as error:
        given = " ".join(f"env.{k}={v!r}" for k, v in env_overrides.items()) or "the run's env"
        reason = " ".join(str(error).split())[:300]
        raise ConfigError(f"{given}: the checkpoint's agent does not fit this env ({reason})") from error


def run_episodes(built: Build, episodes: int, deterministic: bool) -> list[Episode]:
    """Run ``episodes`` episodes of the rebuilt agent, at most :data:`BATCH` envs at a time,
    as the trainer's evaluation does (transform statistics frozen).

    Args:
        built: The agent (:func:`restore`).
        episodes: How many episodes, >= 1; episode i is reset with ``seed + 10000 + i``.
        deterministic: Act with the policy's mode (True) or sample actions (False).

    Returns:
        The episodes in order, each with its return and length (env steps).
    """
    parts = built.parts
    make_env = single_env(built.env.node, parts.transforms)
    found: list[Episode] = []
    for start in range(0, episodes, BATCH):
        env = VectorEnv(make_env, min(BATCH, episodes - start), list(parts.transforms), update_transforms=False)
        try:
            seed = parts.seed + EVAL_SEED_OFFSET + start
            found += evaluate_policy(parts.policy, env, parts.device, seed, deterministic)
        finally:
            env.close()
    return found


def summarize(episodes: list[Episode]) -> dict[str, float]:
    """The statistics of ``episodes`` (at least one), keyed as the trainer logs them:
    ``eval/return_{mean,std,min,max}``, ``eval/length_{mean,std,min,max}`` (env steps) and
    ``eval/episodes``; std is the population std."""
    metrics: dict[str, float] = {}
    for name, values in (("return", [e.return_ for e in episodes]), ("length", [e.length for e in episodes])):
        array = np.asarray(values, dtype=np.float64)
        for stat, value in (("mean", array.mean()), ("std", array.std()), ("min", array.min()), ("max", array.max())):
            metrics[f"eval/{name}_{stat}"] = float(value)
    metrics["eval/episodes"] = float(len(episodes))
    return metrics


def evaluation_tracker(
    located: Located, built: Build, uri: str, default_uri: str, say: Callable[[str], None]
) -> tuple[Tracker, str]:
    """The tracker of an evaluation's MLflow run, and the run's name: in the source run's store
    and experiment when the run is known; else in ``uri`` and the run's configured experiment
    (with ``rlplat-train``'s artifact folder when ``uri`` is ``default_uri``, the working
    directory's store). ``say``: where the tracker's one-line notices go.

    Raises:
        ConfigError: when no tracking server answers at the store's URI.
    """
    from rlplat.tracking.store import Tracker

    if located.run_id is not None and located.tracking_uri is not None:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=located.tracking_uri)
        source = client.get_run(located.run_id)
        experiment = client.get_experiment(source.info.experiment_id).name
        name = source.info.run_name or located.run_id
        return Tracker(located.tracking_uri, experiment, None, say=say), f"eval-{name}"
    experiment = built.tracking.experiment or "rlplat"
    artifacts = str(Path.cwd() / "outputs" / "mlartifacts") if uri == default_uri else None
    return Tracker(uri, experiment, artifacts, say=say), f"eval-{located.checkpoint.stem}"


def record_evaluation(
    tracker: Tracker,
    name: str,
    located: Located,
    built: Build,
    metrics: Mapping[str, float],
    episodes: int,
    deterministic: bool,
    command: str,
) -> str:
    """Log an evaluation's ``metrics`` (:func:`summarize` of its episodes, at step = the
    checkpoint's frames) as a new MLflow run ``name``, with its settings as params and the tag
    ``rlplat.source_run``, no parent; returns the run's id."""
    from mlflow.utils.mlflow_tags import MLFLOW_SOURCE_NAME

    from rlplat import __version__

    params = {
        "episodes": str(episodes),
        "deterministic": str(deterministic).lower(),
        "checkpoint": str(located.checkpoint.resolve()),
        "env.id": built.env.title,
        "seed": str(built.parts.seed),
        "device": str(built.parts.device),
    }
    prog = command.split(" ", 1)[0]
    tags = {"command": command, MLFLOW_SOURCE_NAME: prog, "rlplat.version": __version__}
    if located.run_id is not None:
        tags[SOURCE_RUN_TAG] = located.run_id
    run_id = tracker.start(name, params, tags)
    status = "FAILED"
    try:
        tracker.log_metrics(metrics, step=int(located.state.get("frames", 0)))
        status = "FINISHED"
    finally:
        tracker.end(status)
    return run_id


def record_video(
    located: Located,
    env_overrides: Mapping[str, Any],
    seed: int | None,
    device: str | None,
    episodes: int,
    fps: int,
    deterministic: bool,
    out: Path | None = None,
) -> Path:
    """What ``rlplat-record`` does: check that the env can render (before the build: fails
    fast), rebuild the agent (:func:`restore`) and write its ``episodes`` one after another
    (episode i reset with seed + 10000 + i) to a video (:func:`rlplat.video.record_episodes`).

    Args:
        out: The video file; None: ``<run dir>/videos/<checkpoint name>.mp4`` (``./videos/...``
            for a checkpoint outside a run directory).

    Returns:
        The file written, ``out`` or a GIF in its place when no ffmpeg encoder is available.

    Raises:
        ConfigError: for an env that cannot render, a bad override or a missing imageio.
    """
    from rlplat.video import VIDEO_DIR, record_episodes, render_env_maker, require_imageio

    require_imageio()
    make_env = render_env_maker(restored_env_node(located, env_overrides))
    parts = restore(located, env_overrides, seed, device).parts
    try:
        out = out or (located.run_dir or Path.cwd()) / VIDEO_DIR / f"{located.checkpoint.stem}.mp4"
        return record_episodes(
            parts.policy, make_env, parts.transforms, episodes, parts.seed + EVAL_SEED_OFFSET,
            out, fps, deterministic, parts.device,
        )  # fmt: skip
    finally:
        parts.close()


def log_video(tracking_uri: str, run_id: str, path: Path) -> None:
    """Upload the video ``path`` as an artifact of the MLflow run ``run_id``, under ``videos/``."""
    from mlflow import MlflowClient

    from rlplat.video import VIDEO_DIR

    MlflowClient(tracking_uri=tracking_uri).log_artifact(run_id, str(path), VIDEO_DIR)
