"""Environments: registered single-env constructors and the vector-env adapter.

Importing this package imports neither torch nor the adapter, so that rlplat-train can build
a probe env (:mod:`rlplat.envs.probe`) before torch is imported: import the adapter from
:mod:`rlplat.envs.vector`.
"""
