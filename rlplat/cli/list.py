"""rlplat-list: what can be chosen, where it comes from, and which plugins are broken.

    rlplat-list              # every registry kind and config group
    rlplat-list --kind env   # one registry kind (env, network, ...) or config group (algo, sweep, ...)

Prints each registered name with its distribution and YAML keys, each config group's presets,
and the plugins that failed to load, with why (:mod:`rlplat.hydra_ext.catalog`). Every plugin
is imported so that failures show. Exit status 0 even when plugins are broken.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from rlplat.cli.args import ArgumentParser
from rlplat.hydra_ext import catalog
from rlplat.hydra_ext.options import GROUPS
from rlplat.registry import REGISTRIES, ConfigError

PIPE_WIDTH = 10_000
"""Console width when stdout is not a terminal: nothing wraps, so output can be grepped."""


def show(
    console: Console, title: str, columns: Sequence[str], rows: Iterable[Sequence[str | Text]], style: str = "bold",
    note: str | None = None,
) -> None:  # fmt: skip
    """Print ``title``, ``rows`` in a borderless table whose columns but the last never wrap, and
    ``note`` (dim), each on its own lines (a table's title and caption would wrap to its width)."""
    fixed = (Column(column, no_wrap=True, overflow="ellipsis") for column in columns[:-1])
    table = Table(*fixed, Column(columns[-1], overflow="fold"), box=box.SIMPLE_HEAD, show_edge=False)
    for row in rows:
        table.add_row(*row)
    notes = [] if note is None else [Text(note, style="dim")]
    console.print(Text(title, style=style), table, *notes, "", sep="\n")


def show_entries(console: Console, kind: str) -> list[catalog.Failure]:
    """Print the entries of registry ``kind`` (each plugin imported), each with its YAML keys under
    its description (:func:`rlplat.hydra_ext.catalog.entry_keys`); returns the ones that failed."""
    rows, failures = [], []
    for entry in REGISTRIES[kind].entries():
        if entry.error is None:
            assert entry.target is not None, "entries() loads every entry that has no error"
            described = Text(f"{catalog.summary(entry.target)}\nkeys: {catalog.entry_keys(kind, entry.target)}")
        else:
            described = Text("failed to load (see below)", style="red")
            reason = catalog.short_reason(kind, entry.name, entry.distribution, entry.error)
            failures.append(catalog.Failure(kind, entry.name, entry.distribution, reason))
        rows.append((entry.name, entry.distribution, described))
    how = f"  ({GROUPS[kind]}=<name>)" if GROUPS.get(kind) else ""
    title = f"{kind} entries, entry-point group {REGISTRIES[kind].group}{how}"
    show(console, title, ("name", "distribution", "description"), rows, note=catalog.kind_note(kind))
    return failures


def main(argv: list[str] | None = None) -> int:
    """Console entry point of ``rlplat-list``; returns 0 (broken plugins included), exits
    with 2 on bad arguments. ``argv``: the arguments, ``sys.argv[1:]`` when None."""
    parser = ArgumentParser(
        prog="rlplat-list", description="List registered components, YAML presets and plugins that failed to load."
    )
    parser.add_argument(
        "--kind", help="only this registry kind (env, network, ...) or config group (algo, tuned, sweep, ...)"
    )
    args = parser.parse_args(argv)

    sources, failures = catalog.conf_sources()
    groups = catalog.presets(sources)
    try:
        kinds, shown_groups = catalog.selection(args.kind, groups)
    except ConfigError as error:
        parser.error(str(error))
    if args.kind is not None:
        failures = []  # the config packages' failures show with everything only

    # markup off: names, docstrings and errors contain [brackets]
    console = Console(width=None if sys.stdout.isatty() else PIPE_WIDTH, markup=False)
    for kind in kinds:
        failures.extend(show_entries(console, kind))
    for group in shown_groups:
        rows = [(preset.option, preset.distribution, preset.description) for preset in groups.get(group, [])]
        if rows:
            show(console, f"{group} presets", ("option", "distribution", "description"), rows)
    if failures:
        broken = [(f.kind, f.name, f.distribution, f.reason) for f in failures]
        title = f"Plugins that failed to load ({len(failures)})"
        show(console, title, ("kind", "name", "distribution", "reason"), broken, style="bold red")
        console.print("Only runs that use a broken plugin are affected; all other runs work.")
    elif kinds:
        console.print("All plugins loaded." if args.kind is None else f"All {args.kind} plugins loaded.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
