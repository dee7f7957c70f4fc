"""Recording runs in MLflow.

* :mod:`rlplat.tracking.store`: the MLflow adapter, :class:`~rlplat.tracking.store.Tracker`
  (imports MLflow);
* :mod:`rlplat.tracking.process`: :class:`~rlplat.tracking.process.TrackerProcess`, a
  Tracker in a child process, so that a training process never imports MLflow;
* :mod:`rlplat.tracking.records`: the params and tags of a run and the trainer callback that
  records metrics and checkpoints (light).

This package's own import is light: the store is imported only where it is used (and the
process module, which also runs as the child's ``python -m`` entry, only where it is used).
"""

from rlplat.tracking.records import TrackerCallback, flatten, run_tags

__all__ = ["TrackerCallback", "flatten", "run_tags"]
