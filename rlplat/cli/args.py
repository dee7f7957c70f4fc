"""What rlplat's ``key=value`` command-line tools share (``rlplat-eval``, ``rlplat-record``,
``rlplat-compare``): typed keys, one-line errors with exit status 2, argparse that reports
usage errors the same way. Imports neither torch nor MLflow.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from rlplat.registry import ConfigError, PluginError
from rlplat.settings import check_int


def fail(prog: str, message: object) -> NoReturn:
    """Print ``<prog>: error: <message>`` as one line on stderr and exit with status 2."""
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def reported(prog: str, when_stopped: str) -> Iterator[None]:
    """Turn bad input (ConfigError, PluginError) into one ``<prog>: error:`` line and exit
    status 2, and Ctrl-C (KeyboardInterrupt) into one ``<prog>: stopped by SIGINT:
    <when_stopped>`` line and exit status 130; ``HYDRA_FULL_ERROR=1`` shows the traceback
    instead, as for ``rlplat-train``.

    Args:
        prog: The command's name.
        when_stopped: What a Ctrl-C inside the block leaves, e.g. ``"nothing recorded"``.
    """
    try:
        yield
    except (ConfigError, PluginError) as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        fail(prog, error)
    except KeyboardInterrupt:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"{prog}: stopped by SIGINT: {when_stopped}", file=sys.stderr)
        sys.exit(130)


@dataclass(frozen=True)
class Key:
    """One ``key=value`` argument.

    Attributes:
        parse: ``(key, text) -> value``; raises ConfigError naming the key, the value and
            what is valid.
        default: Its value when not given (None: decided later, e.g. from the checkpoint).
        help: One line for ``--help``.
    """

    parse: Callable[[str, str], Any]
    default: Any
    help: str


def integer(minimum: int) -> Callable[[str, str], int]:
    """A parser of integers >= ``minimum``."""

    def parse(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r}: must be an integer >= {minimum}") from None
        check_int(key, value, minimum)
        return value

    return parse


def boolean(key: str, text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0, any case)."""
    value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(text.lower())
    if value is None:
        raise ConfigError(f"{key}={text!r}: must be true or false")
    return value


def text(key: str, value: str) -> str:
    """A non-empty string, as given."""
    if not value:
        raise ConfigError(f"{key}='': give a value")
    return value


def _creatable(key: str, value: str, path: Path) -> None:
    """Raise ConfigError unless ``path`` can be made: its nearest existing ancestor is a folder."""
    for ancestor in path.absolute().parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ConfigError(f"{key}={value!r}: {str(ancestor)!r} is a file, not a folder")
            return


def output_folder(key: str, value: str) -> Path:
    """A folder to write into: one that exists, or one that can be made (not a file's path)."""
    path = Path(text(key, value))
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}={value!r}: a file exists there; give a folder")
    _creatable(key, value, path)
    return path


def output_file(*suffixes: str) -> Callable[[str, str], Path]:
    """A parser of paths of a file to write, with one of ``suffixes`` (e.g. ``.mp4``), that is
    not a folder and whose folder exists or can be made."""

    def parse(key: str, value: str) -> Path:
        path = Path(text(key, value))
        if path.suffix.lower() not in suffixes:
            raise ConfigError(f"{key}={value!r}: must end in {' or '.join(suffixes)}")
        if path.is_dir():
            raise ConfigError(f"{key}={value!r}: a folder exists there; give a file name")
        _creatable(key, value, path)
        return path

    return parse


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with usage errors reported as one ``<prog>: error:`` line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        """Report a usage error and exit 2."""
        fail(self.prog, f"{message} (see {self.prog} --help)")


def shown(default: Any) -> str:
    """A key's default as ``--help`` lists it (``true``, ``''`` for None)."""
    if isinstance(default, bool):
        return str(default).lower()
    return "" if default is None else str(default)


def default_tracking_uri() -> str:
    """``rlplat-train``'s default store: ``outputs/mlflow.db`` of the working directory."""
    return f"sqlite:///{Path.cwd() / 'outputs' / 'mlflow.db'}"
