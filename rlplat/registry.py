"""Registries: a name -> constructor map per component kind, extended by entry-point plugins.

Every entry is declared as an entry point in the groups ``rlplat.envs``,
``rlplat.transforms``, ``rlplat.networks``, ``rlplat.collectors``, ``rlplat.buffers``,
``rlplat.losses``, ``rlplat.optimizers`` and ``rlplat.loss_addons``: rlplat's own in its pyproject.toml, other
distributions' in theirs. Names are listed without importing anything (so composing a
config or a sweep's main process never imports torch); an entry is imported when first
asked for, and one that fails to import breaks only a run that selects it.

The decorator registers a constructor from code (tests, notebooks); on rlplat's own
entries it also marks the class or function as the target of its declared entry point::

    @ENVS.register("gym")
    def make_gym(id: str, ...) -> gymnasium.Env: ...

What an entry must build is a ``typing.Protocol`` in its package's ``base.py``
(``rlplat.losses.base.Loss``, ...); :func:`check_conforms` (or ``Registry.build(...,
protocol=...)``) checks a built object against one and names every missing member. This
module only receives protocols as arguments: it imports no component package (nor torch).

It also holds the words of bad configuration: :class:`ConfigError`, and the range checks
(:func:`check_in_range`, :func:`check_at_least`, :func:`check_positive`,
:func:`check_non_negative`, :func:`check_minibatch_size`) that the constructors and the
pre-torch pass (:func:`rlplat.hydra_ext.validate.check_ranges`) both call, so that each
rule's message is written once.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Any, cast

BUILTIN_DISTRIBUTION = "rlplat"


def declared_entry_points(group: str) -> EntryPoints:
    """The entry points of ``group`` declared by the installed distributions.

    One scan of every distribution's metadata serves all groups (``importlib.metadata``
    rescans them at each call, ~4 ms here, and a run looks up about fifteen groups); the
    scan is made again when ``sys.path`` has changed.
    """
    return cast(EntryPoints, _entry_points_on(tuple(sys.path)).select(group=group))


@cache
def _entry_points_on(path: tuple[str, ...]) -> Any:
    """Every entry point of the distributions found on ``path`` (``sys.path`` as a tuple):
    ``EntryPoints``, or on Python 3.11 ``SelectableGroups``; both select a group."""
    return entry_points()


CONF_ENTRY_POINTS = "rlplat.conf"
"""Entry-point group naming plugin packages that ship YAML config groups."""


def config_packages() -> list[str]:
    """Packages holding YAML config groups: rlplat's own (``rlplat.conf``), then plugins'.

    Returns:
        Importable package names; plugins' come from the ``rlplat.conf`` entry points.
    """
    return ["rlplat.conf", *(ep.value for ep in declared_entry_points(CONF_ENTRY_POINTS))]


def preset_node(group: str, name: str) -> dict[str, Any] | None:
    """The YAML option ``<group>/<name>.yaml`` of the first config package that ships one
    (:func:`config_packages`), as plain data, interpolations left as written; None when none
    does (a registered name without a YAML file of its own) or its package does not import."""
    from importlib.resources import files

    for package in config_packages():
        try:
            path = files(package).joinpath(group, f"{name}.yaml")
        except ModuleNotFoundError:
            continue
        if path.is_file():
            from omegaconf import OmegaConf

            node = OmegaConf.to_container(OmegaConf.create(path.read_text()), resolve=False)
            return cast(dict[str, Any], node) if isinstance(node, dict) else None
    return None


class ConfigError(ValueError):
    """Bad user configuration: the message names the config key, the value and what is valid."""


class RangeError(ConfigError):
    """A config value outside its range, ``key=value: rule``, raised by the ``check_*``
    functions below: the one wording of each rule, whichever of a constructor or the
    pre-torch pass (:func:`rlplat.hydra_ext.validate.check_ranges`) reports it.

    Attributes:
        key: The config key as given to the check (``"loss.gamma"``).
        value: The value given.
        rule: What is valid, without the key (``"must be in [0, 1]"``), for a caller that
            names the key its own way (``rlplat.optim.optimizers.SettingError``).
    """

    def __init__(self, key: str, value: Any, rule: str, show: Callable[[Any], str] = str) -> None:
        super().__init__(f"{key}={show(value)}: {rule}")
        self.key, self.value, self.rule, self.show = key, value, rule, show

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.key, self.value, self.rule, self.show)


def _is_number(value: Any, allow_inf: bool = False) -> bool:
    """Whether ``value`` is a real number (not a bool), not NaN, and finite unless ``allow_inf``:
    a range check refuses null, NaN (every comparison with it is false) and text alike."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return not math.isnan(value) and (allow_inf or not math.isinf(value))


def _interval(low: float, high: float, low_open: bool = False, high_open: bool = False) -> str:
    """``[low, high]``, with a parenthesis on an open side: ``(0, 1]``."""
    return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def _rule(words: str, unit: str = "", note: str = "") -> str:
    """``words``, then `` unit`` and `` (note)`` when given: ``must be >= 0 frames``."""
    return words + (f" {unit}" if unit else "") + (f" ({note})" if note else "")


def check_in_range(
    key: str,
    value: Any,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
    note: str = "",
    show: Callable[[Any], str] = str,
) -> None:
    """Raise unless ``value`` is a finite number in ``[low, high]`` (a side open when asked).

    Args:
        key: The config key, named in the message (``"loss.gamma"``).
        value: The value to check; null, NaN, infinity, a bool or text is out of range.
        low: Lower bound, written as given (``0``, not ``0.0``).
        high: Upper bound, written as given.
        low_open: Whether ``low`` itself is out of range: ``(0, 1]``.
        high_open: Whether ``high`` itself is out of range: ``[0, 1)``.
        note: Appended in parentheses.
        show: How the value is written: ``str`` (``loss.gamma=None``) or ``repr``.

    Raises:
        RangeError: ``loss.gamma=1.5: must be in [0, 1]``, ``loss.tau=0: must be in (0, 1]``.
    """
    above = _is_number(value) and (value > low if low_open else value >= low)
    if not (above and (value < high if high_open else value <= high)):
        raise RangeError(key, value, _rule(f"must be in {_interval(low, high, low_open, high_open)}", note=note), show)


def check_at_least(
    key: str, value: Any, minimum: float = 1, *, unit: str = "", show: Callable[[Any], str] = str
) -> None:
    """Raise unless ``value`` is a finite number >= ``minimum`` (a count: envs, epochs, steps).

    Args:
        key: The config key (``"collector.num_envs"``).
        value: The value to check; null, NaN, infinity, a bool or text is out of range.
        minimum: The least valid value.
        unit: Appended after the number: ``"update"``.
        show: How the value is written: ``str`` or ``repr``.

    Raises:
        RangeError: ``collector.num_envs=0: must be at least 1``,
            ``loss.target_update_interval=0: must be at least 1 update``.
    """
    if not (_is_number(value) and value >= minimum):
        raise RangeError(key, value, _rule(f"must be at least {minimum}", unit), show)


def check_positive(
    key: str, value: Any, *, note: str = "", show: Callable[[Any], str] = str, allow_inf: bool = False
) -> None:
    """Raise unless ``value`` is a number > 0.

    Args:
        key: The config key (``"optim.lr"``).
        value: The value to check; null, NaN, a bool or text is out of range, and infinity
            too unless ``allow_inf``.
        note: Appended in parentheses: the optimizer, the unit, the paper's value.
        show: How the value is written: ``str`` or ``repr``.
        allow_inf: Whether infinity is valid (a clip bound: no clipping).

    Raises:
        RangeError: ``optim.lr=0.0: must be > 0 (adam)``, ``loss.alpha_init=0: must be > 0``.
    """
    if not (_is_number(value, allow_inf) and value > 0):
        raise RangeError(key, value, _rule("must be > 0", note=note), show)


def check_non_negative(
    key: str,
    value: Any,
    *,
    unit: str = "",
    note: str = "",
    show: Callable[[Any], str] = str,
    allow_inf: bool = False,
) -> None:
    """Raise unless ``value`` is a number >= 0.

    Args:
        key: The config key (``"loss.warmup_frames"``).
        value: The value to check; null, NaN, a bool or text is out of range, and infinity
            too unless ``allow_inf``.
        unit: Appended after the 0: ``"frames"``.
        note: Appended in parentheses: the optimizer.
        show: How the value is written: ``str`` or ``repr``.
        allow_inf: Whether infinity is valid (a clip bound: no clipping).

    Raises:
        RangeError: ``loss.warmup_frames=-1: must be >= 0 frames``,
            ``optim.weight_decay=-0.1: must be >= 0 (adam)``.
    """
    if not (_is_number(value, allow_inf) and value >= 0):
        raise RangeError(key, value, _rule("must be >= 0", unit, note), show)


def check_minibatch_size(value: Any, frames: int) -> None:
    """Raise unless ``buffer.minibatch_size`` is an integer in [1, ``frames``], or null (a
    minibatch of the whole rollout).

    Args:
        value: ``buffer.minibatch_size``: frames per minibatch, or None.
        frames: Frames per rollout, ``collector.num_envs * collector.steps_per_env``.

    Raises:
        RangeError: ``buffer.minibatch_size=0: must be in [1, 2048], the frames per rollout
            (collector.num_envs * collector.steps_per_env)``.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= frames:
        per_rollout = "the frames per rollout (collector.num_envs * collector.steps_per_env)"
        rule = f"must be in {_interval(1, frames)}, {per_rollout}"
        raise RangeError("buffer.minibatch_size", value, rule, repr)


class PluginError(RuntimeError):
    """A plugin entry point could not be loaded, or two distributions claim one name."""


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``name`` by difflib's ratio, or None when nothing is close."""
    matches = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return matches[0] if matches else None


def unknown_name_message(key: str, value: Any, choices: Iterable[str]) -> str:
    """``key=value`` is not one of ``choices``: a message with the valid names and the closest."""
    choices = sorted(choices)
    message = f"{key}={value!r} is not known. Valid: {', '.join(choices) or '(none)'}."
    suggestion = closest(value, choices)
    if suggestion is not None:
        message += f" Did you mean {suggestion!r}?"
    return message


@dataclass
class Entry:
    """One registered name: where it comes from and, once loaded, its constructor."""

    name: str
    distribution: str
    target: Callable[..., Any] | None = None
    entry_point: EntryPoint | None = None
    error: str | None = None


class Registry:
    """Maps names to constructors for one component kind.

    Args:
        kind: Human name of the kind, also the config group (``"env"``, ``"network"``, ...).
        group: Entry-point group plugins declare their entries in (``"rlplat.envs"``).
    """

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, Entry] = {}
        self._conflicts: dict[str, list[str]] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator that registers a constructor under ``name``.

        Raises:
            PluginError: if ``name`` is already registered for this kind.
        """

        def decorator(target: Callable[..., Any]) -> Callable[..., Any]:
            known = self._entries.get(name)
            if known is not None and known.target is None and known.distribution == BUILTIN_DISTRIBUTION:
                known.target = target  # rlplat's own entry point, imported through its module
            elif known is not None and known.target is not target:
                raise PluginError(f"{self.kind} {name!r} is registered twice")
            else:
                self._entries[name] = Entry(name, BUILTIN_DISTRIBUTION, target=target)
            return target

        return decorator

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for ep in declared_entry_points(self.group):
            dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
            known = self._entries.get(ep.name)
            if known is not None:
                if known.distribution != dist:
                    self._conflicts.setdefault(ep.name, [known.distribution]).append(dist)
                continue
            self._entries[ep.name] = Entry(ep.name, dist, entry_point=ep)

    def names(self) -> list[str]:
        """All registered names, plugins included, sorted; imports no plugin."""
        self._discover()
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        """Every entry with its distribution; loads plugins so that failures are reported."""
        self._discover()
        for name in list(self._entries):
            try:
                self.get(name)
            except PluginError as error:
                self._entries[name].error = str(error)
        return [self._entries[name] for name in sorted(self._entries)]

    def get(self, name: str, key: str | None = None) -> Callable[..., Any]:
        """The constructor registered as ``name``, importing its plugin on first use.

        Args:
            name: Registered name.
            key: Config key the name was given under, for the error message.

        Raises:
            ConfigError: if ``name`` is not registered (lists the names and the closest).
            PluginError: if its plugin fails to import, or two distributions claim it.
        """
        self._discover()
        entry = self._entries.get(name)
        if entry is None:
            raise ConfigError(unknown_name_message(key or self.kind, name, self._entries))
        if name in self._conflicts:
            claimants = " and ".join(repr(d) for d in self._conflicts[name])
            raise PluginError(f"{self.kind} {name!r} is claimed by both {claimants}; uninstall one")
        if entry.target is None:
            assert entry.entry_point is not None
            try:
                entry.target = entry.entry_point.load()
            except Exception as error:  # any import failure of third-party code
                raise PluginError(
                    f"{self.kind} {name!r} from distribution {entry.distribution!r} failed to "
                    f"load ({entry.entry_point.value}): {type(error).__name__}: {error}"
                ) from error
        return entry.target

    def distribution(self, name: str) -> str | None:
        """The distribution that declares ``name``, or None for an unknown name; imports nothing."""
        self._discover()
        entry = self._entries.get(name)
        return None if entry is None else entry.distribution

    def build(
        self,
        key: str,
        node: Mapping[str, Any],
        *args: Any,
        protocol: type | None = None,
        also_valid: Sequence[str] = (),
        **extra: Any,
    ) -> Any:
        """Build the entry named by ``node["name"]`` with the node's other keys as kwargs.

        Args:
            key: Config key of the node (``"network"``), used in error messages.
            node: Mapping with ``name`` and the constructor's keyword arguments.
            *args: Positional arguments rlplat supplies (not settable from YAML).
            protocol: A ``typing.Protocol`` the built object must implement, checked by
                :func:`check_conforms`; None checks nothing.
            also_valid: Keys of the node that rlplat reads itself and took out of it before
                (``optim.max_grad_norm``), named among the valid keys of a message.
            **extra: Keyword arguments rlplat supplies (not settable from YAML).

        Raises:
            ConfigError: unknown name, or keyword arguments the constructor does not take
                (names the valid keys), or required ones missing.
            PluginError: if its plugin fails to import, or the built object lacks members of
                ``protocol`` (names them all).
        """
        if "name" not in node:
            raise ConfigError(f"{key} has no 'name'. Valid names: {', '.join(self.names())}.")
        kwargs = {k: v for k, v in node.items() if k != "name"}
        target = self.get(node["name"], key=f"{key}.name" if key != self.kind else key)
        entry = str(node["name"])
        check_kwargs(key, target, kwargs, supplied=len(args), reserved=extra.keys(), entry=entry, also_valid=also_valid)
        built = target(*args, **kwargs, **extra)
        if protocol is not None:
            name = node["name"]
            check_conforms(self.kind, name, built, protocol, distribution=self.distribution(name))
        return built


def check_kwargs(
    key: str,
    target: Callable[..., Any],
    kwargs: Mapping[str, Any],
    supplied: int = 0,
    reserved: Iterable[str] = (),
    entry: str | None = None,
    also_valid: Sequence[str] = (),
    name_key: bool = True,
) -> None:
    """Check ``kwargs`` against ``target``'s signature, in the user's terms.

    Args:
        key: Config key of the node being checked.
        target: Callable (function or class) the kwargs are for.
        kwargs: Keyword arguments from the config.
        supplied: Number of leading positional parameters rlplat fills in itself.
        reserved: Keyword parameters rlplat fills in itself.
        entry: The registry name of ``target``, named in the message (e.g. a key that an algo
            preset set for another network).
        also_valid: Keys of the node rlplat reads itself, listed among the valid keys (and
            suggested for a misspelling), never passed to ``target``.
        name_key: Whether the node names its entry with a ``name`` key (listed first among the
            valid keys); False for a node named by its own key (``loss.addons.<name>``).

    Raises:
        ConfigError: naming an unknown key with the valid keys and the closest, or a missing
            required key.
    """
    params = list(inspect.signature(target).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named = [p for p in params if p.kind in positional + (inspect.Parameter.KEYWORD_ONLY,)]
    settable = [p for p in named[supplied:] if p.name not in set(reserved)]
    valid = [p.name for p in settable] + list(also_valid)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        for name, value in kwargs.items():
            if name not in valid:
                owner = key if entry is None else f"{key} {entry!r}"
                listed = ", ".join(["name", *valid] if name_key else valid)
                message = f"{key}.{name}={value!r}: {owner} has no key {name!r}. Valid keys: {listed}."
                suggestion = closest(name, valid)
                if suggestion is not None:
                    message += f" Did you mean {suggestion!r}?"
                raise ConfigError(message)
    for p in settable:
        if p.default is inspect.Parameter.empty and p.name not in kwargs:
            raise ConfigError(f"{key}.{p.name} is required and not set.")


def protocol_members(protocol: type) -> dict[str, str]:
    """The members a ``typing.Protocol`` declares, read from its own class bodies.

    Walks the protocol and the protocols it extends, in MRO order (skipping ``object``,
    ``typing.Protocol`` and ``typing.Generic``): annotated names and properties are
    attributes; functions defined in the class body (dunders such as ``__call__``
    included), static and class methods are methods. Nothing typing adds by itself
    (``__init__``, ``__subclasshook__``, ...) is listed.

    Args:
        protocol: The protocol class.

    Returns:
        ``{name: "method" | "attribute"}`` in declaration order, the protocol's own first.
    """
    members: dict[str, str] = {}
    skip = {"object", "Protocol", "Generic"}
    for klass in protocol.__mro__:
        if klass.__name__ in skip and klass.__module__ in ("builtins", "typing", "typing_extensions"):
            continue
        own = dict.fromkeys(inspect.get_annotations(klass), "attribute")
        for name, value in vars(klass).items():
            function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if isinstance(value, property):
                own[name] = "attribute"
            elif inspect.isfunction(function) and function.__qualname__.startswith(f"{klass.__qualname__}."):
                own[name] = "method"
        for name, what in own.items():
            members.setdefault(name, what)  # a derived protocol's declaration wins
    return members


def check_conforms(kind: str, name: str, obj: Any, protocol: type, *, distribution: str | None = None) -> None:
    """Check that ``obj``, built by the ``kind`` entry ``name``, has every member of ``protocol``.

    Structural only (present, and callable where the protocol declares a method), like
    ``isinstance`` with a ``runtime_checkable`` protocol, but the error lists everything
    missing at once, in a plugin author's terms.

    Args:
        kind: Registry kind (``"loss"``), for the message.
        name: Registered name of the entry (``"ppo"``), for the message.
        obj: The object the entry built.
        protocol: The ``typing.Protocol`` class it must implement (members read by
            :func:`protocol_members`). Receives it as an argument, so this module imports no
            component package.
        distribution: Distribution that declares the entry; None looks it up in the
            registry of ``kind`` (and leaves it out of the message when unknown).

    Raises:
        PluginError: naming the entry, its distribution, the protocol and every missing
            member: methods as ``name()``, attributes by name, and methods that are present
            but not callable.
    """
    missing, not_callable = [], []
    for member, what in protocol_members(protocol).items():
        try:
            value = getattr(obj, member)
        except Exception:  # noqa: BLE001  (a property that fails counts as missing)
            missing.append(f"{member}()" if what == "method" else member)
            continue
        if what == "method" and not callable(value):
            not_callable.append(member)
    if not missing and not not_callable:
        return
    if distribution is None and kind in REGISTRIES:
        distribution = REGISTRIES[kind].distribution(name)
    origin = f" from distribution {distribution!r}" if distribution else ""
    where = f"{protocol.__module__}.{protocol.__qualname__}"
    problems = [f"missing {', '.join(missing)}"] if missing else []
    if not_callable:
        problems.append(f"not callable: {', '.join(not_callable)}")
    raise PluginError(
        f"{kind} {name!r}{origin} built a {type(obj).__name__} that does not implement {where}: {'; '.join(problems)}."
    )


ENVS = Registry("env", "rlplat.envs")
TRANSFORMS = Registry("transform", "rlplat.transforms")
NETWORKS = Registry("network", "rlplat.networks")
COLLECTORS = Registry("collector", "rlplat.collectors")
BUFFERS = Registry("buffer", "rlplat.buffers")
LOSSES = Registry("loss", "rlplat.losses")
OPTIMIZERS = Registry("optimizer", "rlplat.optimizers")
LOSS_ADDONS = Registry("loss_addon", "rlplat.loss_addons")
"""Extra policy-loss terms an on-policy loss adds, chosen under ``loss.addons`` (:mod:`rlplat.losses.addons`)."""

BUILTIN_MODULES = (
    "rlplat.envs",
    "rlplat.transforms",
    "rlplat.networks",
    "rlplat.collectors",
    "rlplat.buffers",
    "rlplat.losses",
    "rlplat.optim",
    "rlplat.losses.addons",
)
"""Modules whose import registers rlplat's own entries (each must also be an entry point)."""

REGISTRIES: dict[str, Registry] = {
    r.kind: r for r in (ENVS, TRANSFORMS, NETWORKS, COLLECTORS, BUFFERS, LOSSES, OPTIMIZERS, LOSS_ADDONS)
}
