"""The package's shape: no import cycle between modules, short functions, a short
``Trainer.__init__``, built-ins registered once (by entry point)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rlplat"
MAX_FUNCTION_LINES = 60


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of ``graph`` with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_modules() -> None:
    imports = grimp.build_graph("rlplat", "hydra_plugins")
    ours = {m for m in imports.modules if m.startswith(("rlplat", "hydra_plugins.rlplat_"))}
    graph = {m: set(imports.find_modules_directly_imported_by(m)) & ours for m in ours}
    assert strongly_connected(graph) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1))
    return found


def test_no_function_longer_than_60_lines() -> None:
    long = [(name, n) for path in PACKAGE.rglob("*.py") for name, n in functions(path) if n > MAX_FUNCTION_LINES]
    assert long == []


def test_trainer_init_is_short() -> None:
    tree = ast.parse((PACKAGE / "trainer.py").read_text())
    [trainer] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer"]
    [init] = [n for n in trainer.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    assert init.end_lineno - init.lineno + 1 < 30


def test_builtins_are_registered_by_entry_point_only() -> None:
    """No built-in uses the registration decorator: pyproject's entry points are the one way."""
    decorated = [
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"^@\w+\.register\(", path.read_text(), re.MULTILINE)
    ]
    assert decorated == []
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert {"rlplat.envs", "rlplat.losses", "rlplat.networks", "rlplat.optimizers"} <= set(groups)


@pytest.mark.parametrize(
    "group",
    [
        "rlplat.envs",
        "rlplat.transforms",
        "rlplat.networks",
        "rlplat.collectors",
        "rlplat.buffers",
        "rlplat.losses",
        "rlplat.optimizers",
        "rlplat.loss_addons",
    ],
)
def test_every_declared_builtin_loads(group: str) -> None:
    from importlib.metadata import entry_points

    declared = [ep for ep in entry_points(group=group) if ep.value.startswith("rlplat.")]
    assert declared
    for ep in declared:
        assert callable(ep.load()), ep


def test_the_command_line_layer_holds_no_module_level_mutable_state() -> None:
    """``rlplat/cli/`` keeps no state between calls: no ``global`` statement, and every name
    bound at module level is a constant (UPPER_CASE, bound once) or a definition. The process's
    one piece of state, its life under signals, is :data:`rlplat.signals.LIFE`."""
    found = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        found += [f"{path.name}:{node.lineno} global" for node in ast.walk(tree) if isinstance(node, ast.Global)]
        bound: list[str] = []
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            bound += [t.id for t in targets if isinstance(t, ast.Name)]
        found += [f"{path.name}: {name}" for name in bound if not name.isupper() or bound.count(name) > 1]
    assert found == []


def test_the_way_to_the_loop_passes_three_modules_of_cli_and_never_returns() -> None:
    """``launch.main -> train.train -> run.run_training -> Trainer.fit``: each module of the
    path imports only the ones after it (and the shared argument helpers), never one before."""
    path = ["launch", "train", "run"]
    for i, name in enumerate(path):
        source = (PACKAGE / "cli" / f"{name}.py").read_text()
        imported = set(re.findall(r"from rlplat\.cli\.(\w+) import|import rlplat\.cli\.(\w+)", source))
        modules = {a or b for a, b in imported}
        assert modules <= {*path[i + 1 :], "args", "resume"}, (name, modules)
        assert not modules & set(path[:i]), (name, modules)
    assert "Trainer(" in (PACKAGE / "cli" / "run.py").read_text()
