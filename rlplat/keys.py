"""TensorDict key names and shape conventions, declared once for every part of rlplat.

Names follow TorchRL's so that tensordict tooling and TorchRL users feel at home.

Shapes, with ``T`` time steps, ``B`` parallel environments and ``N`` samples:

* A rollout from a collector has batch size ``[T, B]`` (time first).
* A sample from a buffer has batch size ``[N]``.
* ``OBSERVATION``: ``[*batch, *obs_shape]`` in the observation space's dtype
  (:func:`rlplat.envs.base.observation_dtype`: float32 for float vectors, uint8 for images,
  int64 for discrete codes and token ids), or for a ``Dict`` observation space a TensorDict
  of batch size ``batch``, one entry per key, each in its own dtype.
* ``ACTION``: ``[*batch, action_dim]`` float32 for Box actions (in the policy's
  normalised space, see :mod:`rlplat.networks.heads`), ``[*batch]`` int64 for Discrete.
* ``ACTION_LOG_PROB``: ``[*batch]`` float32 (no trailing dim, as in TorchRL).
* ``STATE_VALUE``, ``ADVANTAGE``, ``VALUE_TARGET``: ``[*batch, 1]`` float32.
* ``("next", REWARD)``: ``[*batch, 1]`` float32: rewards carry a trailing singleton dim.
* ``("next", DONE | TERMINATED | TRUNCATED)``: ``[*batch, 1]`` bool. ``TERMINATED`` means
  the MDP ended (no bootstrap); ``TRUNCATED`` means a time limit cut the episode (bootstrap
  from the next observation). ``DONE = TERMINATED | TRUNCATED``. They are never merged.
* ``RECURRENT_STATE``: ``[*batch, S]`` float32, the state a recurrent policy acted from at
  that step (zeros at an episode's first step; :mod:`rlplat.networks.recurrent`).
* ``MASK``, ``BURN_IN``: ``[N, P]`` bool in sequences of a recurrent policy's batches: the
  steps a loss averages over, and the real steps before them that only refresh the state
  (:func:`rlplat.functional.sequences.episode_sequences`).
* ``POLICY_VERSION``: ``[T, B]`` int64, in rollouts of collectors whose workers act with
  older weights than the learner's (``collector=async``): how many rollouts the learner had
  learned from when the weights a step was taken with were sent (0: the initial weights).
* ``("next", OBSERVATION)`` is always the true next observation, also on the last step of
  an episode (never the reset observation of the following one).
"""

OBSERVATION = "observation"
ACTION = "action"
ACTION_LOG_PROB = "action_log_prob"
STATE_VALUE = "state_value"
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
RECURRENT_STATE = "recurrent_state"
MASK = "mask"
BURN_IN = "burn_in"
POLICY_VERSION = "policy_version"

NEXT = "next"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
TRUNCATED = "truncated"

NEXT_OBSERVATION = (NEXT, OBSERVATION)
NEXT_REWARD = (NEXT, REWARD)
NEXT_DONE = (NEXT, DONE)
NEXT_TERMINATED = (NEXT, TERMINATED)
NEXT_TRUNCATED = (NEXT, TRUNCATED)
NEXT_STATE_VALUE = (NEXT, STATE_VALUE)

LOSS_PREFIX = "loss_"

SAMPLE_INDEX = "index"
"""Storage positions of a prioritized replay's samples, ``[N]`` int64 (``[N, L]`` in windows:
each step's, the priority going to the window's first step), to hand back with their TD
errors (:class:`rlplat.buffers.base.PrioritizedBuffer`)."""
IMPORTANCE_WEIGHT = "weight"
"""Importance-sampling weights of a prioritized replay's samples, ``[N]`` float32 in (0, 1]
(``[N, L]`` in windows, the same along L); a loss that finds them weights its per-sample TD
losses by them (Schaul et al. 2016)."""
TD_ERROR = "td_error"
"""Key of a value-based loss's output: ``[N]`` float32 ``|Q(s, a) - y|`` per sample, detached
(the largest over twin critics), from which a prioritized replay sets priorities."""
