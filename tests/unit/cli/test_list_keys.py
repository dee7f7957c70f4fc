"""``rlplat-list`` shows each registry entry's YAML keys and their defaults, read from its
signature, without the arguments rlplat supplies; the listing and a run's YAML check agree."""

from __future__ import annotations

import inspect

import pytest

from rlplat.cli.list import main
from rlplat.hydra_ext.catalog import entry_keys, supplied_arguments, yaml_parameters
from rlplat.registry import REGISTRIES, ConfigError, check_kwargs


def listing(capsys, kind: str) -> list[str]:
    """The lines ``rlplat-list --kind <kind>`` prints (stdout is not a terminal: nothing wraps)."""
    assert main(["--kind", kind]) == 0
    return capsys.readouterr().out.splitlines()


def keys_of(lines: list[str], name: str) -> str:
    """The keys line printed under the entry row of ``name`` (in the entries, the first
    table), without its ``keys:`` label."""
    entries = lines[: lines.index("")]
    [row] = [i for i, line in enumerate(entries) if line.split()[:1] == [name]]
    return lines[row + 1].strip().removeprefix("keys: ")


def test_transforms_and_networks_show_their_keys_with_defaults(capsys):
    lines = listing(capsys, "transform")
    assert keys_of(lines, "frame_stack") == "k=4, padding='reset'"
    assert keys_of(lines, "resize") == "size=84"
    assert keys_of(lines, "time_limit") == "max_episode_steps (required)"
    assert keys_of(lines, "clip_action") == "(none)"
    assert "keys: what the YAML sets, with the defaults in code; rlplat supplies observation_space itself" in lines
    assert not any("observation_space=" in line or "observation_space (required)" in line for line in lines)

    lines = listing(capsys, "network")
    assert keys_of(lines, "multi_input").startswith("keys=None, image=None, vector=None, text=None, hidden_sizes=()")
    assert keys_of(lines, "mlp") == "hidden_sizes=(64,), activation='tanh', orthogonal_init=True"
    assert lines[lines.index("") - 1].endswith(
        "rlplat supplies observation_space, out_features itself; every network also takes core=None, core_size=128, "
        "core_layers=1 (a recurrent core after it)"
    )


@pytest.mark.parametrize(
    "kind,supplied",
    [
        ("env", ((), ("render_mode",))),
        ("transform", (("observation_space",), ())),
        ("network", (("observation_space", "out_features"), ())),
        ("collector", ((), ("make_env", "policy", "total_frames", "device", "seed"))),
        ("buffer", ((), ("rollout_shape",))),
        ("loss", (("observation_space", "action_space", "network"), ())),
        ("optimizer", (("params",), ())),
    ],
)
def test_supplied_arguments_come_from_each_kinds_factory_protocol(kind, supplied):
    assert supplied_arguments(kind) == supplied


def test_keys_leave_out_what_rlplat_supplies_for_every_kind():
    def env(id: str, max_episode_steps: int | None = None, render_mode: str | None = None): ...
    def collector(make_env, policy, total_frames, device, seed, num_envs: int = 8): ...
    def buffer(rollout_shape, *, epochs: int = 10, minibatch_size: int | None = 64): ...
    def loss(observation_space, action_space, network, *, gamma: float = 0.99, scale=abs): ...
    def network(space, width, /, *args, depth: int = 2, **extra): ...

    assert entry_keys("env", env) == "id (required), max_episode_steps=None"
    assert entry_keys("collector", collector) == "num_envs=8"
    assert entry_keys("buffer", buffer) == "epochs=10, minibatch_size=64"
    assert entry_keys("loss", loss) == "gamma=0.99, scale=abs"  # a callable default by its name
    assert entry_keys("network", network) == "depth=2, **extra"  # any key is accepted
    assert entry_keys("network", max) == "(signature not readable)"


def test_every_entry_lists_exactly_the_keys_a_run_accepts():
    """Each listed key passes the YAML check of a run (check_kwargs, given what build.py
    supplies), and each supplied argument is refused there: one rule, seen from both sides."""
    for kind, registry in REGISTRIES.items():
        positional, reserved = supplied_arguments(kind)
        for entry in registry.entries():
            assert entry.error is None and entry.target is not None, entry
            keys = [p.name for p in yaml_parameters(kind, entry.target)]
            check_kwargs(kind, entry.target, dict.fromkeys(keys), supplied=len(positional), reserved=reserved)
            supplied = {*positional, *reserved} & set(inspect.signature(entry.target).parameters)
            assert supplied and not supplied & set(keys), (kind, entry.name)
            with pytest.raises(ConfigError, match="has no key"):
                check_kwargs(kind, entry.target, dict.fromkeys(supplied), supplied=len(positional), reserved=reserved)
