"""rlplat-list: what can be chosen, where it comes from, and which plugins are broken.

    rlplat-list              # every registry kind and config group
    rlplat-list --kind env   # one registry kind (env, network, ...) or config group (algo, sweep, ...)

Prints, per registry kind, every registered name with its distribution (``rlplat`` for
rlplat's own) and its YAML keys with their defaults, read from its signature
(:mod:`rlplat.hydra_ext.catalog`); then the YAML presets of each config group with the
distribution that ships them; then the plugins that failed to load, with the reason (an
import error, or two distributions claiming one name). Every plugin is imported so that
failures show. Exit status 0 even when plugins are broken, 2 for bad arguments.
"""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlplat.cli.args import ArgumentParser
from rlplat.hydra_ext import catalog
from rlplat.hydra_ext.options import GROUPS, PRESET_GROUPS
from rlplat.registry import REGISTRIES, unknown_name_message

PIPE_WIDTH = 10_000
"""Console width when stdout is not a terminal: nothing wraps, so output can be grepped."""


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


def show_entries(console: Console, kind: str) -> list[catalog.Failure]:
    """Print the entries of registry ``kind`` (each plugin imported), each with its YAML keys under
    its description (:func:`rlplat.hydra_ext.catalog.entry_keys`); returns the ones that failed."""
    registry = REGISTRIES[kind]
    group = GROUPS.get(kind)
    how = f"  ({group}=<name>)" if group else ""
    entries = table("name", "distribution", "description")
    failures = []
    for entry in registry.entries():
        if entry.error is None:
            assert entry.target is not None, "entries() loads every entry that has no error"
            described = f"{catalog.summary(entry.target)}\nkeys: {catalog.entry_keys(kind, entry.target)}"
            entries.add_row(entry.name, entry.distribution, Text(described))
        else:
            entries.add_row(entry.name, entry.distribution, Text("failed to load (see below)", style="red"))
            reason = catalog.short_reason(kind, entry.name, entry.distribution, entry.error)
            failures.append(catalog.Failure(kind, entry.name, entry.distribution, reason))
    supplied = [name for names in catalog.supplied_arguments(kind) for name in names]
    note = "keys: what the YAML sets, with the defaults in code"
    note += f"; rlplat supplies {', '.join(supplied)} itself" if supplied else ""
    if kind == "network":  # read by rlplat, not by the entry (rlplat.networks.base.CoreSpec)
        note += "; every network also takes core=None, core_size=128, core_layers=1 (a recurrent core after it)"
    if kind == "loss_addon":  # read by rlplat (rlplat.losses.addons.base.COEF)
        note += "; each is a key of loss.addons and also takes coef (required: the term's weight, >= 0)"
    show(console, f"{kind} entries, entry-point group {registry.group}{how}", entries, note=note)
    return failures


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-list``; returns 0 (broken plugins included), exits
    with 2 on bad arguments. ``argv``: the arguments, ``sys.argv[1:]`` when None."""
    parser = ArgumentParser(
        prog="rlplat-list",
        description="List registered components, YAML presets and plugins that failed to load.",
    )
    parser.add_argument(
        "--kind", help="only this registry kind (env, network, ...) or config group (algo, tuned, sweep, ...)"
    )
    args = parser.parse_args(argv)

    sources, conf_failures = catalog.conf_sources()
    groups = catalog.presets(sources)
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
