"""The conformance kit: check a plugin's entries the way rlplat builds and runs them.

For plugin authors' own test suites (plain functions; no pytest needed)::

    from rlplat.testing import check_env, check_network

    def test_point_mass():
        check_env("point_mass", {"dim": 2, "step_size": 0.1, "max_episode_steps": 50})

    def test_residual_mlp():
        check_network("residual_mlp", {"width": 32, "num_blocks": 2})

Each check takes the registered name (the entry point's, so it also checks the
distribution's metadata) or the constructor itself, and the YAML keyword arguments; builds
the entry through its registry with the arguments rlplat supplies (unknown or missing keys
raise ``ConfigError`` as in a run); runs it once; and raises ``AssertionError`` whose
message names the entry and what is wrong (a missing protocol member, a shape, a dtype, a
gradient that does not flow, ...). What each one checks is in its docstring; the
interfaces themselves are the Protocols in each package's ``base.py``:

* :func:`check_env`: the entry is an :class:`rlplat.envs.base.EnvFactory`; it builds a
  ``gymnasium.Env``.
* :func:`check_network`: a :class:`rlplat.networks.base.TorsoFactory`; it builds an
  ``nn.Module`` mapping ``[N, *obs_shape]`` to ``[N, out_features]``.
* :func:`check_transform`: a :class:`rlplat.transforms.base.TransformFactory`; it builds a
  :class:`rlplat.transforms.base.TransformLike`.
* :func:`check_collector`: a :class:`rlplat.collectors.base.CollectorFactory`; it builds a
  :class:`rlplat.collectors.base.Collector`.
* :func:`check_buffer`: a :class:`rlplat.buffers.base.BufferFactory`; it builds a
  :class:`rlplat.buffers.base.Buffer`.
* :func:`check_loss`: a :class:`rlplat.losses.base.LossFactory`; it builds a
  :class:`rlplat.losses.base.Loss` (whose ``policy`` is a
  :class:`rlplat.collectors.base.Policy`).
* :func:`check_loss_addon`: a :class:`rlplat.losses.addons.LossAddonFactory`; it builds a
  :class:`rlplat.losses.addons.LossAddon` whose term joins an on-policy loss's output.
"""

from rlplat.testing.buffers import check_buffer
from rlplat.testing.collectors import check_collector
from rlplat.testing.envs import check_env
from rlplat.testing.loss_addons import check_loss_addon
from rlplat.testing.losses import check_loss
from rlplat.testing.networks import check_network
from rlplat.testing.transforms import check_transform

__all__ = [
    "check_buffer",
    "check_collector",
    "check_env",
    "check_loss",
    "check_loss_addon",
    "check_network",
    "check_transform",
]
