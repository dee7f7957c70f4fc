"""YAML config groups of the example plugin (env/, network/, tuned/), on Hydra's search
path through the ``rlplat.conf`` entry point."""
