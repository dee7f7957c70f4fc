"""What a collector entry implements (entry-point group ``rlplat.collectors``).

A collector runs the policy in B parallel envs and yields rollouts: TensorDicts with batch
size ``[T, B]`` (time first, then envs), until ``total_frames`` frames (env steps summed over
the envs) are collected. Synchronous, multiprocess, asynchronous or Ray collectors all yield
the same rollout, so the trainer and the losses never know which one ran.

* :class:`CollectorFactory`: what the entry point names; which arguments rlplat supplies.
* :class:`Collector`: what the built collector provides to the trainer.
* :class:`Policy`: what a collector needs from the agent (a loss's ``policy``);
  :func:`act_function` picks how to call it for a rollout.
* :class:`RecurrentPolicy`: a policy with a state per env (LSTM, GRU); :class:`Acting`
  carries that state over the steps of B envs, reset where an episode ends.
* :data:`EnvMaker`: how a collector gets its envs, ``(num_envs, vectorization) -> env``.

Keys, shapes and dtypes of a rollout (names from :mod:`rlplat.keys`; ``A`` the Box action
dim, ``*obs`` the observation shape):

* ``observation``: ``[T, B, *obs]`` (float32 vectors, uint8 images, int64 codes; a
  TensorDict of entries for a ``Dict`` space: :data:`rlplat.envs.base.Observation`), s_t, transformed.
* ``action``: ``[T, B, A]`` float32 in the policy's normalised space ``[-1, 1]`` (Box), or
  ``[T, B]`` int64 (Discrete): a_t as the policy returned it.
* ``action_log_prob``: ``[T, B]`` float32, log pi(a_t | s_t) when acting.
* ``recurrent_state``: ``[T, B, S]`` float32, only for a :class:`RecurrentPolicy`: the state
  it acted from at step t (zeros at an episode's first step).
* ``("next", "observation")``: ``[T, B, *obs]``, as ``observation``, the true s_{t+1}, also on the
  last step of an episode (never the reset observation of the next one).
* ``("next", "reward")``: ``[T, B, 1]`` float32, r_{t+1}, transformed.
* ``("next", "terminated")``: ``[T, B, 1]`` bool, the MDP ended: no bootstrap.
* ``("next", "truncated")``: ``[T, B, 1]`` bool, a time limit cut the episode: bootstrap.
* ``("next", "done")``: ``[T, B, 1]`` bool, ``terminated | truncated``.

Episodes continue across rollouts: within an episode ``("next", "observation")[t]`` equals
``observation[t + 1]`` (and the last step of one rollout chains into the first of the next).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat.envs.base import Episode, VectorEnvLike
from rlplat.transforms.base import TransformLike


@runtime_checkable
class Policy(Protocol):
    """What a collector (and evaluation) needs from an agent: a loss's ``policy``.

    Optionally also ``act_function(deterministic)``, for acting over a rollout without
    recomputing what depends on the parameters alone at every step: see :func:`act_function`.
    """

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Choose actions for a batch of observations, without gradients.

        Called under ``torch.inference_mode``. A stochastic policy counts the frames it
        acted on (exploration schedules); ``deterministic=True`` (evaluation) neither
        explores nor counts.

        Args:
            observation: ``[N, *obs_shape]`` (an :data:`rlplat.envs.base.Observation`: a
                tensor in the space's dtype, or a TensorDict of a ``Dict`` space's entries),
                on the policy's device.
            deterministic: Take the mode of the action distribution instead of sampling.

        Returns:
            ``(action, log_prob)``: action ``[N, action_dim]`` float32 in the normalised
            space ``[-1, 1]`` (Box) or ``[N]`` int64 (Discrete); log-probability ``[N]``
            float32 of that action (zeros for a policy without one, e.g. DQN's).
        """
        ...


ActFunction = Callable[[Tensor], tuple[Tensor, Tensor]]
"""``observation [N, *obs_shape] -> (action, log_prob)``, as :meth:`Policy.act` with a fixed
``deterministic``."""


def act_function(policy: Policy, deterministic: bool = False) -> ActFunction:
    """How to act for a stretch of steps over which the policy's parameters do not change:
    one rollout of a collector, one evaluation.

    A policy may provide an optional method ``act_function(deterministic) -> ActFunction``:
    a function that returns what ``act(observation, deterministic)`` would, bit for bit and
    drawing the same random numbers, with what derives from the parameters alone (e.g. a
    Gaussian's standard deviation, transposed weights) computed once, when it is taken. It is
    valid until the next parameter change, so a collector takes it at the start of each
    rollout and never keeps it across the trainer's updates. Called under
    ``torch.inference_mode``, as ``act`` is.

    Args:
        policy: The acting policy.
        deterministic: As :meth:`Policy.act`'s argument.

    Returns:
        The policy's ``act_function(deterministic)`` if it has one, else ``act`` with
        ``deterministic`` bound.
    """
    own = getattr(policy, "act_function", None)
    if own is not None:
        return cast(ActFunction, own(deterministic))
    if not deterministic:
        return policy.act
    return functools.partial(policy.act, deterministic=True)


@runtime_checkable
class RecurrentPolicy(Policy, Protocol):
    """A policy with memory: it acts from a state per env and returns the next one.

    Attributes:
        state_size: S, the width of the state ``[N, S]`` float32.
    """

    state_size: int

    def initial_state(self, batch: int) -> Tensor:
        """``[batch, S]`` float32 on the policy's device: the state at an episode's first step."""
        ...

    def act_recurrent(
        self, observation: Tensor, state: Tensor, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """As :meth:`Policy.act`, from ``[N, S]`` states: ``(action, log_prob, next state [N, S])``."""
        ...


class Acting:
    """A policy acting in B envs over a stretch of steps: a collector's rollouts, an
    evaluation, a recorded video. Carries a :class:`RecurrentPolicy`'s state from step to
    step, zeroed for the envs whose episode ended (:meth:`episodes_ended`); for any other
    policy, ``state`` is None and acting is :func:`act_function`'s.

    Args:
        policy: The acting policy.
        num_envs: B.
        deterministic: As :meth:`Policy.act`'s argument.

    Attributes:
        state: ``[B, S]``, the state the next action is taken from, or None.
    """

    def __init__(self, policy: Policy, num_envs: int, deterministic: bool = False) -> None:
        self.policy, self.deterministic = policy, deterministic
        self.recurrent: RecurrentPolicy | None = policy if isinstance(policy, RecurrentPolicy) else None
        self.state: Tensor | None = None if self.recurrent is None else self.recurrent.initial_state(num_envs)

    def act_function(self) -> ActFunction:
        """``observation [B, *obs] -> (action, log_prob)``, advancing ``state``; valid while
        the policy's parameters do not change (see :func:`act_function`)."""
        recurrent = self.recurrent
        if recurrent is None:
            return act_function(self.policy, self.deterministic)

        def act(observation: Tensor) -> tuple[Tensor, Tensor]:
            action, log_prob, self.state = recurrent.act_recurrent(observation, self.state, self.deterministic)  # type: ignore[arg-type]
            return action, log_prob

        return act

    def episodes_ended(self, done: Tensor) -> None:
        """Zero the state of the envs whose episode ended at the last step (``[B]`` or ``[B,
        1]`` bool, on any device): their next step is an episode's first."""
        if self.state is not None:
            ended = done.reshape(-1, 1).to(self.state.device)
            self.state = self.state.masked_fill(ended, 0.0)


class EnvMaker(Protocol):
    """``(num_envs, vectorization) -> VectorEnvLike``: the configured training env, supplied to
    a collector by rlplat: B = ``num_envs`` copies of the ``env`` entry with the configured
    transforms (which it updates), ``vectorization`` ``"sync"`` (one process) or ``"async"``
    (a subprocess per env). A collector calls it once per env set it runs. rlplat's pickles
    (with cloudpickle), so that a collector may call it in worker processes too.

    Attributes:
        transforms: The transforms its envs apply, in order: the instances the run evaluates
            and checkpoints with. A collector whose envs live in other processes (where
            copies of them update their statistics) loads the copies' state back into these
            (:meth:`TransformLike.load_state_dict`).
    """

    transforms: Sequence[TransformLike]

    def __call__(self, num_envs: int, vectorization: str) -> VectorEnvLike:
        """B = ``num_envs`` training envs, vectorised by ``vectorization``."""
        ...


@runtime_checkable
class ReportingCollector(Protocol):
    """A collector with metrics of its own, logged by the trainer at each log step (e.g. the
    asynchronous collector's ``collector/policy_lag``)."""

    def pop_metrics(self) -> dict[str, float]:
        """Metric name -> value (means over the rollouts yielded since the last call); then
        forgets them. Names are ``collector/<metric>``."""
        ...


class CollectorFactory(Protocol):
    """A collector entry: rlplat's arguments by keyword, plus the YAML keys.

    rlplat supplies, by keyword (reserved: not settable from YAML):

    * ``make_env``: an :data:`EnvMaker` for the training envs;
    * ``policy``: the :class:`Policy` to act with (the loss's ``policy``);
    * ``total_frames``: frames (env steps summed over envs) after which iteration stops;
    * ``device``: ``torch.device`` of the policy and of the yielded rollouts;
    * ``seed``: seed of the envs' first reset (env i gets ``seed + i``).

    The ``collector`` YAML node supplies the rest (e.g. ``num_envs``, ``steps_per_env``,
    ``vectorization``), checked against the signature.

    Two optional class attributes of the entry tell rlplat how it acts:

    * ``acts_in_workers`` (default False): the policy acts in other processes, on copies that
      load the learner's ``state_dict()`` (it must be a ``torch.nn.Module``): rlplat then passes
      the loss's own policy (no accelerated acting path, whose arrays stay in this process).
    * ``asynchronous`` (default False): rollouts come from weights older than the learner's
      (each step's ``policy_version`` (:mod:`rlplat.keys`) says which): an on-policy loss refuses
      such a collector unless its class sets ``corrects_policy_lag = True`` (V-trace).

    Raises:
        ConfigError: for a bad YAML value, naming ``collector.<key>``.
    """

    def __call__(
        self,
        *,
        make_env: EnvMaker,
        policy: Policy,
        total_frames: int,
        device: torch.device,
        seed: int,
        **kwargs: Any,
    ) -> Collector:
        """Build the collector; it may create its envs here."""
        ...


@runtime_checkable
class Collector(Protocol):
    """A built collector, as the trainer drives it.

    Attributes:
        frames: Frames collected so far (env steps summed over envs); advanced by
            ``frames_per_batch`` per yielded rollout.
        rollout_shape: ``(T, B)``, the batch size of every rollout; fixed at construction
            (rlplat sizes the buffer from it).
        frames_per_batch: Frames per rollout, ``T * B``.
    """

    frames: int
    rollout_shape: tuple[int, int]
    frames_per_batch: int

    def __iter__(self) -> Iterator[TensorDict]:
        """Yield rollouts ``[T, B]`` (keys above) on ``device`` until ``frames >= total_frames``.

        Each yielded rollout is the caller's: a later rollout does not overwrite it (the
        loss's ``preprocess`` adds keys to it in place).
        """
        ...

    def pop_finished(self) -> list[Episode]:
        """The training episodes finished since the last call (raw undiscounted return,
        length in env steps); then forgets them."""
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """What a resume needs (at least ``frames``; rlplat's sync collector adds the
        observation to act on next and the envs' states), as plain data and tensors."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into a collector built from the same config; one that
        cannot restore its envs resets them with fresh seeds instead."""
        ...

    def close(self) -> None:
        """Close the envs (and any worker processes)."""
        ...
