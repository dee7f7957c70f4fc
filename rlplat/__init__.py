"""rlplat: train, compare and tune reinforcement-learning agents from the command line."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlplat")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
