"""Light checks of the command line and the composed config, run before torch is imported.

``rlplat-train`` reports bad input within a second or two, before anything heavy is
imported or anything is written:

* :func:`check_command_line`, before Hydra: every override parses (Hydra's override
  grammar), and the run's output directory and the sqlite store's directory are writable;
* :func:`check_config`, right after composition: the type of every value against the
  default of the same key, the ``trainer``, ``checkpoint`` and ``tracking`` settings and the
  seed (:mod:`rlplat.settings`), the ranges of built-in components' keys that need no torch,
  and one probe env (:func:`rlplat.envs.probe.probe_env`), which the build then reads.

The range checks call the functions the constructors call
(:func:`rlplat.registry.check_in_range` and kin), so each message is written once and is the
same whichever reports it. Checks between components that need the components themselves (an
algorithm that cannot act in the env, a buffer that does not fit the loss) stay in
:func:`rlplat.build.build`. This module imports neither torch nor MLflow.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
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
"""Hydra's override grammar, named in the message for an override that does not parse."""


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
    """Parse the overrides of a command line with Hydra's public override parser.

    Args:
        args: Command-line arguments after the program name, as :func:`route` returns them;
            flags (``-m``, ``--cfg job``) and their values are skipped.

    Returns:
        The parsed overrides, in order.

    Raises:
        ConfigError: for an override that does not parse, naming it, the parser's complaint
            and the grammar.
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
    """Check, before Hydra runs, what can be checked on the command line alone.

    Every override must parse (:func:`parse_overrides`). Unless a flag such as ``--cfg`` or
    ``--help`` only prints, the run directory (``hydra.run.dir``; ``hydra.sweep.dir`` with
    ``-m``), given or the default of conf/config.yaml, and the directory of a
    ``tracking.uri=sqlite:///...`` store given on the command line must be writable: the
    nearest existing directory of each is checked, since Hydra and MLflow create the rest.

    Args:
        args: Command-line arguments after the program name, as :func:`route` returns them.
        cwd: Directory relative paths start from; the current directory when None.

    Raises:
        ConfigError: for an override that does not parse, or ``key='value': not writable
            (reason)``.
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


OPEN_HYDRA_NODES = ("hydra.job.env_set", "hydra.sweeper", "hydra.launcher", "hydra.callbacks", "hydra.job_logging",
                    "hydra.hydra_logging", "hydra.help", "hydra.hydra_help")  # fmt: skip
"""Nodes of Hydra's config whose keys are the user's or a plugin's (an env variable, a
sweep's parameter, a launcher's setting): a key may be added there."""


def check_hydra_keys(overrides: Sequence[Override]) -> None:
    """Refuse a ``hydra.*`` key added with ``+`` or ``++`` that Hydra's own config lacks, outside
    :data:`OPEN_HYDRA_NODES`: Hydra would keep it, and nothing would read it.

    Raises:
        ConfigError: ``hydra.foo=1: Hydra has no setting 'hydra.foo' ...``.
    """
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
    """Raise ConfigError unless files can be created in directory ``path``: in it where it
    exists, else in its nearest existing ancestor (where the missing directories would be made).

    Args:
        key: The config key, for the message.
        value: Its value as given, for the message.
        path: The directory to check, absolute or relative to ``cwd`` (and named so).
        cwd: The directory a relative ``path`` starts from.

    Raises:
        ConfigError: ``key='value': not writable (reason)``.
    """
    existing = next(p for p in (path, *path.parents) if (cwd / p).exists())
    shown = "the current directory" if str(existing) == "." else repr(str(existing))
    if not (cwd / existing).is_dir():
        reason = f"{shown} is a file, not a directory"
    elif not os.access(cwd / existing, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(cwd / existing).f_flag & os.ST_RDONLY)
        reason = f"{shown} is on a read-only file system" if read_only else f"no permission to write in {shown}"
    elif (refused := _cannot_make_directory_in(cwd / existing)) is not None:
        reason = f"cannot create a directory in {shown}: {refused}"
    else:
        return
    raise ConfigError(f"{key}={value!r}: not writable ({reason})")


def _cannot_make_directory_in(directory: Path) -> str | None:
    """Why no directory can be made in ``directory``, or None. A permission check passes for
    root everywhere, and on virtual file systems (``/proc``, ``/sys``) that refuse new
    entries all the same: a directory is made there and removed at once."""
    try:
        made = tempfile.mkdtemp(prefix=".rlplat-check-", dir=directory)
    except OSError as error:
        return error.strerror or type(error).__name__
    os.rmdir(made)
    return None


def _literal_prefix(text: str) -> str:
    """``text`` up to its first interpolation (``outputs/runs/${now:...}`` -> ``outputs/runs/``)."""
    return text.split("${", 1)[0]


def _default_hydra_value(key: str) -> Any:
    """The value of ``hydra.<...>`` in rlplat's primary config, uninterpolated."""
    node = OmegaConf.create(files(CONFIG_MODULE).joinpath("config.yaml").read_text())
    value: Any = OmegaConf.to_container(node, resolve=False)
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_config(cfg: DictConfig, overrides: Sequence[str] | None = None) -> gymnasium.Env:
    """Check the composed config as far as it can be without torch, in the user's terms.

    In order: every top-level key is one rlplat reads (:func:`check_read`); every value has the
    type of the same key's default (the config composed with the same group choices and none
    of the values given: a second composition, needed only when values were given), and none
    is NaN; the ``trainer``, ``checkpoint`` and
    ``tracking`` nodes and ``seed`` (:mod:`rlplat.settings`); the packages of the loggers in
    ``tracking.also`` are installed (:func:`rlplat.loggers.check_loggers`); the ranges of
    built-in components' keys (:func:`check_ranges`); one probe env is built
    (:func:`rlplat.envs.probe.probe_env`).

    Args:
        cfg: The composed config (its ``hydra`` node, if any, is ignored).
        overrides: The overrides it was composed with, as Hydra records them
            (``hydra.overrides.task``); None reads them from the active Hydra config.

    Returns:
        The probe env, still open, for :func:`rlplat.build.build` (``probe=``), which reads
        the spaces from it and closes it.

    Raises:
        ConfigError: naming the key, the value and what is valid.
        PluginError: when a plugin the config selects fails to load.
    """
    config = resolve_config(cfg)
    if overrides is None:
        overrides = list(HydraConfig.get().overrides.task)
    choices = group_choices(overrides)
    # only group choices given: the config itself is the defaults, and Hydra's one composition serves
    defaults = config if len(choices) == len(parse_overrides(overrides)) else default_config(choices)
    check_read(config, defaults)
    check_types(config, defaults)
    check_no_nan(config)
    TrainerConfig.from_node(config.get("trainer", {}))
    CheckpointConfig.from_node(config.get("checkpoint", {}))
    check_loggers(TrackingConfig.from_node(config.get("tracking", {})).also)
    check_seed(config.get("seed"))
    check_ranges(config)
    return probe_env(config.get("env", {}), warn=True)


def check_read(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Every top-level key of ``config`` is one that rlplat reads: a key of the config composed
    from the same group choices. A key added on the command line (``+note=x``, ``++note=x``)
    that nothing reads would be ignored without a word. The keys of each node are checked by
    the node's owner (the constructor of its entry, or its settings).

    Args:
        config: The resolved config.
        defaults: The config of :func:`default_config`.

    Raises:
        ConfigError: ``note='x': no part of rlplat reads 'note'. Valid top-level keys: ...``.
    """
    for key, value in config.items():
        if key not in defaults:
            message = f"{key}={value!r}: no part of rlplat reads {key!r}. Valid top-level keys: {', '.join(defaults)}."
            suggestion = closest(key, defaults)
            raise ConfigError(message + (f" Did you mean {suggestion!r}?" if suggestion else ""))


def check_no_nan(node: Any, key: str = "") -> None:
    """Raise ConfigError for the first NaN in the config: every range check (``x > 0``,
    ``0 <= x <= 1``) is false for NaN, so it would pass them all and surface, if at all, as a
    training that diverges.

    Raises:
        ConfigError: ``key=nan: must be a number, not NaN``.
    """
    if isinstance(node, float) and math.isnan(node):
        raise ConfigError(f"{key}=nan: must be a number, not NaN")
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for child, value in items:
        name = f"{key}[{child}]" if isinstance(child, int) else f"{key}.{child}" if key else str(child)
        check_no_nan(value, name)


def group_choices(overrides: Sequence[str]) -> list[str]:
    """The overrides that choose a config group's option (``algo=ppo``, ``+sweep=x``,
    ``~tuned``, ``hydra/launcher=parallel``), as given; values (``seed=1``) are left out."""
    groups = {*GROUPS.values(), *PRESET_GROUPS}
    return [o.input_line or "" for o in parse_overrides(overrides) if o.key_or_group in groups or "/" in o.key_or_group]


def default_config(overrides: Sequence[str]) -> dict[str, Any]:
    """The config composed with the group choices of ``overrides`` only (``algo=``, ``env=``,
    ``+sweep=``, ``~tuned``, ``hydra/launcher=``, ...): the defaults values are checked against.

    Uses the running Hydra app's search path when there is one, else rlplat's config module.

    Args:
        overrides: Overrides as Hydra records them; values (``seed=1``) are left out.

    Returns:
        The config as plain containers, interpolations left as written.
    """
    choices = group_choices(overrides)
    if GlobalHydra.instance().is_initialized():
        cfg = compose("config", overrides=choices)
    else:
        register_hydra_plugins()
        register_group_options()
        with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
            cfg = compose("config", overrides=choices)
    return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False))


def check_types(config: Mapping[str, Any], defaults: Mapping[str, Any], prefix: str = "") -> None:
    """Every value has the type of the default of its key: int -> int (not bool), float ->
    int or float, bool -> bool, str -> str, list -> list (items of a list of one type
    included), mapping -> mapping (checked key by key). A null or interpolated default, or a
    key without a default, accepts anything, and a number's default accepts null (null
    disables, as in ``optim.max_grad_norm=null``), as does a transform's (null leaves it out,
    ``transforms.obs_norm=null``): their own checks report what is wrong.

    Args:
        config: The resolved config (or one of its nodes).
        defaults: The same node of :func:`default_config`.
        prefix: Dotted path of the node, ``""`` at the top.

    Raises:
        ConfigError: ``optim.lr=[1]: must be a number (float), like the default 0.0003``.
    """
    for key, default in defaults.items():
        kind = _kind(default)
        if key not in config or kind is None or (kind is str and "${" in default) or default == "???":
            continue
        name, value = f"{prefix}{key}", config[key]
        if value is None and (kind in (int, float) or prefix == "transforms."):
            continue  # a transform set to null is left out (conf/config.yaml)
        if not _fits(value, kind):
            raise ConfigError(f"{name}={value!r}: must be {_KIND_WORDS[kind][0]}, like the default {_show(default)}")
        if kind is dict:
            check_types(value, _with_shared_optim_defaults(default, value) if name == "optim" else default, f"{name}.")
        elif kind is list and default and len({_kind(item) for item in default}) == 1:
            item_kind = _kind(default[0])
            if item_kind in (bool, int, float, str) and not all(_fits(item, item_kind) for item in value):
                words = _KIND_WORDS[item_kind][1]
                raise ConfigError(f"{name}={value!r}: must be a list of {words}, like the default {_show(default)}")


def _with_shared_optim_defaults(defaults: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """``optim``'s defaults with a group's sub-node (``optim.actor``) defaulting to the shared
    settings, or to its own optimizer's when it names another, as
    :func:`rlplat.optim.make_optimizers` reads them (:func:`rlplat.settings.group_optimizer_settings`)."""
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
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _show(default: Any) -> str:
    """A default as the YAML has it: ``true``, ``0.0003``, ``'auto'``, ``[64, 64]``."""
    return str(default).lower() if isinstance(default, bool) else repr(default)


def check_ranges(config: Mapping[str, Any]) -> None:
    """The ranges of built-in components' keys, checked without building them by the
    functions their constructors call (:func:`rlplat.registry.check_in_range` and kin), so
    the message is the constructor's: ``loss.gamma`` and ``loss.gae_lambda`` in [0, 1],
    ``loss.tau`` in (0, 1], ``collector.steps_per_env`` and ``num_envs``, ``buffer.epochs``,
    ``capacity`` and ``batch_size`` at least 1, ``buffer.minibatch_size`` at most the frames
    of a rollout, ``optim.lr`` > 0. A key that is absent is left to its constructor's
    default; one that is null is out of range; keys of plugins' components are left to their
    own constructors.

    Args:
        config: The resolved config, its types checked (:func:`check_types`).

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
    builtin_collector = _builtin(COLLECTORS, collector)
    if builtin_collector:
        _check_counts("collector", collector, ("steps_per_env", "num_envs"))
    if _builtin(BUFFERS, buffer):
        _check_counts("buffer", buffer, ("epochs", "capacity", "batch_size"))
        frames = collector.get("steps_per_env", 0) * collector.get("num_envs", 0) if builtin_collector else 0
        if frames and "minibatch_size" in buffer:
            check_minibatch_size(buffer["minibatch_size"], frames)
    if _builtin(OPTIMIZERS, optim) and "lr" in optim:
        check_positive("optim.lr", optim["lr"], note=optim["name"], show=repr)


def _builtin(registry: Registry, node: Mapping[str, Any]) -> bool:
    """Whether ``node`` names one of rlplat's own entries of ``registry`` (imports nothing)."""
    name = node.get("name")
    return isinstance(name, str) and registry.distribution(name) == BUILTIN_DISTRIBUTION


def _check_counts(node_key: str, node: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Check that each of ``keys`` that ``node`` sets is a count, at least 1."""
    for key in keys:
        if key in node:
            check_at_least(f"{node_key}.{key}", node[key])
