"""What rlplat's ``key=value`` tools (``rlplat-eval``, ``-record``, ``-compare``, ``-sync``)
share: one parser of their command lines (:class:`Command`), typed keys, and bad input as one
line with exit status 2. Imports neither torch nor MLflow.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from rlplat.registry import ConfigError, PluginError, closest
from rlplat.settings import DEVICES, check_bool, check_choice, check_int
from rlplat.signals import stopped_with_one_line


def fail(prog: str, message: object) -> NoReturn:
    """Print ``<prog>: error: <message>`` as one line on stderr and exit with status 2."""
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def reported(prog: str, when_stopped: str) -> Iterator[None]:
    """Bad input (ConfigError, PluginError) in the block as one ``<prog>: error:`` line, exit
    status 2; Ctrl-C as one line saying ``when_stopped`` (what it leaves), exit status 130.
    ``HYDRA_FULL_ERROR=1`` shows the traceback instead, as for ``rlplat-train``."""
    try:
        yield
    except (ConfigError, PluginError, KeyboardInterrupt) as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if isinstance(error, KeyboardInterrupt):
            stopped_with_one_line(prog, when_stopped)
        fail(prog, error)


@dataclass(frozen=True)
class Key:
    """One ``key=value`` argument: ``parse(key, text) -> value`` (raises ConfigError naming
    the key, the value and what is valid), its ``default`` (None: decided later, e.g. from the
    checkpoint), and its ``help`` line."""

    parse: Callable[[str, str], Any]
    default: Any
    help: str


def integer(minimum: int) -> Callable[[str, str], int]:
    """A parser of integers >= ``minimum``."""

    def parse(key: str, text: str) -> int:
        try:
            value: Any = int(text)
        except ValueError:
            value = text  # refused, named as given
        check_int(key, value, minimum)
        return int(value)

    return parse


def number(ok: Callable[[float], bool] = math.isfinite, what: str = "a finite number") -> Callable[[str, str], float]:
    """A parser of numbers for which ``ok`` holds; ``what`` says which in its error."""

    def parse(key: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r}: must be a number") from None
        if not ok(value):
            raise ConfigError(f"{key}={text!r}: must be {what}")
        return value

    return parse


def boolean(key: str, text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0, any case)."""
    value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(text.lower(), text)
    check_bool(key, value)
    return bool(value)


def text(key: str, value: str) -> str:
    """A non-empty string, as given."""
    if not value:
        raise ConfigError(f"{key}='': give a value")
    return value


def output_path(*suffixes: str) -> Callable[[str, str], Path]:
    """A parser of paths to write: of a file with one of ``suffixes`` (e.g. ``.mp4``) and not a
    folder; with no ``suffixes``, of a folder, not a file. Its nearest existing ancestor must be
    a folder (so that it can be made)."""

    def parse(key: str, value: str) -> Path:
        path = Path(text(key, value))
        if suffixes and path.suffix.lower() not in suffixes:
            raise ConfigError(f"{key}={value!r}: must end in {' or '.join(suffixes)}")
        if suffixes and path.is_dir():
            raise ConfigError(f"{key}={value!r}: a folder exists there; give a file name")
        if not suffixes and path.exists() and not path.is_dir():
            raise ConfigError(f"{key}={value!r}: a file exists there; give a folder")
        ancestor = next(folder for folder in path.absolute().parents if folder.exists())
        if not ancestor.is_dir():
            raise ConfigError(f"{key}={value!r}: {str(ancestor)!r} is a file, not a folder")
        return path

    return parse


def device(key: str, value: str) -> str:
    """``cpu``, ``cuda`` or ``auto``."""
    check_choice(key, value, DEVICES)
    return value


def env_value(key: str, value: str) -> Any:
    """A value for the env node, read as YAML (``100`` an int, ``{g: 9.81}`` a mapping)."""
    try:
        return yaml.safe_load(value) if value else value
    except yaml.YAMLError as error:
        raise ConfigError(f"{key}={value!r}: not a valid YAML value ({' '.join(str(error).split())})") from None


def shown(default: Any) -> str:
    """A key's default as ``--help`` lists it (``true``, ``''`` for None)."""
    if isinstance(default, bool):
        return str(default).lower()
    return "" if default is None else str(default)


def default_tracking_uri() -> str:
    """``rlplat-train``'s default store: ``outputs/mlflow.db`` of the working directory."""
    return f"sqlite:///{Path.cwd() / 'outputs' / 'mlflow.db'}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with usage errors reported as one ``<prog>: error:`` line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        """Report a usage error and exit 2."""
        fail(self.prog, f"{message} (see {self.prog} --help)")


@dataclass(frozen=True)
class Command:
    """The command line ``<prog> TARGET ... [key=value ...]`` of a ``key=value`` tool, in any
    order: ``prog``, its ``usage`` line, ``description`` and ``keys`` for ``--help``, the error
    when a target is ``missing``, what ``targets`` are (for ``--help``), whether there may be
    ``many`` (else exactly one); ``is_pair`` tells a ``key=value`` from a target (by default: it
    holds ``=`` and is no existing path), ``target`` turns a target into what the command uses
    (raising ConfigError), and ``env`` allows ``env.<key>=VALUE`` overrides of the run's env."""

    prog: str
    usage: str
    description: str
    keys: Mapping[str, Key]
    missing: str
    targets: str | None = None
    many: bool = False
    is_pair: Callable[[str], bool] = lambda word: "=" in word and not Path(word).exists()
    target: Callable[[str], Any] = str
    env: bool = False

    def parse(self, argv: Sequence[str] | None) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
        """The command line (``sys.argv[1:]`` when None) -> (the targets, the values of ``keys``
        with the defaults filled in, the ``env.<key>`` overrides); ``--help`` lists the keys.

        Raises:
            ConfigError: for no target, a bad one, one too many (as no ``key=value``), an unknown
                key (naming the valid keys and the closest) or a bad value.
        """
        rows = [(f"{name}={shown(key.default)}", key.help) for name, key in self.keys.items()]
        if self.env:
            example = "e.g. env.id=Pendulum-v1 env.max_episode_steps=100"
            rows.append(("env.<key>=VALUE", f"override a key of the run's env node, {example}"))
        width = max(24, *(len(key) + 2 for key, _ in rows))
        listed = "\n".join(f"  {key:<{width}}{line}" for key, line in rows)
        epilog = (f"{self.targets}\n\n" if self.targets else "") + f"keys:\n{listed}"
        parser = ArgumentParser(prog=self.prog, usage=self.usage, description=self.description, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        parser.add_argument("words", nargs="*", help=argparse.SUPPRESS)
        values = {name: key.default for name, key in self.keys.items()}
        targets: list[Any] = []
        env: dict[str, Any] = {}
        for word in parser.parse_args(argv).words:
            name, _, value = word.partition("=")
            if not self.is_pair(word):
                if targets and not self.many:
                    raise ConfigError(f"{word!r}: expected key=value, e.g. {rows[0][0]}")
                targets.append(self.target(word))
            elif self.env and name.startswith("env.") and name != "env.":
                env[name.removeprefix("env.")] = env_value(name, value)
            elif name in self.keys:
                values[name] = self.keys[name].parse(name, value)
            else:
                valid = [*self.keys, *["env.<key>"] * self.env]
                suggestion = closest(name, [*self.keys, *["env.id"] * self.env])
                hint = f" Did you mean {suggestion!r}?" if suggestion else ""
                raise ConfigError(f"{word}: unknown key {name!r}. Valid keys: {', '.join(valid)}.{hint}")
        if not targets:
            raise ConfigError(self.missing)
        return targets, values, env


COMMON_KEYS = {
    "deterministic": Key(boolean, True, "act with the policy's mode (true) or sample actions (false)"),
    "seed": Key(
        integer(0),
        None,
        "episode i is reset with seed + 10000 + i, as in training's evaluations; default: the run's seed",
    ),
    "device": Key(device, None, "cpu, cuda or auto; default: the run's trainer.device"),
    "tracking.uri": Key(text, None, "MLflow store to look a run id up in; default: outputs/mlflow.db here"),
}
"""Keys of ``rlplat-eval`` and ``rlplat-record``, besides ``env.<key>`` (any key of the run's env node)."""


def run_command(prog: str, description: str, keys: Mapping[str, Key]) -> Command:
    """``<prog> RUN [key=value ...]`` (``rlplat-eval``, ``rlplat-record``): a run as
    ``rlplat-train resume=`` names it, ``keys`` then :data:`COMMON_KEYS`, ``env.<key>`` overrides."""
    return Command(
        prog, f"{prog} RUN [key=value ...]", description, {**keys, **COMMON_KEYS},
        "give the run: a run id, a run directory or a checkpoint file (see --help)",
        targets="RUN: a run id (MLflow), a run directory or a checkpoint file", env=True,
    )  # fmt: skip
