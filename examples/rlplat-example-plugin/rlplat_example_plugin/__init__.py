"""Example rlplat plugin: a point-mass env, a residual MLP torso, an observation clip, a loss
add-on (an entropy floor), and YAML presets.

Nothing here registers by import: rlplat finds the entries through the entry points in
this distribution's pyproject.toml and imports a module only when a run selects it.
"""
