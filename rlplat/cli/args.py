"""What rlplat's ``key=value`` command-line tools share (``rlplat-eval``, ``rlplat-record``,
``rlplat-compare``, ``rlplat-sync``): typed keys, one-line errors with exit status 2, argparse
that reports usage errors the same way; and the ``RUN [key=value ...]`` command line of
``rlplat-eval`` and ``rlplat-record``: a run as ``rlplat-train resume=`` names it (a run id, a
run directory or a checkpoint file), their common keys and ``env.<key>`` overrides of the
run's env node. Imports neither torch nor MLflow.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from rlplat.registry import ConfigError, PluginError, closest
from rlplat.settings import DEVICES, check_choice, check_int
from rlplat.signals import stopped_with_one_line

if TYPE_CHECKING:
    from rlplat.tracking.locate import Located


def fail(prog: str, message: object) -> NoReturn:
    """Print ``<prog>: error: <message>`` as one line on stderr and exit with status 2."""
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def reported(prog: str, when_stopped: str) -> Iterator[None]:
    """Turn bad input (ConfigError, PluginError) into one ``<prog>: error:`` line and exit
    status 2, and Ctrl-C (KeyboardInterrupt) into one line and exit status 130
    (:func:`rlplat.signals.stopped_with_one_line`); ``HYDRA_FULL_ERROR=1`` shows the
    traceback instead, as for ``rlplat-train``.

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
        stopped_with_one_line(prog, when_stopped)


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
            value: Any = int(text)
        except ValueError:
            value = text  # refused, named as given
        check_int(key, value, minimum)
        return int(value)

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


ENV_PREFIX = "env."
"""Prefix of the keys that override a key of the run's env node (``env.id=...``)."""


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


COMMON_KEYS = {
    "deterministic": Key(boolean, True, "act with the policy's mode (true) or sample actions (false)"),
    "seed": Key(
        integer(0),
        None,
        "episode i is reset with seed + 10000 + i, as in training's evaluations; default: the run's seed",
    ),  # fmt: skip
    "device": Key(device, None, "cpu, cuda or auto; default: the run's trainer.device"),
    "tracking.uri": Key(text, None, "MLflow store to look a run id up in; default: outputs/mlflow.db here"),
}
"""Keys of ``rlplat-eval`` and ``rlplat-record``, besides ``env.<key>`` (any key of the run's env node)."""


def parse_pairs(pairs: Sequence[str], keys: Mapping[str, Key]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``key=value`` arguments -> (the values of ``keys``, defaults filled in; env overrides).

    Raises:
        ConfigError: for an argument without ``=``, an unknown key (with the valid keys and
            the closest), or a bad value.
    """
    values = {name: key.default for name, key in keys.items()}
    env: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{pair!r}: expected key=value, e.g. episodes=10")
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            env[name[len(ENV_PREFIX) :]] = env_value(name, value)
        elif name in keys:
            values[name] = keys[name].parse(name, value)
        else:
            valid = [*keys, f"{ENV_PREFIX}<key>"]
            message = f"{pair}: unknown key {name!r}. Valid keys: {', '.join(valid)}."
            suggestion = closest(name, [*keys, f"{ENV_PREFIX}id"])
            raise ConfigError(message + (f" Did you mean {suggestion!r}?" if suggestion else ""))
    return values, env


def argument_parser(prog: str, description: str, keys: Mapping[str, Key]) -> ArgumentParser:
    """The parser of ``<prog> RUN [key=value ...]``, every key listed in ``--help``."""
    rows = [(f"{name}={shown(k.default)}", k.help) for name, k in keys.items()]
    env_help = "override a key of the run's env node, e.g. env.id=Pendulum-v1 env.max_episode_steps=100"
    rows.append((f"{ENV_PREFIX}<key>=VALUE", env_help))
    listed = "\n".join(f"  {key}".ljust(26) + line for key, line in rows)
    parser = ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"keys:\n{listed}",
    )
    parser.add_argument("run", nargs="?", help="a run id (MLflow), a run directory or a checkpoint file")
    parser.add_argument("pairs", nargs="*", metavar="key=value", help="settings, listed below")
    return parser


def parse_command(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, keys: Mapping[str, Key]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``RUN key=value ...`` -> (the run as given, the values of ``keys``, env overrides).

    Raises:
        ConfigError: for a missing run or a bad ``key=value`` (see :func:`parse_pairs`).
    """
    args = parser.parse_args(argv)
    if args.run is None:
        raise ConfigError("give the run: a run id, a run directory or a checkpoint file (see --help)")
    values, env = parse_pairs(args.pairs, keys)
    return args.run, values, env


def locate_run(target: str, tracking_uri: str) -> Located:
    """:func:`rlplat.tracking.locate.locate` for evaluation (``final.pt`` first), which never
    creates a store: a run id given for an sqlite store that does not exist is an error.

    Raises:
        ConfigError: for a target that is no checkpoint, run directory or known run id, or a
            checkpoint that cannot be read.
    """
    from rlplat.tracking.locate import locate

    if not target:
        raise ConfigError("run='': give a run id, a run directory or a checkpoint file")
    path = Path(target).expanduser()
    looks_like_id = not path.exists() and "/" not in target and not target.endswith(".pt")
    if looks_like_id and tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri.removeprefix("sqlite:///").split("?", 1)[0])
        if not database.is_file():
            raise ConfigError(
                f"run={target!r}: no such file or directory, and no MLflow store at {tracking_uri} to look a run "
                "id up in (give a run id, a run directory or a checkpoint file; tracking.uri=... names a store)"
            )
    return locate("run", target, tracking_uri, which="final", warn=lambda m: print(f"warning: {m}", file=sys.stderr))
