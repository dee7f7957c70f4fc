"""Options of rlplat's config groups: YAML presets, registered names and sweep configs.

Every registered name is an option of its group (``env=<name>``) even without a YAML file:
:func:`register_group_options` stores a minimal ``{name: <name>}`` node for it in Hydra's
ConfigStore. A YAML file of the same name (rlplat's or a plugin's) takes precedence and adds
presets. The sweep configs of sweeps/ become options of the group ``sweep`` the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.resources import files
from importlib.resources.abc import Traversable

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from rlplat.registry import REGISTRIES, config_packages

GROUPS = {
    "env": "env",
    "network": "network",
    "collector": "collector",
    "buffer": "buffer",
    "loss": "loss",
    "optimizer": "optim",
}
"""Registry kind -> Hydra config group whose options include that registry's names."""

PRESET_GROUPS = ("algo", "tuned", "sweep")
"""Config groups with YAML options only."""

SWEEPS_PACKAGE = "rlplat.sweeps"
"""Package of sweeps/: ready sweep configs, options of the group ``sweep`` (``-m +sweep=<name>``)."""


def yaml_options(group: str, packages: Iterable[str] | None = None) -> set[str]:
    """Names of the YAML files of ``group`` across the config packages.

    Args:
        group: A config group folder, e.g. ``env`` or ``hydra/launcher``.
        packages: Packages to look in; :func:`config_packages` when None. A package that
            does not import is skipped (``rlplat-list`` reports it).

    Returns:
        File names without ``.yaml``.
    """
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
    """Every valid option of a config group: YAML presets, sweep configs and registered names.

    Args:
        group: A config group, e.g. ``env``, ``optim`` or ``sweep``.

    Returns:
        The option names; listing registered names imports no plugin.
    """
    options = yaml_options(group)
    if group == "sweep":
        options.update(sweep_files())
    for kind, kind_group in GROUPS.items():
        if kind_group == group:
            options.update(REGISTRIES[kind].names())
    return options


def register_group_options() -> None:
    """Make every registered name and every sweep config an option of its group.

    Stores ``{name: <name>}`` in Hydra's ConfigStore for each registered name with no YAML
    file of its own, and each sweep config of sweeps/ as a global overlay
    (``@package _global_``) in the group ``sweep``. Idempotent: storing again replaces.
    """
    store = ConfigStore.instance()
    for kind, group in GROUPS.items():
        presets = yaml_options(group)
        for name in REGISTRIES[kind].names():
            if name not in presets:
                store.store(group=group, name=name, node={"name": name}, provider="rlplat")
    for name, path in sweep_files().items():
        node = OmegaConf.create(path.read_text())
        store.store(group="sweep", name=name, node=node, package="_global_", provider="rlplat")
