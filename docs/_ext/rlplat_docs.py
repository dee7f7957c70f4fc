"""Sphinx extension: rlplat's reference pages, generated from the code at every build.

Before Sphinx reads the sources it writes, under ``reference/`` of the source folder:

* ``registry/<kind>/<name>.md``: one page per registry entry (rlplat's and every installed
  plugin's): its distribution, entry point, the YAML keys of its preset with their defaults
  and comments, the presets that use it, and its docstring and signature (autodoc);
* ``presets/<group>.md``: one page per config group (``algo``, ``env``, ``tuned``, ``sweep``,
  ``hydra/launcher``, ...): every YAML preset with its keys, defaults and comments;
* ``cli.md``: the ``--help`` of every console script of the rlplat distribution;
* ``api/<module>.md``: the Python API of every public module of the package, from its
  docstrings (autodoc).

A file is written only when its text changed, and generated files whose source is gone are
removed, so a preview server (``make docs-serve``) does not rebuild in a loop. These folders
are generated: they are not kept in git.
"""

from __future__ import annotations

import inspect
import os
import pkgutil
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import ExtensionError
from sphinx.util.nodes import make_refnode

import rlplat
from rlplat.hydra_ext.catalog import Preset, conf_sources, presets, summary
from rlplat.hydra_ext.options import GROUPS
from rlplat.registry import REGISTRIES, Entry

GENERATED = ("registry", "presets", "api")
"""The folders this extension writes under ``reference/`` (and ``cli.md`` beside them)."""

KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[\w@/.-]+):(?: +(?P<value>[^#]*?))?\s*(?:#\s?(?P<comment>.*))?$")
"""``key: value  # comment`` in a YAML file (a mapping's key; list items are not keys)."""


def yaml_keys(text: str) -> list[tuple[str, str, str]]:
    """``(dotted key, default, comment)`` for every mapping key of a YAML file, in file order.

    A key whose value is a nested mapping gets an empty default; its children are listed
    under its dotted path. Comments are the text after ``#`` on the key's own line.
    """
    rows: list[tuple[str, str, str]] = []
    parents: list[tuple[int, str]] = []
    for line in text.splitlines():
        match = KEY_LINE.match(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        indent = len(match["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = ".".join([*(p for _, p in parents), match["key"]])
        value = (match["value"] or "").strip()
        if key.split(".")[0] != "defaults":
            rows.append((key, value, (match["comment"] or "").strip()))
        if not value:
            parents.append((indent, match["key"]))
    return rows


def cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def keys_table(text: str) -> list[str]:
    """The Markdown table of a YAML file's keys: key, default, meaning."""
    rows = yaml_keys(text)
    if not rows:
        return ["This preset sets no keys of its own."]
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for key, value, comment in rows:
        default = f"`{cell(value)}`" if value else ""
        lines.append(f"| `{key}` | {default} | {cell(comment)} |")
    return lines


def yaml_block(text: str) -> list[str]:
    return ["```yaml", text.rstrip("\n"), "```"]


def group_page_name(group: str) -> str:
    """``hydra/launcher`` -> ``hydra-launcher``: the page of a config group."""
    return group.replace("/", "-")


def preset_name(preset: Preset) -> str | None:
    """The registry entry a preset builds (its top-level ``name``), or None."""
    try:
        node = yaml.safe_load(preset.source.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return None
    return node.get("name") if isinstance(node, dict) and isinstance(node.get("name"), str) else None


def preset_section(group: str, preset: Preset) -> list[str]:
    """One preset of a group page: how to choose it, where it comes from, its keys and YAML."""
    text = preset.source.read_text(encoding="utf-8")
    if group == "tuned":
        how = "Applied by itself to its algo/env pair (`~tuned` drops it)"
    else:
        how = f"Chosen with `{'-m +sweep' if group == 'sweep' else group}={preset.option}`"
    lines = [
        f"## {preset.option}",
        "",
        preset.description or "(no description)",
        "",
        f"{how}; from `{preset.distribution}`.",
        "",
    ]
    builds = preset_name(preset)
    kind = next((k for k, g in GROUPS.items() if g == group), None)
    if builds is not None and kind is not None and builds in REGISTRIES[kind].names():
        lines += [f"Builds the {kind} entry [`{builds}`](../registry/{kind}/{builds}.md).", ""]
    return [*lines, *keys_table(text), "", *yaml_block(text), ""]


def group_page(group: str, items: list[Preset]) -> str:
    lines = [
        f"# `{group}` presets",
        "",
        f"The YAML presets of the config group `{group}`, from `rlplat-list --kind {group}`.",
        "",
    ]
    for preset in items:
        lines += preset_section(group, preset)
    return "\n".join(lines)


def entry_page(kind: str, entry: Entry, groups: dict[str, list[Preset]]) -> str:
    """The page of one registry entry."""
    registry = REGISTRIES[kind]
    group = GROUPS.get(kind)
    lines = [f"# `{entry.name}` ({kind})", ""]
    if entry.error is not None:
        return "\n".join([*lines, f"This entry failed to load: {entry.error}", ""])
    target = entry.target
    assert target is not None
    lines += [summary(target), "", "| | |", "|---|---|"]
    lines.append(f"| kind | {kind} (entry-point group `{registry.group}`) |")
    if group is not None:
        lines.append(f"| chosen with | `{group}={entry.name}` |")
    else:
        lines.append(f"| chosen with | a key of the `transforms:` mapping: `transforms.{entry.name}` |")
    lines.append(f"| distribution | `{entry.distribution}` |")
    lines.append(f"| target | `{target.__module__}.{target.__qualname__}` |")
    lines.append("")
    own = [p for p in groups.get(group or "", []) if p.option == entry.name]
    users = [p for p in groups.get(group or "", []) if p.option != entry.name and preset_name(p) == entry.name]
    for preset in own:
        lines += [f"## YAML keys (`{group}/{preset.option}.yaml`, from `{preset.distribution}`)", ""]
        text = preset.source.read_text(encoding="utf-8")
        lines += [*keys_table(text), "", *yaml_block(text), ""]
    if not own:
        lines += [
            "## YAML keys",
            "",
            "No YAML preset of this name: the keys are the constructor's keyword arguments below.",
            "",
        ]
    if users:
        links = ", ".join(
            f"[`{group}={p.option}`](../../presets/{group_page_name(group or '')}.md#{p.option})" for p in users
        )
        lines += [f"Presets that build it: {links}.", ""]
    directive = "autoclass" if inspect.isclass(target) else "autofunction"
    lines += ["## Constructor", "", "```{eval-rst}", f".. {directive}:: {target.__module__}.{target.__qualname__}",
              "   :no-index:", "```", ""]  # fmt: skip
    return "\n".join(lines)


def console_scripts() -> list[str]:
    """The console scripts the rlplat distribution declares, sorted."""
    return sorted(ep.name for ep in distribution("rlplat").entry_points if ep.group == "console_scripts")


def help_text(script: str) -> str:
    """What ``<script> --help`` prints, run from this interpreter's scripts folder."""
    path = Path(sys.executable).parent / script
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run([str(path), "--help"], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise ExtensionError(f"{script} --help exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def cli_page() -> str:
    scripts = console_scripts()
    with ThreadPoolExecutor(max_workers=len(scripts)) as pool:
        texts = list(pool.map(help_text, scripts))
    lines = ["# Command-line help", "", "What `--help` prints for each console script rlplat installs.", ""]
    for script, text in zip(scripts, texts):
        lines += [f"## {script}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def public_modules() -> list[str]:
    """Every module of the rlplat package whose name has no part starting with ``_``, sorted."""
    found = ["rlplat"]
    for module in pkgutil.walk_packages(rlplat.__path__, "rlplat."):
        if not any(part.startswith("_") for part in module.name.split(".")):
            found.append(module.name)
    return sorted(found)


def api_pages() -> dict[str, str]:
    """``api/<top>.md`` per top-level module or package of rlplat, each with its submodules."""
    modules = public_modules()
    tops = sorted({".".join(m.split(".")[:2]) for m in modules if m != "rlplat"})
    pages = {}
    for top in tops:
        lines = [f"# {top}", ""]
        for module in [m for m in modules if m == top or m.startswith(top + ".")]:
            if module != top:
                lines += [f"## {module}", ""]
            lines += ["```{eval-rst}", f".. automodule:: {module}", "   :members:", "   :ignore-module-all:", "```", ""]
        pages[f"{top}.md"] = "\n".join(lines)
    toc = ["# Python API", "", "Generated from the docstrings of every public module.", ""]
    toc += ["```{toctree}", ":maxdepth: 1", "", *(top.removesuffix(".md") for top in pages), "```", ""]
    pages["index.md"] = "\n".join(toc)
    return pages


def registry_pages() -> dict[str, str]:
    """``registry/...`` and ``presets/...`` pages, keyed by path under ``reference/``."""
    sources, _ = conf_sources()
    groups = presets(sources)
    pages: dict[str, str] = {}
    kinds_toc = []
    for kind, registry in REGISTRIES.items():
        entries = registry.entries()
        group = GROUPS.get(kind)
        mapping = "loss.addons" if kind == "loss_addon" else "transforms"
        how = f"chosen with `{group}=<name>`" if group else f"keys of the `{mapping}:` mapping"
        lines = [f"# {kind}", "", f"Entries of the entry-point group `{registry.group}` ({how}).", "",
                 "| name | distribution | what |", "|---|---|---|"]  # fmt: skip
        for entry in entries:
            what = "failed to load" if entry.error is not None else cell(summary(entry.target))
            lines.append(f"| [`{entry.name}`]({kind}/{entry.name}.md) | `{entry.distribution}` | {what} |")
            pages[f"registry/{kind}/{entry.name}.md"] = entry_page(kind, entry, groups)
        lines += ["", "```{toctree}", ":hidden:", "", *(f"{kind}/{e.name}" for e in entries), "```", ""]
        pages[f"registry/{kind}.md"] = "\n".join(lines)
        kinds_toc.append(kind)
    pages["registry/index.md"] = "\n".join(
        [
            "# Registry entries",
            "",
            "Every registered name, rlplat's own and installed plugins', one page each.",
            "",
            "```{toctree}",
            ":maxdepth: 2",
            "",
            *kinds_toc,
            "```",
            "",
        ]  # fmt: skip
    )
    group_toc = []
    for group in sorted(groups):
        pages[f"presets/{group_page_name(group)}.md"] = group_page(group, groups[group])
        group_toc.append(group_page_name(group))
    pages["presets/index.md"] = "\n".join(
        [
            "# Presets",
            "",
            "The YAML presets of every config group: each key with its default and comment.",
            "",
            "```{toctree}",
            ":maxdepth: 1",
            "",
            *group_toc,
            "```",
            "",
        ]  # fmt: skip
    )
    return pages


def write_pages(root: Path, pages: dict[str, str]) -> None:
    """Write ``pages`` under ``root`` where their text changed; remove generated files not in them."""
    wanted = {root / path for path in pages}
    for generated in GENERATED:
        target = root / generated
        if target.is_dir():
            for old in target.rglob("*.md"):
                if old not in wanted:
                    old.unlink()
    for path, text in pages.items():
        file = root / path
        if not file.is_file() or file.read_text(encoding="utf-8") != text:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text, encoding="utf-8")


def generate(app: Sphinx, config: Any) -> None:
    reference = Path(app.srcdir) / "reference"
    pages = registry_pages()
    pages.update({f"api/{path}": text for path, text in api_pages().items()})
    pages["cli.md"] = cli_page()
    write_pages(reference, pages)


ATTRIBUTES = ("attribute", "data", "property")
"""Napoleon reads an attribute's first line (``Seconds a run was down, summed: ...``) as
``type: description``; rlplat's attribute docstrings are prose, kept as written."""


def before_napoleon(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what in ATTRIBUTES:
        app.env.rlplat_attribute_lines = list(lines)  # type: ignore[attr-defined]


def after_napoleon(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what in ATTRIBUTES:
        lines[:] = app.env.rlplat_attribute_lines  # type: ignore[attr-defined]


def resolve_short_name(app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.Element) -> Any:
    """A Python reference by a short name (``:class:`MLP``` in another module's docstring,
    ``rlplat.tracking.Tracker`` for ``rlplat.tracking.store.Tracker``) resolves to the one
    documented object whose dotted name starts and ends as it does; none or several stay
    unresolved, and the strict build fails on them."""
    if node.get("refdomain") != "py":
        return None
    parts = node["reftarget"].lstrip(".~").split(".")
    objects = env.get_domain("py").objects  # type: ignore[attr-defined]
    for cut in range(len(parts) - 1, -1, -1):
        head, tail = ".".join(parts[:cut]), "." + ".".join(parts[cut:])
        found = [n for n in objects if n.endswith(tail) and n.startswith(head)]
        if len(found) == 1:
            entry = objects[found[0]]
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, found[0])
        if found:
            return None
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", generate)
    app.connect("autodoc-process-docstring", before_napoleon, priority=400)
    app.connect("autodoc-process-docstring", after_napoleon, priority=600)
    app.connect("missing-reference", resolve_short_name)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
