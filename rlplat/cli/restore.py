"""What ``rlplat-eval`` and ``rlplat-record`` share: their ``key=value`` arguments, one-line
errors, finding a run's checkpoint, and rebuilding its agent from it.

A run is named as ``rlplat-train resume=`` names it: a run id (looked up in ``tracking.uri``,
by default the ``outputs/mlflow.db`` store of the working directory), a run directory or a
checkpoint file; a run directory gives its ``final.pt``, else its newest readable periodic
checkpoint. The agent is rebuilt with :func:`rlplat.build.build` from the config stored in
the checkpoint (``env.<key>=...`` overriding its env node, tracking off, without the loss's
add-ons: they shape training only, and their reference runs need not exist any more), then
the loss's weights and the transforms' statistics are loaded.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rlplat.checkpoint import CheckpointError
from rlplat.cli.args import ArgumentParser, Key, boolean, integer, shown, text
from rlplat.cli.locate import Located, locate
from rlplat.registry import ConfigError, closest
from rlplat.settings import DEVICES, check_choice

if TYPE_CHECKING:
    from rlplat.build import Build

ENV_PREFIX = "env."


def device(key: str, value: str) -> str:
    """``cpu``, ``cuda`` or ``auto``."""
    check_choice(key, value, DEVICES)
    return value


def env_value(key: str, value: str) -> Any:
    """A value for the env node, read as YAML (``100`` an int, ``{g: 9.81}`` a mapping)."""
    try:
        return yaml.safe_load(value) if value else value
    except yaml.YAMLError as error:
        raise ConfigError(f"{key}={value!r}: not a valid YAML value ({' '.join(str(error).split())})") from None


COMMON_KEYS = {
    "deterministic": Key(boolean, True, "act with the policy's mode (true) or sample actions (false)"),
    "seed": Key(
        integer(0),
        None,
        "episode i is reset with seed + 10000 + i, as in training's evaluations; default: the run's seed",
    ),  # fmt: skip
    "device": Key(device, None, "cpu, cuda or auto; default: the run's trainer.device"),
    "tracking.uri": Key(text, None, "MLflow store to look a run id up in; default: outputs/mlflow.db here"),
}
"""Keys both commands take, besides ``env.<key>`` (any key of the run's env node)."""


def parse_pairs(pairs: Sequence[str], keys: Mapping[str, Key]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``key=value`` arguments -> (the values of ``keys``, defaults filled in; env overrides).

    Raises:
        ConfigError: for an argument without ``=``, an unknown key (with the valid keys and
            the closest), or a bad value.
    """
    values = {name: key.default for name, key in keys.items()}
    env: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{pair!r}: expected key=value, e.g. episodes=10")
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            env[name[len(ENV_PREFIX) :]] = env_value(name, value)
        elif name in keys:
            values[name] = keys[name].parse(name, value)
        else:
            valid = [*keys, f"{ENV_PREFIX}<key>"]
            message = f"{pair}: unknown key {name!r}. Valid keys: {', '.join(valid)}."
            suggestion = closest(name, [*keys, f"{ENV_PREFIX}id"])
            raise ConfigError(message + (f" Did you mean {suggestion!r}?" if suggestion else ""))
    return values, env


def argument_parser(prog: str, description: str, keys: Mapping[str, Key]) -> ArgumentParser:
    """The parser of ``<prog> RUN [key=value ...]``, every key listed in ``--help``."""
    rows = [(f"{name}={shown(k.default)}", k.help) for name, k in keys.items()]
    env_help = "override a key of the run's env node, e.g. env.id=Pendulum-v1 env.max_episode_steps=100"
    rows.append((f"{ENV_PREFIX}<key>=VALUE", env_help))
    listed = "\n".join(f"  {key}".ljust(26) + text for key, text in rows)
    parser = ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"keys:\n{listed}",
    )
    parser.add_argument("run", nargs="?", help="a run id (MLflow), a run directory or a checkpoint file")
    parser.add_argument("pairs", nargs="*", metavar="key=value", help="settings, listed below")
    return parser


def parse_command(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, keys: Mapping[str, Key]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``RUN key=value ...`` -> (the run as given, the values of ``keys``, env overrides).

    Raises:
        ConfigError: for a missing run or a bad ``key=value`` (see :func:`parse_pairs`).
    """
    args = parser.parse_args(argv)
    if args.run is None:
        raise ConfigError("give the run: a run id, a run directory or a checkpoint file (see --help)")
    values, env = parse_pairs(args.pairs, keys)
    return args.run, values, env


def locate_run(target: str, tracking_uri: str) -> Located:
    """:func:`rlplat.cli.locate.locate` for evaluation (``final.pt`` first), which never
    creates a store: a run id given for an sqlite store that does not exist is an error.

    Raises:
        ConfigError: for a target that is no checkpoint, run directory or known run id, or a
            checkpoint that cannot be read.
    """
    if not target:
        raise ConfigError("run='': give a run id, a run directory or a checkpoint file")
    path = Path(target).expanduser()
    looks_like_id = not path.exists() and "/" not in target and not target.endswith(".pt")
    if looks_like_id and tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri.removeprefix("sqlite:///").split("?", 1)[0])
        if not database.is_file():
            raise ConfigError(
                f"run={target!r}: no such file or directory, and no MLflow store at {tracking_uri} to look a run "
                "id up in (give a run id, a run directory or a checkpoint file; tracking.uri=... names a store)"
            )
    return locate("run", target, tracking_uri, which="final", warn=lambda m: print(f"warning: {m}", file=sys.stderr))


def restored_env_node(located: Located, env_overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's ``env`` node with ``env.<key>=`` overrides applied.

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
        located: The checkpoint (:func:`locate_run`).
        env_overrides: Keys of the env node to override (e.g. ``{"id": "Pendulum-v1"}``).
        seed: Replaces the run's seed (evaluation seeds derive from it); None keeps it.
        device: Replaces ``trainer.device``; None keeps it.

    Returns:
        The :class:`rlplat.build.Build`; call ``.parts.close()`` when done.

    Raises:
        ConfigError: for overrides the build rejects (naming the key), or a checkpoint whose
            networks do not fit the rebuilt ones (another env's shapes).
        CheckpointError: for a checkpoint without config, weights or transform statistics.
    """
    from omegaconf import OmegaConf

    from rlplat.build import build

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
    """Raise ConfigError unless the overridden env has the observation shape and the kind and
    size of actions the agent was trained on (Box bounds may differ: actions are normalised).

    Raises:
        ConfigError: naming the overrides and both envs' spaces.
    """
    from rlplat.envs.probe import env_spaces

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

    Raises:
        CheckpointError: when the checkpoint lacks them.
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
