"""Sphinx configuration of rlplat's documentation site (``make docs``, ``make docs-serve``).

Pages are Markdown (MyST); the reference is generated at build time by ``_ext/rlplat_docs.py``:
one page per registry entry and per preset group (from the registries and the YAML in
``conf/``, plugins included), the ``--help`` of each console script, and the Python API from
the docstrings. ``make docs`` builds with ``-W --keep-going -n``: any warning (a broken link,
an object that does not exist, a docstring that does not parse) fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "rlplat"
author = "rlplat developers"
copyright = "2026, rlplat developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "rlplat_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Markdown: anchors for headings down to ###, so that [text](page.md#a-heading) is checked
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# The API reference: members in source order, Google-style sections (Args:, Returns:, Raises:)
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # an Attributes: section as fields, not a second description of each
napoleon_include_special_with_doc = False  # no __new__ of named tuples

# Strict cross-references (-n): a reference to an rlplat object that does not exist fails the
# build. Objects of other libraries are not documented here (no network for intersphinx at
# build time), so references to them are let through by name.
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(torch|tensordict|gymnasium|numpy|np|omegaconf|hydra|mlflow|optuna|rich|scipy|pandas|"
        r"matplotlib|filelock|importlib|collections|typing|typing_extensions|pathlib|subprocess|threading|"
        r"multiprocessing|concurrent|dataclasses|enum|argparse|logging|signal|types|abc|os|io|json|requests|"
        r"contextlib|hydra_plugins|nn|inspect)(\..*)?",
    ),
    (r"py:.*", r"rlplat(\.\w+)*\._\w+(\..*)?"),  # private modules are not documented
    (r"py:.*", r".*\.\w+T"),  # type variables (ModuleT)
    (
        r"py:.*",
        r"(Any|Callable|Iterable|Iterator|Mapping|Sequence|MutableMapping|Generator|Protocol|"
        r"TypeVar|Literal|Self|ClassVar|NamedTuple|Path|Tensor|TensorDict|TensorDictBase|Module|Env|Space|"
        r"Box|Discrete|DictConfig|ListConfig|NDArray|ndarray|dtype|device|Optimizer|Parameter|"
        r"LRScheduler|EntryPoint|EntryPoints|Traversable|Console|Table|Text|Figure|Axes|Queue|Event|Process|"
        r"Thread|Lock|FileLock|Popen|CompletedProcess|TracebackType|FrameType|ModuleType|Trial|Study|"
        r"TrialState|MlflowClient|MlflowException|Run|RunInfo|Experiment|int|float|str|bool|bytes|None|object|type|tuple|"
        r"list|dict|set|frozenset|Exception|BaseException|KeyboardInterrupt|WrapperObsType|WrapperActType|ObsType|ActType)",
    ),
]

html_theme = "furo"
html_title = "rlplat"
html_static_path: list[str] = []
html_show_sourcelink = False
