"""Fails at import: it needs a package that is not installed (a plugin's missing dependency)."""

import rlplat_missing_dependency  # noqa: F401  (deliberately not installed)


def make_broken_env():
    """Never reached: importing this module raises ModuleNotFoundError."""
    raise AssertionError("unreachable")
