"""rlplat-list: what can be chosen, where it comes from, and which plugins are broken.

    rlplat-list              # every registry kind and config group
    rlplat-list --kind env   # one registry kind (env, network, ...) or config group (algo, sweep, ...)

Prints, per registry kind, every registered name with the distribution it comes from
(``rlplat`` for rlplat's own) and, on a second line, its YAML keys with their defaults, read
from the entry's signature without calling it (:func:`entry_keys`; the arguments rlplat
supplies are left out); then the YAML presets of each config group with the distribution that
ships them; then the plugins that failed to load: each with its kind, name, distribution and
the reason (an import error, or two distributions claiming one name).
Every plugin is imported so that failures show. The exit status is 0 even when plugins are
broken (the listing reports them), and 2 for bad arguments.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlplat.cli.args import ArgumentParser
from rlplat.hydra_ext.options import GROUPS, PRESET_GROUPS, sweep_files
from rlplat.registry import BUILTIN_DISTRIBUTION, REGISTRIES, declared_entry_points, unknown_name_message

PIPE_WIDTH = 10_000
"""Console width when stdout is not a terminal: nothing wraps, so output can be grepped."""

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
    """A plugin entry that could not be loaded."""

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
    so that listing a preset group imports no torch."""
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
    """A default value as the listing shows it: its ``repr``, a function or class by its name."""
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
    """The YAML keys of an entry of registry ``kind`` with their defaults, as listed:
    ``"k=4, padding='reset'"`` (:func:`yaml_parameters`). A key without a default is shown as
    ``name (required)``; a ``**kwargs`` parameter as ``**kwargs``.

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
    """``error`` without the kind, name and distribution it starts with (they have columns)."""
    prefix = f"{kind} {name!r} "
    return error.removeprefix(f"{prefix}from distribution {distribution!r} ").removeprefix(prefix)


def table(*columns: str) -> Table:
    """A borderless table whose columns but the last (names) never wrap."""
    result = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for i, column in enumerate(columns):
        last = i == len(columns) - 1
        result.add_column(column, no_wrap=not last, overflow="fold" if last else "ellipsis")
    return result


def show(console: Console, title: str, rows: Table, style: str = "bold", note: str | None = None) -> None:
    """Print ``title`` on its own line (a table title would wrap to the table's width), then
    ``rows``, then ``note`` (dim; a caption would wrap to the table's width too)."""
    notes = [] if note is None else [Text(note, style="dim")]
    console.print(Text(title, style=style), rows, *notes, "", sep="\n")


def show_entries(console: Console, kind: str) -> list[Failure]:
    """Print the entries of registry ``kind`` (each plugin imported), each with its YAML keys under
    its description (:func:`entry_keys`); returns the ones that failed."""
    registry = REGISTRIES[kind]
    group = GROUPS.get(kind)
    how = f"  ({group}=<name>)" if group else ""
    entries = table("name", "distribution", "description")
    failures = []
    for entry in registry.entries():
        if entry.error is None:
            assert entry.target is not None, "entries() loads every entry that has no error"
            keys = Text(f"keys: {entry_keys(kind, entry.target)}")
            entries.add_row(entry.name, entry.distribution, Text("\n").join([Text(summary(entry.target)), keys]))
        else:
            entries.add_row(entry.name, entry.distribution, Text("failed to load (see below)", style="red"))
            reason = short_reason(kind, entry.name, entry.distribution, entry.error)
            failures.append(Failure(kind, entry.name, entry.distribution, reason))
    supplied = [name for names in supplied_arguments(kind) for name in names]
    note = "keys: what the YAML sets, with the defaults in code"
    note += f"; rlplat supplies {', '.join(supplied)} itself" if supplied else ""
    if kind == "network":  # read by rlplat, not by the entry (rlplat.networks.base.CoreSpec)
        note += "; every network also takes core=None, core_size=128, core_layers=1 (a recurrent core after it)"
    if kind == "loss_addon":  # read by rlplat (rlplat.losses.addons.base.COEF)
        note += "; each is a key of loss.addons and also takes coef (required: the term's weight, >= 0)"
    show(console, f"{kind} entries, entry-point group {registry.group}{how}", entries, note=note)
    return failures


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-list``; returns (and exits with) the status.

    Args:
        argv: Arguments after the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 after listing (broken plugins included); argparse exits with 2 on bad arguments.
    """
    parser = ArgumentParser(
        prog="rlplat-list",
        description="List registered components, YAML presets and plugins that failed to load.",
    )
    parser.add_argument(
        "--kind", help="only this registry kind (env, network, ...) or config group (algo, tuned, sweep, ...)"
    )
    args = parser.parse_args(argv)

    sources, conf_failures = conf_sources()
    groups = presets(sources)
    preset_only = [g for g in dict.fromkeys([*PRESET_GROUPS, *sorted(groups)]) if g not in GROUPS.values()]
    by_group = {group: kind for kind, group in GROUPS.items() if group not in REGISTRIES}  # optim -> optimizer
    valid = [*REGISTRIES, *by_group, *preset_only]
    if args.kind is not None and args.kind not in valid:
        parser.error(unknown_name_message("--kind", args.kind, valid))
    kind_asked = by_group.get(args.kind, args.kind)
    kinds = [k for k in REGISTRIES if kind_asked in (None, k)]
    if args.kind is None:
        shown_groups = [*(GROUPS[k] for k in kinds if k in GROUPS), *preset_only]
        failures = conf_failures
    else:  # one registry kind and its group (transforms have none), or one preset group
        shown_groups = [GROUPS[k] for k in kinds if k in GROUPS] if kinds else [kind_asked]
        failures = []

    # markup off: names, docstrings and errors contain [brackets]
    console = Console(markup=False) if sys.stdout.isatty() else Console(width=PIPE_WIDTH, markup=False)
    for kind in kinds:
        failures.extend(show_entries(console, kind))

    for group in shown_groups:
        found = groups.get(group, [])
        if found:
            yamls = table("option", "distribution", "description")
            for preset in found:
                yamls.add_row(preset.option, preset.distribution, preset.description)
            show(console, f"{group} presets", yamls)

    if failures:
        broken = table("kind", "name", "distribution", "reason")
        for failure in failures:
            broken.add_row(failure.kind, failure.name, failure.distribution, failure.reason)
        show(console, f"Plugins that failed to load ({len(failures)})", broken, style="bold red")
        console.print("Only runs that use a broken plugin are affected; all other runs work.")
    elif kinds:
        console.print("All plugins loaded." if args.kind is None else f"All {args.kind} plugins loaded.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
