"""Conformance check of a collector entry (:class:`rlplat.collectors.base.CollectorFactory`)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import torch
from torch import Tensor, nn

from rlplat import keys
from rlplat.collectors.base import Collector
from rlplat.envs.base import Episode, space_shape
from rlplat.envs.vector import VectorEnv
from rlplat.testing._common import Entry, Subject, savable, subject
from rlplat.testing.rollouts import check_chained, check_rollout

DEFAULT_ENVS: tuple[tuple[Entry, Mapping[str, Any]], ...] = (
    ("gym", {"id": "CartPole-v1", "max_episode_steps": 10}),
    ("gym", {"id": "Pendulum-v1", "max_episode_steps": 10}),
)
"""One Discrete and one Box env, with episodes short enough to end inside a rollout."""


class ObservationPolicy(nn.Module):
    """A :class:`rlplat.collectors.base.Policy` whose action and log-probability are fixed
    functions of the observation, so a rollout can be checked step by step against them. A
    ``torch.nn.Module`` without parameters, so that collectors whose workers load the
    learner's ``state_dict`` take it too."""

    def __init__(self, action_space: gymnasium.Space) -> None:
        super().__init__()
        self.action_space = action_space

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """``[N, *obs_shape]`` -> action (``[N, A]`` in [-1, 1] or ``[N]`` int64), ``[N]`` log-prob."""
        first = observation.flatten(1)[:, 0]  # [N]; elementwise maths only, so exactly reproducible
        if isinstance(self.action_space, gymnasium.spaces.Discrete):
            action = (first * 1000).floor().long().remainder(int(self.action_space.n))
        else:
            phase = torch.arange(int(space_shape(self.action_space)[0]), dtype=first.dtype, device=first.device)
            action = torch.sin(first.unsqueeze(-1) * 7.0 + phase)
        return action, -first.abs()


class CountingPolicy(ObservationPolicy):
    """A :class:`rlplat.collectors.base.RecurrentPolicy` whose state counts the steps since the
    episode began: a rollout's ``recurrent_state`` shows whether the collector stored the
    state each step acted from and reset it exactly where an episode ended."""

    state_size = 2

    def initial_state(self, batch: int) -> Tensor:
        """``[batch, 2]`` zeros."""
        return torch.zeros(batch, self.state_size)

    def act_recurrent(
        self, observation: Tensor, state: Tensor, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """As :meth:`ObservationPolicy.act`, and ``state + 1``."""
        action, log_prob = self.act(observation, deterministic)
        return action, log_prob, state + 1


class ArgmaxPolicy(nn.Module):
    """A Discrete :class:`rlplat.collectors.base.Policy` that is a ``torch.nn.Module``, as
    collectors whose workers load the learner's ``state_dict`` need: the argmax of a linear map
    of the observation (deterministic, so that two collectors over the same envs and seeds
    collect the same rollouts; its ``linear.bias`` chooses an action outright), with an int64
    buffer ``frames`` counting the frames it acted on (not in evaluation), as exploration
    schedules count theirs.

    Args:
        observation_dim: Width of the (flat, float) observations.
        num_actions: Actions of the Discrete space.
    """

    frames: Tensor

    def __init__(self, observation_dim: int, num_actions: int) -> None:
        super().__init__()
        self.linear = nn.Linear(observation_dim, num_actions)
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """``[N, observation_dim]`` -> action ``[N]`` int64, log-prob ``[N]`` zeros."""
        if not deterministic:
            self.frames += observation.shape[0]
        return self.linear(observation).argmax(-1), torch.zeros(observation.shape[0])


def check_collector(
    entry: Entry,
    kwargs: Mapping[str, Any] | None = None,
    *,
    envs: Sequence[tuple[Entry, Mapping[str, Any]]] = DEFAULT_ENVS,
    seed: int = 0,
) -> None:
    """Check a collector entry the way the trainer drives it, on each of ``envs``.

    Builds the collector through the registry with ``kwargs`` (the ``collector`` YAML
    node's keys) and what rlplat supplies: ``make_env`` (rlplat's
    :class:`rlplat.envs.vector.VectorEnv` over the env entry, no transforms), a policy
    whose actions are a fixed function of the observation, ``total_frames``, ``device``
    (CPU) and ``seed``. Then checks:

    * it implements :class:`rlplat.collectors.base.Collector`, ``frames`` starts at 0,
      ``rollout_shape`` is ``(T, B)`` with B the ``num_envs`` it asked ``make_env`` for,
      and ``frames_per_batch == T * B``;
    * two rollouts: each a TensorDict of batch size ``rollout_shape``, with every key,
      shape and dtype of
      :mod:`rlplat.keys`; ``action`` and ``action_log_prob`` are what the policy returned
      for that step's ``observation``; within an episode ``("next", "observation")[t] ==
      observation[t + 1]``, also from the last step of a rollout into the next one;
      ``frames`` advances by ``frames_per_batch`` per rollout; the second rollout leaves
      the first one unchanged;
    * ``pop_finished()`` returns one :class:`rlplat.envs.base.Episode` per ended episode
      (``("next", "done")``), then nothing;
    * ``state_dict()`` is a mapping ``torch.save`` can write; with ``total_frames=1``
      iteration stops after one rollout; ``close()`` runs;
    * with a recurrent policy (:class:`rlplat.collectors.base.RecurrentPolicy`), rollouts hold
      ``recurrent_state`` ``[T, B, S]``, the state each step acted from: zeros at an episode's
      first step, else the state the policy returned at the step before, across rollouts too.

    A collector whose entry sets ``acts_in_workers`` (see
    :class:`rlplat.collectors.base.CollectorFactory`) makes its envs in its workers, with
    pickled copies of ``make_env`` and the policy (a ``torch.nn.Module`` here): give it one
    worker (``num_workers: 1``), so that each rollout goes on with the episodes of the last.

    Args:
        entry: Registered collector name, or the constructor itself.
        kwargs: The YAML keyword arguments (a ``name`` key is ignored); keep rollouts small
            (e.g. ``{"num_envs": 2, "steps_per_env": 16}``).
        envs: ``(env entry, env kwargs)`` pairs to collect from; by default a short
            CartPole (Discrete) and a short Pendulum (Box).
        seed: The seed rlplat supplies.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the constructor's signature, as in a run.
    """
    collector_entry = subject("collector", entry)
    for env, env_kwargs in envs:
        _check_on(collector_entry, kwargs, subject("env", env), env_kwargs, seed)


def _build(
    collector_entry: Subject,
    kwargs: Any,
    env_entry: Subject,
    env_kwargs: Any,
    seed: int,
    total_frames: int,
    recurrent: bool = False,
) -> tuple[Any, list[int], tuple[gymnasium.Space, gymnasium.Space]]:
    """The collector over the env entry (acting with :class:`CountingPolicy` when
    ``recurrent``), the ``num_envs`` it asked ``make_env`` for, and the env's
    ``(observation_space, action_space)``."""
    probe = env_entry.build(env_kwargs)
    spaces = probe.observation_space, probe.action_space
    probe.close()
    action_space = spaces[1]
    make_env = _KitEnvs(env_entry, env_kwargs)
    requested = make_env.requested
    with collector_entry.running("the constructor"):
        collector = collector_entry.build(
            kwargs,
            make_env=make_env,
            policy=(CountingPolicy if recurrent else ObservationPolicy)(action_space),
            total_frames=total_frames,
            device=torch.device("cpu"),
            seed=seed,
        )
    return collector, requested, spaces


class _KitEnvs:
    """The kit's :class:`rlplat.collectors.base.EnvMaker`: :class:`rlplat.envs.vector.VectorEnv`
    over the env entry, no transforms; records the ``num_envs`` asked of it in this process
    (a collector that makes its envs in worker processes asks there)."""

    transforms: tuple = ()

    def __init__(self, env_entry: Subject, env_kwargs: Any) -> None:
        self.env_entry, self.env_kwargs = env_entry, env_kwargs
        self.requested: list[int] = []

    def __call__(self, num_envs: int, vectorization: str) -> VectorEnv:
        self.requested.append(num_envs)
        return VectorEnv(functools.partial(self.env_entry.build, self.env_kwargs), num_envs, (), True, vectorization)


def _check_on(collector_entry: Subject, kwargs: Any, env_entry: Subject, env_kwargs: Any, seed: int) -> None:
    collector, requested, spaces = _build(collector_entry, kwargs, env_entry, env_kwargs, seed, total_frames=10**12)
    try:
        collector_entry.conforms(collector, Collector)
        collector_entry.expect(collector.frames == 0, f"frames={collector.frames!r} before collecting; must be 0")
        in_workers = getattr(type(collector), "acts_in_workers", False)  # its envs are made in its workers
        collector_entry.expect(requested or in_workers, "it never called make_env for its envs")
        shape = _rollout_shape(collector_entry, collector, num_envs=requested[-1] if requested else None)
        spec = (shape, space_shape(spaces[0]), spaces[1])
        iterator = iter(collector)
        first = _next_rollout(collector_entry, collector, iterator, spec, 1)
        kept = first.clone()
        _check_episodes(collector_entry, collector.pop_finished(), first, shape[1])
        second = _next_rollout(collector_entry, collector, iterator, spec, 2)
        collector_entry.expect(
            (first == kept).all(), "the second rollout overwrote the first; each yielded rollout is the caller's"
        )
        not_done = ~first[keys.NEXT_DONE][-1].squeeze(-1)
        collector_entry.expect(
            torch.equal(first[keys.NEXT_OBSERVATION][-1][not_done], second[keys.OBSERVATION][0][not_done]),
            "episodes do not continue across rollouts: the last ('next', 'observation') of one rollout is not "
            "the first 'observation' of the next",
        )
        collector.pop_finished()
        savable(collector_entry, collector.state_dict(), "state_dict()")
    finally:
        with collector_entry.running("close()"):
            collector.close()
    _check_stops(collector_entry, kwargs, env_entry, env_kwargs, seed)
    _check_recurrent(collector_entry, kwargs, env_entry, env_kwargs, seed)


def _check_recurrent(collector_entry: Subject, kwargs: Any, env_entry: Subject, env_kwargs: Any, seed: int) -> None:
    """Two rollouts with :class:`CountingPolicy`: each step's stored state is the count of
    steps since its episode began."""
    collector, _, _ = _build(collector_entry, kwargs, env_entry, env_kwargs, seed, total_frames=10**12, recurrent=True)
    try:
        with collector_entry.running("collecting two rollouts with a recurrent policy"):
            rollouts = list(itertools.islice(collector, 2))
    finally:
        collector.close()
    state = [r.get(keys.RECURRENT_STATE, None) for r in rollouts]
    collector_entry.expect(
        all(isinstance(s, Tensor) and s.shape == (*r.batch_size, 2) for s, r in zip(state, rollouts)),
        "with a recurrent policy (state_size 2) the rollout has no 'recurrent_state' [T, B, 2]: the state each "
        "step acted from",
    )
    stored = torch.cat(state)[..., 0]  # [2T, B]
    done = torch.cat([r[keys.NEXT_DONE] for r in rollouts])[..., 0]
    expected = torch.zeros_like(stored)
    for t in range(1, stored.shape[0]):
        expected[t] = torch.where(done[t - 1], 0.0, expected[t - 1] + 1)
    collector_entry.expect(
        torch.equal(stored, expected),
        "'recurrent_state' is not the state each step acted from: it must start at the policy's initial state, "
        "carry the state act_recurrent returned (across rollouts too) and be reset to the initial state after "
        "every step with ('next', 'done')",
    )


def _rollout_shape(collector_entry: Subject, collector: Any, num_envs: int | None) -> tuple[int, int]:
    """``rollout_shape`` checked: ``(T, B)`` ints, B the envs it made (when it made them in
    this process, ``num_envs``), ``T * B == frames_per_batch``."""
    shape, per_batch = collector.rollout_shape, collector.frames_per_batch
    collector_entry.expect(
        isinstance(shape, Sequence) and len(shape) == 2 and all(isinstance(n, int) and n > 0 for n in shape),
        f"rollout_shape={shape!r}; must be (T, B), two positive ints",
    )
    shape = (shape[0], shape[1])
    collector_entry.expect(
        num_envs is None or shape[1] == num_envs,
        f"rollout_shape={shape}, but it asked make_env for {num_envs} envs (B)",
    )
    collector_entry.expect(
        per_batch == shape[0] * shape[1], f"frames_per_batch={per_batch!r}; must be T * B for rollout_shape={shape}"
    )
    return shape


def _next_rollout(collector_entry: Subject, collector: Any, iterator: Any, spec: tuple, index: int) -> Any:
    """The next rollout, checked: keys, shapes, the policy's actions, chaining, frames.

    ``spec`` is ``((T, B), obs_shape, action_space)``."""
    with collector_entry.running(f"collecting rollout {index}"):
        rollout = next(iterator, None)
    if rollout is None:
        collector_entry.fail(f"iteration stopped after {index - 1} rollouts, before total_frames")
    shape, obs_shape, action_space = spec
    check_rollout(collector_entry, rollout, shape, obs_shape, action_space)
    policy = ObservationPolicy(action_space)
    action, log_prob = policy.act(rollout[keys.OBSERVATION].flatten(0, 1))
    collector_entry.expect(
        torch.equal(rollout[keys.ACTION].flatten(0, 1), action)
        and torch.equal(rollout[keys.ACTION_LOG_PROB].flatten(0, 1), log_prob),
        "'action' or 'action_log_prob' at step t is not what the policy returned for 'observation' at step t",
    )
    check_chained(collector_entry, rollout)
    expected = index * collector.frames_per_batch
    collector_entry.expect(
        collector.frames == expected, f"frames={collector.frames} after {index} rollouts; expected {expected}"
    )
    return rollout


def _check_episodes(collector_entry: Subject, episodes: Any, rollout: Any, num_envs: int) -> None:
    ended = int(rollout[keys.NEXT_DONE].sum())
    collector_entry.expect(
        isinstance(episodes, list) and len(episodes) == ended,
        f"pop_finished() returned {episodes!r} after a rollout in which {ended} episodes ended; expected "
        f"{ended} Episode(env, return_, length)",
    )
    for episode in episodes:
        collector_entry.expect(
            isinstance(episode, Episode) and 0 <= episode.env < num_envs and episode.length >= 1,
            f"pop_finished() returned {episode!r}; expected Episode(env in [0, {num_envs}), return_, length >= 1)",
        )


def _check_stops(collector_entry: Subject, kwargs: Any, env_entry: Subject, env_kwargs: Any, seed: int) -> None:
    collector, _, _ = _build(collector_entry, kwargs, env_entry, env_kwargs, seed, total_frames=1)
    try:
        with collector_entry.running("iterating with total_frames=1"):
            count = sum(1 for _ in itertools.islice(collector, 3))
        collector_entry.expect(count == 1, f"with total_frames=1 it yielded {count} rollouts; expected 1")
    finally:
        collector.close()
