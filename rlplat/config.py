"""Config plumbing: registered names as Hydra group options, and checks of the command line.

Hydra composes the config; rlplat adds two things in front of it:

* every registered name becomes an option of its group (``env=<name>``) through Hydra's
  ConfigStore, unless a YAML file of that name exists, which then takes precedence;
* the command line is checked before Hydra runs: an unknown group option is reported with
  the valid ones and the closest, and keys of the nodes rlplat checks itself (component
  nodes, ``trainer``, ``tracking``) are passed as ``++key=value`` so that a misspelt key
  reaches rlplat's check, which names the valid keys, instead of Hydra's struct error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from importlib.metadata import entry_points
from importlib.resources import files
from importlib.resources.abc import Traversable

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from rlplat.registry import REGISTRIES, ConfigError, unknown_name_message

GROUPS = {"env": "env", "network": "network", "collector": "collector", "buffer": "buffer",
          "loss": "loss", "optimizer": "optim"}
"""Registry kind -> Hydra config group whose options include that registry's names."""

PRESET_GROUPS = ("algo", "tuned", "sweep")
"""Config groups with YAML options only."""

SWEEPS_PACKAGE = "rlplat.sweeps"
"""Package of sweeps/: ready sweep configs, options of the group ``sweep`` (``-m +sweep=<name>``)."""

CHECKED_NODES = ("env", "network", "collector", "buffer", "loss", "optim", "transforms",
                 "trainer", "tracking")
"""Top-level nodes whose keys rlplat checks itself, with messages naming the valid keys."""

_PLAIN_CHOICE = re.compile(r"^[\w.\-]+$")


def config_packages() -> list[str]:
    """Packages holding YAML config groups: rlplat's own, then plugins' (``rlplat.conf``)."""
    return ["rlplat.conf", *(ep.value for ep in entry_points(group="rlplat.conf"))]


def yaml_options(group: str, packages: Iterable[str] | None = None) -> set[str]:
    """Names of the YAML files of ``group`` across the config packages."""
    names: set[str] = set()
    for package in config_packages() if packages is None else packages:
        try:
            folder = files(package).joinpath(group)
        except ModuleNotFoundError:
            continue
        if folder.is_dir():
            names.update(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
    return names


def sweep_files() -> dict[str, Traversable]:
    """The sweep configs shipped in sweeps/: name -> YAML file."""
    return {p.name[:-5]: p for p in files(SWEEPS_PACKAGE).iterdir() if p.name.endswith(".yaml")}


def group_options(group: str) -> set[str]:
    """Every valid option of a config group: YAML presets and registered names."""
    options = yaml_options(group)
    if group == "sweep":
        options.update(sweep_files())
    kinds = [kind for kind, g in GROUPS.items() if g == group]
    for kind in kinds:
        options.update(REGISTRIES[kind].names())
    return options


def register_hydra_plugins() -> None:
    """Register rlplat's Hydra plugins (plugin search path, Optuna sweeper) with Hydra.

    Hydra finds plugins by listing the ``hydra_plugins`` package with pkgutil, which does not
    see the modules of an editable install; registering them by hand (Hydra's public
    ``Plugins.register``) works for every kind of install and is idempotent.
    """
    from hydra.core.plugins import Plugins

    from hydra_plugins.rlplat_optuna_sweeper import RlplatOptunaSweeper
    from hydra_plugins.rlplat_searchpath import RlplatPluginSearchPath

    plugins = Plugins.instance()
    for plugin in (RlplatPluginSearchPath, RlplatOptunaSweeper):
        plugins.register(plugin)


def register_group_options() -> None:
    """Store ``{name: <name>}`` in Hydra's ConfigStore for every registered name that has no
    YAML file of its own, so that ``<group>=<name>`` always works; and the sweep configs of
    sweeps/ as options of the group ``sweep``."""
    store = ConfigStore.instance()
    for kind, group in GROUPS.items():
        presets = yaml_options(group)
        for name in REGISTRIES[kind].names():
            if name not in presets:
                store.store(group=group, name=name, node={"name": name}, provider="rlplat")
    for name, path in sweep_files().items():  # sweep configs are global overlays (@package _global_)
        node = OmegaConf.create(path.read_text())
        store.store(group="sweep", name=name, node=node, package="_global_", provider="rlplat")


def check_command_line(args: Sequence[str]) -> list[str]:
    """Check group choices on the command line and route checked keys to rlplat's checks.

    Args:
        args: Command-line arguments after the program name.

    Returns:
        The arguments to hand to Hydra: ``node.key=value`` for a node in
        :data:`CHECKED_NODES` becomes ``++node.key=value``.

    Raises:
        ConfigError: for an unknown option of a config group (each value of a sweep).
    """
    routed = []
    for arg in args:
        if arg.startswith(("-", "++", "~")) or "=" not in arg:
            routed.append(arg)
            continue
        key, value = arg.split("=", 1)
        added = key.startswith("+")  # +group=<name> appends a group the defaults lack (+sweep=...)
        key = key.removeprefix("+")
        if key in GROUPS.values() or key in PRESET_GROUPS:
            valid = group_options(key)
            for choice in value.split(","):
                if _PLAIN_CHOICE.match(choice) and choice not in valid:
                    raise ConfigError(unknown_name_message(key, choice, valid))
        if not added and "." in key and key.split(".", 1)[0] in CHECKED_NODES:
            arg = f"++{arg}"
        routed.append(arg)
    return routed


def unroute(override: str) -> str:
    """``++trainer.x=1`` -> ``trainer.x=1`` for keys :func:`check_command_line` routes itself,
    so that recorded commands read as typed; other overrides unchanged."""
    key = override.split("=", 1)[0]
    if override.startswith("++") and key[2:].split(".", 1)[0] in CHECKED_NODES:
        return override[2:]
    return override


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose rlplat's config outside ``rlplat-train`` (tests, benchmarks, notebooks).

    Sets Hydra's runtime config, so ``${hydra:...}`` interpolations resolve as in a run
    from the current directory; the returned config has no ``hydra`` node.
    """
    register_hydra_plugins()
    register_group_options()
    with initialize_config_module("rlplat.conf", version_base="1.3"):
        cfg = compose("config", overrides=check_command_line(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg
