"""KL attraction to a reference policy loaded from another run: ``loss.addons.kl_to_reference``."""

from __future__ import annotations

from typing import Any, cast

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.losses.addons.base import PolicyLoader
from rlplat.networks.actor_critic import ActorCritic


class KLToReference:
    """``mean_s KL(pi(.|s) || pi_ref(.|s))``: how far the policy has moved from a reference
    policy, over the minibatch's states, in nats.

    The term of KL-regularised RL towards a fixed reference or prior policy (Ziegler et al.
    2019, "Fine-Tuning Language Models from Human Preferences", eq. 2; Galashov et al. 2019,
    "Information asymmetry in KL-regularized RL"): with weight ``coef`` = c the loss trains
    the policy on ``E[return] - c * E_s[KL(pi || pi_ref)]``.

    Direction: KL(pi || pi_ref), the current policy first, as those papers have it, because
    (1) it is the penalty whose optimal policy is ``pi_ref * exp(Q / c)`` normalised, the
    reference reweighted by the return; (2) it is an expectation under pi, the policy that
    collected the states; (3) it is mode-seeking: it pushes pi off actions the reference
    finds unlikely (the reverse direction, KL(pi_ref || pi), would instead make pi cover every
    action the reference takes). Per state it is exact, not sampled: categorical and diagonal
    Gaussian heads in closed form (:mod:`rlplat.functional.distributions`), a
    MultiDiscrete/MultiBinary head as the sum over its independent dims. It is 0 where pi
    equals pi_ref, and its gradient reaches the policy's torso and head (the reference is
    frozen).

    The reference is the policy of the run ``source`` names, rebuilt from that run's
    checkpoint (its own config and weights) by rlplat's ``load_policy``; it must read this
    run's observations (the same spaces; observation transforms that map them alike, so no
    running ``obs_norm`` statistics) and be a feed-forward actor-critic policy. It is loaded
    once, when the run is built, and again when a run resumes: it is not in the checkpoint,
    so its source must still exist then.

    Args:
        observation_space: The env's single observation space (supplied by rlplat).
        action_space: The env's single action space (supplied by rlplat).
        load_policy: Loads the reference (supplied by rlplat, :class:`PolicyLoader`).
        source: The reference run: an MLflow run id (in this run's ``tracking.uri``), a run
            directory (its ``final.pt``, else its newest checkpoint) or a checkpoint file.

    Raises:
        ConfigError: naming ``loss.addons.kl_to_reference.source`` for a source that does not
            exist or whose policy does not fit this run.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        *,
        load_policy: PolicyLoader,
        source: str,
    ) -> None:
        self.source = source
        self.reference = load_policy(source, "source")

    def __call__(self, policy: ActorCritic, batch: TensorDict) -> Tensor:
        """``[N]`` minibatch -> 0-dim mean KL(pi || pi_ref) over its states, in nats, with
        gradients into ``policy``."""
        observation = batch[keys.OBSERVATION]
        with torch.no_grad():
            reference_features = self.reference.actor_torso(observation)
        features = policy.actor_torso(observation)
        head = cast(Any, policy.head)  # each head kind takes a reference head of its own kind
        kl = head.kl_divergence(features, self.reference.head, reference_features)  # [N]
        return cast(Tensor, kl.mean())
