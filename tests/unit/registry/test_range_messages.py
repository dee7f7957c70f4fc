"""Each range check's message is written once: in :mod:`rlplat.registry`'s ``check_*``
functions, or at the one place that checks that key.

The pre-torch pass reporting the constructors' own words is checked at run time by
``tests/unit/hydra_ext/test_validate.py::test_range_messages_are_the_constructors_own``.
"""

from __future__ import annotations

import ast
import math
import pickle
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlplat
from rlplat.registry import (
    ConfigError,
    RangeError,
    check_at_least,
    check_in_range,
    check_minibatch_size,
    check_non_negative,
    check_positive,
)

PACKAGE = Path(rlplat.__file__).parent

MARKERS = ("must be in [", "must be in (", "must be at least", "must be > 0", "must be >= ", "must be an integer >=")
"""Words that make a string a range-check message."""

ELSEWHERE: dict[str, str] = {}
"""Templates known to be written twice, and why; none today."""


def _template(node: ast.JoinedStr | ast.Constant) -> str:
    """A string literal with every placeholder written ``{}``: ``f"loss.{key}={value}: ..."``
    -> ``loss.{}={}: ...``."""
    if isinstance(node, ast.JoinedStr):
        text = "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    else:
        text = node.value
    return re.sub(r"\{[^{}]*\}", "{}", text)


def _strings(tree: ast.AST) -> Iterator[ast.JoinedStr | ast.Constant]:
    """Every string constant and f-string of ``tree``, docstrings (bare string statements) left out;
    an f-string counts as one string, its literal parts not again."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            yield node
            continue
        stack.extend(ast.iter_child_nodes(node))


def range_messages() -> dict[str, list[str]]:
    """``{template: ["path:line", ...]}`` for every range-check message in the package."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _strings(tree):
            template = _template(node)
            if any(marker in template for marker in MARKERS):
                found[template].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_each_range_message_is_written_once():
    found = range_messages()
    assert any("must be at least" in template for template in found), "the scan found nothing: markers out of date?"
    twice = {t: places for t, places in found.items() if len(places) > 1 and t not in ELSEWHERE}
    report = "\n".join(f"{t!r}:\n    " + "\n    ".join(places) for t, places in sorted(twice.items()))
    assert not twice, f"range messages written more than once (call rlplat.registry's check_*):\n{report}"


def _message(check, *args, **kwargs) -> str:
    with pytest.raises(RangeError) as error:
        check(*args, **kwargs)
    return str(error.value)


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, True, "0.5", 1.5, -0.1])
def test_in_range_refuses_what_is_no_number_in_it(value):
    assert _message(check_in_range, "loss.gamma", value, 0, 1) == f"loss.gamma={value}: must be in [0, 1]"


def test_in_range_bounds():
    for value in (0, 0.5, 1, 1.0):
        check_in_range("loss.gamma", value, 0, 1)
    check_in_range("loss.tau", 1, 0, 1, low_open=True)
    assert _message(check_in_range, "loss.tau", 0, 0, 1, low_open=True) == "loss.tau=0: must be in (0, 1]"
    assert _message(check_in_range, "b", 1.0, 0, 1, high_open=True, note="adam") == "b=1.0: must be in [0, 1) (adam)"


def test_counts_and_signs():
    check_at_least("collector.num_envs", 1)
    assert _message(check_at_least, "collector.num_envs", 0) == "collector.num_envs=0: must be at least 1"
    assert _message(check_at_least, "collector.num_envs", None) == "collector.num_envs=None: must be at least 1"
    assert _message(check_at_least, "n", math.inf) == "n=inf: must be at least 1"
    assert (
        _message(check_at_least, "loss.target_update_interval", 0, unit="update")
        == "loss.target_update_interval=0: must be at least 1 update"
    )
    assert _message(check_positive, "lr", 0.0, note="adam", show=repr) == "lr=0.0: must be > 0 (adam)"
    assert _message(check_positive, "lr", math.nan) == "lr=nan: must be > 0"
    assert _message(check_positive, "lr", math.inf) == "lr=inf: must be > 0"
    check_positive("clip", math.inf, allow_inf=True)
    assert _message(check_positive, "b", "x", show=repr) == "b='x': must be > 0"
    check_non_negative("w", 0)
    assert _message(check_non_negative, "f", -1, unit="frames") == "f=-1: must be >= 0 frames"
    assert _message(check_non_negative, "w", None, note="adam") == "w=None: must be >= 0 (adam)"


def test_minibatch_size():
    check_minibatch_size(None, 32)  # the whole rollout
    check_minibatch_size(32, 32)
    for value in (0, 33, 8.0, True):
        assert _message(check_minibatch_size, value, 32) == (
            f"buffer.minibatch_size={value!r}: must be in [1, 32], the frames per rollout "
            "(collector.num_envs * collector.steps_per_env)"
        )


def test_a_range_error_is_a_config_error_that_pickles():
    with pytest.raises(ConfigError) as error:
        check_in_range("loss.gamma", 2, 0, 1)
    copy = pickle.loads(pickle.dumps(error.value))
    assert isinstance(copy, RangeError) and str(copy) == "loss.gamma=2: must be in [0, 1]"
    assert (copy.key, copy.value, copy.rule) == ("loss.gamma", 2, "must be in [0, 1]")
