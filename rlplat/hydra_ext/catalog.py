"""What can be chosen: the YAML keys of registry entries, read from their signatures without
calling them; the YAML presets of config groups; the config packages that fail to import.

Read by ``rlplat-list`` and by the documentation's generated reference. Importing this module
imports no torch: the factory protocols are imported when a registry kind's keys are read.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from rlplat.hydra_ext.options import GROUPS, PRESET_GROUPS, sweep_files
from rlplat.registry import BUILTIN_DISTRIBUTION, REGISTRIES, ConfigError, declared_entry_points, unknown_name_message

SET_BY_RLPLAT: dict[str, tuple[str, ...]] = {"env": ("render_mode",)}
"""Keyword arguments of an entry that rlplat sets itself beyond those its factory protocol
names: an env's ``render_mode`` (``"rgb_array"`` for videos and ``transforms.from_pixels``)."""

NAMED = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
"""Kinds of parameters that are keys (not ``*args``, ``**kwargs``), as :func:`rlplat.registry.check_kwargs`
counts them."""


@dataclass
class Preset:
    """One YAML file of a config group, chosen as ``<group>=<option>`` on the command line."""

    option: str
    distribution: str
    description: str
    source: Traversable
    """The YAML file itself (in its config package, or sweeps/)."""


@dataclass
class Failure:
    """A plugin entry (or a config package) that could not be loaded."""

    kind: str
    name: str
    distribution: str
    reason: str


def conf_sources() -> tuple[list[tuple[str, str]], list[Failure]]:
    """Config packages with their distributions, rlplat's first; and the ones that fail to import.

    Returns:
        ``[(distribution, package), ...]`` for every ``rlplat.conf`` package that imports,
        and a :class:`Failure` (kind ``conf``) for every one that does not.
    """
    sources, failures = [(BUILTIN_DISTRIBUTION, "rlplat.conf")], []
    for ep in declared_entry_points("rlplat.conf"):
        dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
        try:
            files(ep.value)
        except Exception as error:  # noqa: BLE001  (any import failure of third-party code is listed)
            failures.append(Failure("conf", ep.name, dist, f"package {ep.value!r}: {type(error).__name__}: {error}"))
        else:
            sources.append((dist, ep.value))
    return sources, failures


def first_sentence(text: str) -> str:
    """The first sentence of ``text``, whitespace collapsed to single spaces."""
    return re.split(r"(?<=\.)(?<!e\.g\.)(?<!i\.e\.)(?<!al\.)\s", " ".join(text.split()), maxsplit=1)[0]


def yaml_description(text: str) -> str:
    """The first sentence of a YAML file's leading comment (``@package`` and examples skipped;
    an indented line inside the sentence, such as the command a preset's trials came from, is
    part of it)."""
    lines: list[str] = []
    for line in text.splitlines():
        body = line[1:].removeprefix(" ")
        ended = bool(lines) and lines[-1].rstrip().endswith((".", ":", "!", "?"))
        if not line.startswith("#") or (lines and not body) or (ended and body[0].isspace()):
            break  # end of the leading comment, or an indented command-line example after a sentence
        if not body.startswith("@package"):
            lines.append(body)
    return first_sentence(" ".join(lines))


def presets(sources: list[tuple[str, str]]) -> dict[str, list[Preset]]:
    """Group (``env``, ``hydra/launcher``) -> its YAML presets, sorted by option.

    Groups are the folders of the config packages, and ``sweep``: rlplat's sweeps/.
    """
    found: dict[str, list[Preset]] = {}

    def add(group: str, path: Traversable, dist: str) -> None:
        description = yaml_description(path.read_text(encoding="utf-8"))
        found.setdefault(group, []).append(Preset(path.name[:-5], dist, description, path))

    def walk(folder: Traversable, group: str, dist: str) -> None:
        for path in folder.iterdir():
            if path.is_dir():
                walk(path, f"{group}/{path.name}" if group else path.name, dist)
            elif group and path.name.endswith(".yaml"):
                add(group, path, dist)

    for dist, package in sources:
        walk(files(package), "", dist)
    for path in sweep_files().values():
        add("sweep", path, BUILTIN_DISTRIBUTION)
    return {group: sorted(items, key=lambda p: (p.option, p.distribution)) for group, items in found.items()}


def summary(target: object) -> str:
    """The first sentence of ``target``'s docstring, without reST markup."""
    paragraph = (inspect.getdoc(target) or "").split("\n\n")[0]
    return first_sentence(re.sub(r":\w+:`([^`]*)`", r"\1", paragraph).replace("``", ""))


def factory_protocols() -> dict[str, type]:
    """Registry kind -> the ``typing.Protocol`` its entries implement (``rlplat/<kind>/base.py``),
    whose ``__call__`` names the arguments rlplat supplies. Imported here, not at module level,
    so that reading presets imports no torch."""
    from rlplat.buffers.base import BufferFactory
    from rlplat.collectors.base import CollectorFactory
    from rlplat.envs.base import EnvFactory
    from rlplat.losses.addons.base import LossAddonFactory
    from rlplat.losses.base import LossFactory
    from rlplat.networks.base import TorsoFactory
    from rlplat.optim.base import OptimizerFactory
    from rlplat.transforms.base import TransformFactory

    return {
        "env": EnvFactory,
        "transform": TransformFactory,
        "network": TorsoFactory,
        "collector": CollectorFactory,
        "buffer": BufferFactory,
        "loss": LossFactory,
        "optimizer": OptimizerFactory,
        "loss_addon": LossAddonFactory,
    }


def supplied_arguments(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What rlplat passes to an entry of registry ``kind`` itself, never from YAML.

    Read from the ``__call__`` of the kind's factory protocol (:func:`factory_protocols`): its
    positional-only parameters are passed first, by position (a transform's
    ``observation_space``; a loss's ``observation_space, action_space, network``), its
    keyword-only ones by name (a collector's ``make_env, policy, total_frames, device, seed``);
    plus :data:`SET_BY_RLPLAT` (an env's ``render_mode``).

    Returns:
        ``(names of the leading positional arguments, names of the keyword arguments)``, as
        the protocol names them; empty for a kind without a factory protocol.
    """
    protocol = factory_protocols().get(kind)
    parameters = [] if protocol is None else list(inspect.signature(protocol.__call__).parameters.values())[1:]
    positional = tuple(p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_ONLY)
    keywords = tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)
    return positional, keywords + SET_BY_RLPLAT.get(kind, ())


def default_text(value: Any) -> str:
    """A default value as ``rlplat-list`` shows it: its ``repr``, a function or class by its name."""
    if callable(value) and hasattr(value, "__qualname__"):
        return str(value.__qualname__)
    return repr(value)


def yaml_parameters(kind: str, target: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters of ``target``, an entry of registry ``kind``, that its YAML node sets.

    Read from ``target``'s signature (nothing is called), in its order, leaving out the
    arguments rlplat supplies (:func:`supplied_arguments`) as the YAML check of a run does
    (:func:`rlplat.registry.check_kwargs`); a ``**kwargs`` parameter (any key) is kept, last.

    Raises:
        TypeError, ValueError: for a callable ``inspect`` cannot read a signature of.
    """
    parameters = list(inspect.signature(target).parameters.values())
    positional, reserved = supplied_arguments(kind)
    named = [p for p in parameters if p.kind in NAMED]
    keys = [p for p in named[len(positional) :] if p.name not in reserved]
    return keys + [p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD]


def entry_keys(kind: str, target: Callable[..., Any]) -> str:
    """The YAML keys of an entry of registry ``kind`` with their defaults, as ``rlplat-list``
    shows them: ``"k=4, padding='reset'"`` (:func:`yaml_parameters`). A key without a default
    is shown as ``name (required)``; a ``**kwargs`` parameter as ``**kwargs``.

    Returns:
        The keys joined by ``", "``; ``"(none)"`` when the YAML sets nothing, and
        ``"(signature not readable)"`` for a callable ``inspect`` cannot read.
    """
    try:
        parameters = yaml_parameters(kind, target)
    except (TypeError, ValueError):  # some builtins and extension types have no signature
        return "(signature not readable)"
    shown = []
    for p in parameters:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            shown.append(f"**{p.name}")
        else:
            shown.append(f"{p.name} (required)" if p.default is p.empty else f"{p.name}={default_text(p.default)}")
    return ", ".join(shown) or "(none)"


def short_reason(kind: str, name: str, distribution: str, error: str) -> str:
    """A registry entry's load ``error`` without the kind, name and distribution it starts with
    (shown beside it)."""
    prefix = f"{kind} {name!r} "
    return error.removeprefix(f"{prefix}from distribution {distribution!r} ").removeprefix(prefix)


KIND_NOTES = {  # keys read by rlplat, not by the entry (rlplat.networks.base.CoreSpec, rlplat.losses.addons.base.COEF)
    "network": "; every network also takes core=None, core_size=128, core_layers=1 (a recurrent core after it)",
    "loss_addon": "; each is a key of loss.addons and also takes coef (required: the term's weight, >= 0)",
}


def kind_note(kind: str) -> str:
    """The note under registry ``kind``'s entries in ``rlplat-list``: where their keys come
    from, the arguments rlplat supplies itself, and keys every entry of the kind also takes."""
    supplied = [name for names in supplied_arguments(kind) for name in names]
    note = "keys: what the YAML sets, with the defaults in code"
    return note + (f"; rlplat supplies {', '.join(supplied)} itself" if supplied else "") + KIND_NOTES.get(kind, "")


def selection(asked: str | None, preset_groups: Iterable[str]) -> tuple[list[str], list[str]]:
    """What ``rlplat-list --kind <asked>`` lists: (registry kinds, config groups of presets).
    Everything when ``asked`` is None; else one registry kind, or the group that chooses one
    (``optim``), with its group (transforms have none); or one group of presets only.

    Raises:
        ConfigError: for an ``asked`` that is none of these, naming the valid ones.
    """
    preset_only = [g for g in dict.fromkeys([*PRESET_GROUPS, *sorted(preset_groups)]) if g not in GROUPS.values()]
    by_group = {group: kind for kind, group in GROUPS.items() if group not in REGISTRIES}  # optim -> optimizer
    valid = [*REGISTRIES, *by_group, *preset_only]
    if asked is not None and asked not in valid:
        raise ConfigError(unknown_name_message("--kind", asked, valid))
    kind = by_group.get(asked, asked) if asked is not None else None
    kinds = [k for k in REGISTRIES if kind in (None, k)]
    groups = [GROUPS[k] for k in kinds if k in GROUPS] if kinds else [str(kind)]
    return kinds, groups + (preset_only if asked is None else [])
