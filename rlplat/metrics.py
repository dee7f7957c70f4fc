"""Names of the metrics a run logs that the trainer, the reports and the sweeps share.

Every metric is keyed ``<group>/<name>`` (``eval/return_mean``, ``time/fps``); frames are env
steps summed over all envs, seconds are wall-clock seconds.
"""

from __future__ import annotations

TO_TARGET = "time/to_target_s"  # training seconds until an evaluation reached trainer.target_return
TRAIN_SECONDS = "time/train_s"  # training seconds so far (not the loop's callbacks'), logged at every log step
DOWNTIME_SECONDS = "time/downtime_s"
"""Seconds a resumed run was down, summed over its resumes: from the end of the process that
stopped (the run's end time, else its last logged metric) to the start of the one that resumed
it; logged at each resume, timestamped at that start. Wall times subtract it."""
LOWER_IS_BETTER = frozenset({TO_TARGET})
"""Metrics that are better lower: reports rank them lowest first."""
FINAL_METRICS = (
    "eval/return_mean",
    "eval/return_std",
    "eval/return_min",
    "eval/return_max",
    "eval/episode_length",
    "rollout/return_mean",
    "rollout/return_std",
    "rollout/return_min",
    "rollout/return_max",
    "rollout/episode_length",
    "time/fps",
    TO_TARGET,
)
"""The metrics a run ends with (their last values): the end-of-run table, and what
``trainer.objective`` may name."""
