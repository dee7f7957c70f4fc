"""The checks ``rlplat-train`` runs before torch is imported, so that bad input is reported
within a second or two, with nothing written: :func:`check_command_line` before Hydra runs,
:func:`check_config` after it composed the config. Range checks call the constructors' own
functions (:func:`rlplat.registry.check_in_range` and kin); checks that need the built
components are :func:`rlplat.build.build`'s. Imports neither torch nor MLflow.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, cast

import gymnasium
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf

from rlplat.command_line import is_multirun, prints_only
from rlplat.envs.probe import probe_env
from rlplat.hydra_ext.compose import CONFIG_MODULE
from rlplat.hydra_ext.options import GROUPS, PRESET_GROUPS, register_group_options
from rlplat.hydra_ext.overrides import unroute
from rlplat.hydra_ext.plugins import register_hydra_plugins
from rlplat.loggers import check_loggers
from rlplat.registry import (
    BUFFERS,
    BUILTIN_DISTRIBUTION,
    COLLECTORS,
    LOSSES,
    OPTIMIZERS,
    ConfigError,
    Registry,
    check_at_least,
    check_in_range,
    check_minibatch_size,
    check_positive,
    closest,
)
from rlplat.settings import CheckpointConfig, TrainerConfig, check_seed, group_optimizer_settings, resolve_config
from rlplat.tracking.settings import TrackingConfig

GRAMMAR_URL = "https://hydra.cc/docs/advanced/override_grammar/basic/"
OPEN_HYDRA_NODES = ("hydra.job.env_set", "hydra.sweeper", "hydra.launcher", "hydra.callbacks", "hydra.job_logging",
                    "hydra.hydra_logging", "hydra.help", "hydra.hydra_help")  # fmt: skip
"""Nodes of Hydra's config whose keys are the user's or a plugin's: a key may be added there."""
_KIND_WORDS = {
    bool: ("true or false (bool)", "booleans (bool)"),
    int: ("an integer (int)", "integers (int)"),
    float: ("a number (float)", "numbers (float)"),
    str: ("a string (str)", "strings (str)"),
    list: ("a list", "lists"),
    dict: ("a mapping of keys", "mappings"),
}
"""Type of a default -> how a value of that type is described: alone, in a list."""


def parse_overrides(args: Sequence[str]) -> list[Override]:
    """The overrides in ``args`` (flags skipped), parsed in order by Hydra's public parser.

    Raises:
        ConfigError: for an override that does not parse: it, the parser's complaint, the grammar.
    """
    parser = OverridesParser.create()
    parsed = []
    for arg in args:
        if arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            continue
        try:
            parsed += parser.parse_overrides([arg])
        except OverrideParseException as error:
            lines = [line.strip() for line in str(error.message).splitlines()]
            detail = "; ".join(
                line for line in lines if line and not line.startswith(("See https", "Error parsing override", "^"))
            )
            raise ConfigError(
                f"{unroute(arg)}: not a valid override ({detail}). Valid forms: key=value, +key=value (adds a key), "
                f"~key (deletes one); quote a value with spaces or special characters, key='a b' ({GRAMMAR_URL})"
            ) from error
    return parsed


def check_command_line(args: Sequence[str], cwd: Path | None = None) -> None:
    """Check the command line (``args``, routed) alone: every override parses, a ``hydra.*`` key
    added exists, and unless a flag only prints, the run directory (``hydra.run.dir``, or
    ``hydra.sweep.dir`` with ``-m``) and a ``tracking.uri=sqlite:///...`` store's directory are
    writable, relative paths from ``cwd`` (None: the current directory).

    Raises:
        ConfigError: naming the override, or ``key='value': not writable (reason)``.
    """
    overrides = parse_overrides(args)
    check_hydra_keys(overrides)
    if prints_only(args):
        return
    cwd = Path.cwd() if cwd is None else cwd
    given = {o.key_or_group: o.value() for o in overrides if not o.is_delete()}
    run_key = "hydra.sweep.dir" if is_multirun(args) else "hydra.run.dir"
    run_dir = given.get(run_key, _default_hydra_value(run_key))
    if isinstance(run_dir, str):
        check_writable(run_key, run_dir, Path(_literal_prefix(run_dir)), cwd)
    uri = given.get("tracking.uri")
    if isinstance(uri, str) and uri.startswith("sqlite:///") and given.get("tracking.enabled") is not False:
        path = uri.removeprefix("sqlite:///").split("?", 1)[0]
        prefix = _literal_prefix(path)
        if prefix and path != ":memory:":
            check_writable("tracking.uri", uri, Path(prefix).parent if prefix == path else Path(prefix), cwd)


def check_hydra_keys(overrides: Sequence[Override]) -> None:
    """Raise ConfigError for a ``hydra.*`` key added (``+``, ``++``) that Hydra's own config lacks,
    outside :data:`OPEN_HYDRA_NODES`: nothing would read it. The message lists the node's keys."""
    from hydra.conf import HydraConf

    schema = OmegaConf.to_container(OmegaConf.structured(HydraConf), resolve=False)
    for override in overrides:
        key = override.key_or_group
        if not key.startswith("hydra.") or not (override.is_add() or override.is_force_add()):
            continue
        node: Any = {"hydra": schema}
        *parents, last = key.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if key.startswith(OPEN_HYDRA_NODES) or not isinstance(node, dict) or last in node:
            continue  # a plugin's node (None in the schema) is its plugin's to check
        raise ConfigError(
            f"{unroute(override.input_line or key)}: Hydra has no setting {key!r}, and nothing else reads it. "
            f"Valid keys of {'.'.join(parents)}: {', '.join(node)}"
        )


def check_writable(key: str, value: str, path: Path, cwd: Path) -> None:
    """Raise ConfigError (``key='value': not writable (reason)``) unless a directory can be made
    in ``path`` (relative to ``cwd``) or its nearest existing ancestor: one is made and removed,
    as root passes permission checks, also on virtual file systems (``/proc``) that refuse it."""
    existing = next(p for p in (path, *path.parents) if (cwd / p).exists())
    shown = "the current directory" if str(existing) == "." else repr(str(existing))
    if not (cwd / existing).is_dir():
        reason = f"{shown} is a file, not a directory"
    elif not os.access(cwd / existing, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(cwd / existing).f_flag & os.ST_RDONLY)
        reason = f"{shown} is on a read-only file system" if read_only else f"no permission to write in {shown}"
    else:
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".rlplat-check-", dir=cwd / existing))
            return
        except OSError as error:
            reason = f"cannot create a directory in {shown}: {error.strerror or type(error).__name__}"
    raise ConfigError(f"{key}={value!r}: not writable ({reason})")


def _literal_prefix(text: str) -> str:
    """``text`` up to its first interpolation (``outputs/runs/${now:...}`` -> ``outputs/runs/``)."""
    return text.split("${", 1)[0]


def _default_hydra_value(key: str) -> Any:
    """The value of ``hydra.<...>`` in rlplat's primary config, uninterpolated."""
    value: Any = OmegaConf.to_container(OmegaConf.create(files(CONFIG_MODULE).joinpath("config.yaml").read_text()))
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_config(cfg: DictConfig, overrides: Sequence[str] | None = None) -> gymnasium.Env:
    """Check the composed config as far as it can be without torch, then build one probe env.

    The keys, types and NaN are checked against the defaults: the config composed with the
    same group choices and none of the values given (a second composition, only when values
    were given).

    Args:
        cfg: The composed config (its ``hydra`` node, if any, is ignored).
        overrides: Its overrides as Hydra records them; None reads ``hydra.overrides.task``.

    Returns:
        The probe env, open, for :func:`rlplat.build.build` (``probe=``), which closes it.

    Raises:
        ConfigError: naming the key, the value and what is valid.
        PluginError: when a plugin the config selects fails to load.
    """
    config = resolve_config(cfg)
    parsed = parse_overrides(list(HydraConfig.get().overrides.task) if overrides is None else overrides)
    groups = {*GROUPS.values(), *PRESET_GROUPS}
    choices = [o.input_line or "" for o in parsed if o.key_or_group in groups or "/" in o.key_or_group]
    defaults = config if len(choices) == len(parsed) else default_config(choices)
    check_read(config, defaults)
    check_types(config, defaults)
    TrainerConfig.from_node(config.get("trainer", {}))
    CheckpointConfig.from_node(config.get("checkpoint", {}))
    check_loggers(TrackingConfig.from_node(config.get("tracking", {})).also)
    check_seed(config.get("seed"))
    check_ranges(config)
    return probe_env(config.get("env", {}), warn=True)


def check_read(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Raise ConfigError for a top-level key of ``config`` that is no key of ``defaults``: one
    added on the command line (``+note=x``) would be ignored without a word. Each node's keys
    are checked by its owner (its entry's constructor, or its settings)."""
    for key, value in config.items():
        if key not in defaults:
            message = f"{key}={value!r}: no part of rlplat reads {key!r}. Valid top-level keys: {', '.join(defaults)}."
            suggestion = closest(key, defaults)
            raise ConfigError(message + (f" Did you mean {suggestion!r}?" if suggestion else ""))


def default_config(choices: Sequence[str]) -> dict[str, Any]:
    """The config composed with group choices only (``algo=ppo``, ``+sweep=x``, ``~tuned``,
    ``hydra/launcher=...``), interpolations left as written: the defaults of :func:`check_types`.
    Uses the running Hydra app's search path when there is one, else rlplat's config module."""
    if GlobalHydra.instance().is_initialized():
        cfg = compose("config", overrides=list(choices))
    else:
        register_hydra_plugins()
        register_group_options()
        with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
            cfg = compose("config", overrides=list(choices))
    return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False))


def check_types(config: Any, defaults: Any, prefix: str = "") -> None:
    """No value in ``config`` (a node at dotted path ``prefix``) is NaN, which passes every
    range check, and each has the type of its key's default in ``defaults``: int (not bool),
    float (or int), bool, str, list (of the default's item type), mapping (checked key by key).
    A null or interpolated default, or none, accepts any type; a number's or a transform's
    default accepts null (it disables: ``optim.max_grad_norm=null``, ``transforms.obs_norm=null``).

    Raises:
        ConfigError: ``optim.lr=[1]: must be a number (float), like the default 0.0003``, or
            ``loss.kl_target=nan: must be a number, not NaN``.
    """
    items = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in items:
        name = f"{prefix.rstrip('.')}[{key}]" if isinstance(key, int) else f"{prefix}{key}"
        default: Any = defaults.get(key) if isinstance(defaults, dict) else None
        kind = _kind(default)
        if isinstance(value, float) and math.isnan(value):
            raise ConfigError(f"{name}=nan: must be a number, not NaN")
        if kind is dict and name == "optim" and isinstance(value, dict):
            default = _with_shared_optim_defaults(default, value)
        elif kind is None or (kind is str and "${" in default) or default == "???":
            kind = None
        elif value is None and (kind in (int, float) or prefix == "transforms."):
            continue  # null disables a number's feature, and leaves a transform out
        if kind is not None and not _fits(value, kind):
            raise ConfigError(f"{name}={value!r}: must be {_KIND_WORDS[kind][0]}, like the default {_show(default)}")
        if kind is list and default and len({_kind(item) for item in default}) == 1:
            item_kind = _kind(default[0])
            if item_kind in (bool, int, float, str) and not all(_fits(item, item_kind) for item in value):
                words = _KIND_WORDS[item_kind][1]
                raise ConfigError(f"{name}={value!r}: must be a list of {words}, like the default {_show(default)}")
        check_types(value, default, f"{name}.")


def _with_shared_optim_defaults(defaults: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """``optim``'s defaults, each group's sub-node (``optim.actor``) defaulting as
    :func:`rlplat.optim.make_optimizers` reads it (:func:`rlplat.settings.group_optimizer_settings`)."""
    shared = {k: v for k, v in defaults.items() if not isinstance(v, Mapping)}
    groups = {}
    for k, v in node.items():
        if isinstance(v, Mapping) and isinstance(defaults.get(k, {}), Mapping):
            own = {**defaults.get(k, {}), **{key: v[key] for key in ("name",) if key in v}}  # the optimizer chosen
            groups[k] = group_optimizer_settings(shared, own)
    return {**defaults, **groups}


def _kind(value: Any) -> type | None:
    """The type a default stands for (bool before int), or None for null and other values."""
    return next((kind for kind in _KIND_WORDS if isinstance(value, kind)), None)


def _fits(value: Any, kind: type) -> bool:
    """Whether ``value`` may replace a default of type ``kind``."""
    if kind in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def _show(default: Any) -> str:
    """A default as the YAML has it: ``true``, ``0.0003``, ``'auto'``, ``[64, 64]``."""
    return str(default).lower() if isinstance(default, bool) else repr(default)


def check_ranges(config: Mapping[str, Any]) -> None:
    """The ranges of built-in components' keys, checked by the functions their constructors call
    (plugins' components are left to theirs); an absent key is the constructor's default.

    Raises:
        ConfigError: the constructor's message (a :class:`rlplat.registry.RangeError`).
    """
    loss, collector, buffer, optim = (config.get(key) or {} for key in ("loss", "collector", "buffer", "optim"))
    if _builtin(LOSSES, loss):
        for key in ("gamma", "gae_lambda"):
            if key in loss:
                check_in_range(f"loss.{key}", loss[key], 0, 1)
        if "tau" in loss:
            check_in_range("loss.tau", loss["tau"], 0, 1, low_open=True)
    counts = {"collector": ("steps_per_env", "num_envs"), "buffer": ("epochs", "capacity", "batch_size")}
    for node_key, node, registry in (("collector", collector, COLLECTORS), ("buffer", buffer, BUFFERS)):
        for key in counts[node_key] if _builtin(registry, node) else ():
            if key in node:
                check_at_least(f"{node_key}.{key}", node[key])
    frames = collector.get("steps_per_env", 0) * collector.get("num_envs", 0) if _builtin(COLLECTORS, collector) else 0
    if frames and _builtin(BUFFERS, buffer) and "minibatch_size" in buffer:
        check_minibatch_size(buffer["minibatch_size"], frames)
    if _builtin(OPTIMIZERS, optim) and "lr" in optim:
        check_positive("optim.lr", optim["lr"], note=optim["name"], show=repr)


def _builtin(registry: Registry, node: Mapping[str, Any]) -> bool:
    """Whether ``node`` names one of rlplat's own entries of ``registry`` (imports nothing)."""
    name = node.get("name")
    return isinstance(name, str) and registry.distribution(name) == BUILTIN_DISTRIBUTION
