"""Registries: lookups, kwargs checks, and entry-point plugins from real installed metadata."""

from __future__ import annotations

import sys

import gymnasium
import numpy as np
import pytest
from conftest import install_distribution

from rlplat.registry import ENVS, NETWORKS, ConfigError, PluginError, Registry

BOX = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path acting as site-packages for fake distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("fakeplugin")]:
        del sys.modules[mod]


def test_unknown_name_lists_names_and_closest():
    registry = Registry("env", "rlplat_test.none")
    for name in ("pendulum", "cartpole"):
        registry.register(name)(lambda: None)
    with pytest.raises(ConfigError) as error:
        registry.get("pendulumm")
    message = str(error.value)
    assert "env='pendulumm'" in message and "cartpole, pendulum" in message and "Did you mean 'pendulum'" in message


def test_unknown_keyword_names_group_valid_keys_and_closest():
    with pytest.raises(ConfigError) as error:
        NETWORKS.build("network", {"name": "mlp", "hiden_sizes": [8]}, BOX, 4)
    message = str(error.value)
    assert message.startswith("network.hiden_sizes=[8]")
    assert "hidden_sizes, activation, orthogonal_init" in message
    assert "Did you mean 'hidden_sizes'" in message


def test_missing_required_keyword_is_named():
    with pytest.raises(ConfigError, match=r"env\.id is required"):
        ENVS.build("env", {"name": "gym"})


def test_register_twice_is_an_error():
    registry = Registry("thing", "rlplat_test.none")
    registry.register("a")(lambda: 1)
    with pytest.raises(PluginError, match="registered twice"):
        registry.register("a")(lambda: 2)


def test_plugins_are_listed_without_import_and_loaded_on_first_use(site):
    install_distribution(
        site,
        "fakeplugin-good",
        {"rlplat_test.things": {"good": "fakeplugin_good:make"}},
        {"fakeplugin_good.py": "def make(size=1):\n    return ('good', size)\n"},
    )
    registry = Registry("thing", "rlplat_test.things")
    assert registry.names() == ["good"]
    assert "fakeplugin_good" not in sys.modules
    assert registry.build("thing", {"name": "good", "size": 3}) == ("good", 3)
    assert "fakeplugin_good" in sys.modules
    [entry] = registry.entries()
    assert (entry.name, entry.distribution, entry.error) == ("good", "fakeplugin-good", None)


def test_broken_plugin_breaks_only_its_own_lookup(site):
    install_distribution(
        site,
        "fakeplugin-broken",
        {"rlplat_test.mixed": {"broken": "fakeplugin_broken:make"}},
        {"fakeplugin_broken.py": "import no_such_module_anywhere\n"},
    )
    install_distribution(
        site,
        "fakeplugin-fine",
        {"rlplat_test.mixed": {"fine": "fakeplugin_fine:make"}},
        {"fakeplugin_fine.py": "def make():\n    return 'fine'\n"},
    )
    registry = Registry("thing", "rlplat_test.mixed")
    assert registry.names() == ["broken", "fine"]
    assert registry.build("thing", {"name": "fine"}) == "fine"
    with pytest.raises(PluginError) as error:
        registry.get("broken")
    assert "'broken'" in str(error.value) and "fakeplugin-broken" in str(error.value)
    assert "no_such_module_anywhere" in str(error.value)
    errors = {e.name: e.error for e in registry.entries()}
    assert errors["fine"] is None and "fakeplugin-broken" in errors["broken"]


def test_two_distributions_claiming_one_name_is_an_error_naming_both(site):
    for dist in ("fakeplugin-one", "fakeplugin-two"):
        module = dist.replace("-", "_")
        install_distribution(
            site,
            dist,
            {"rlplat_test.clash": {"same": f"{module}:make"}},
            {f"{module}.py": "def make():\n    return 1\n"},
        )
    registry = Registry("thing", "rlplat_test.clash")
    with pytest.raises(PluginError) as error:
        registry.get("same")
    assert "fakeplugin-one" in str(error.value) and "fakeplugin-two" in str(error.value)


def test_builtin_entries_are_registered():
    assert "gym" in ENVS.names() and "mlp" in NETWORKS.names()


def test_every_builtin_entry_is_declared_as_an_entry_point_of_rlplat():
    """rlplat's names are listed from its entry points, without imports: each decorated
    built-in must be declared in pyproject.toml, pointing at the decorated object."""
    import importlib
    from importlib.metadata import entry_points

    from rlplat.registry import BUILTIN_MODULES, REGISTRIES

    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    for registry in REGISTRIES.values():
        declared = {ep.name: ep for ep in entry_points(group=registry.group) if ep.dist and ep.dist.name == "rlplat"}
        builtins = {e.name: e for e in registry.entries() if e.distribution == "rlplat"}
        assert set(declared) == set(builtins), registry.kind
        for name, entry in builtins.items():
            assert entry.target is declared[name].load(), f"{registry.kind} {name}"


def test_listing_names_imports_no_torch(tmp_path):
    import subprocess

    code = (
        "import sys; from rlplat.registry import REGISTRIES; names = [r.names() for r in REGISTRIES.values()];"
        " assert 'ppo' in names[5], names; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.strip() == "False"
