"""Accelerated paths for the exact built-in classes: closed-form gradients, numpy passes and
flat parameter buffers.

The math of rlplat has one definition: a loss's ``forward``, trained by autograd, and a
network's ``forward``. What this package adds computes the same faster, and applies only
where the loss and its networks are exactly the classes it was written and tested for, with
settings it covers; a subclass, a plugin or an uncovered setting runs the definition, and
the console says which path runs and why (:class:`Acceleration`). A fast update is checked
against autograd on the first minibatch of every run that uses it, and gives way to
autograd, with a warning naming the parameter, where they differ. ``trainer.accel=false``
turns it all off.

No component imports this package: :func:`rlplat.build.build` chooses the paths and hands
them to the trainer (:class:`rlplat.trainer.Parts`); :func:`rlplat.testing.check_loss`
compares them with autograd for any loss entry.
"""

from rlplat.accel.check import compare_acting, compare_gradients
from rlplat.accel.plan import Acceleration, CheckedGradients

__all__ = ["Acceleration", "CheckedGradients", "compare_acting", "compare_gradients"]
