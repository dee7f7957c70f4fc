"""IMPALA's actor-critic loss with V-trace off-policy correction (Espeholt et al. 2018,
"IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures",
sec. 4)."""

from __future__ import annotations

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.functional import vtrace
from rlplat.losses.actor_critic import ActorCriticLoss, check_unit_interval, value_diagnostics
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.registry import ConfigError, check_non_negative, check_positive


class ImpalaLoss(ActorCriticLoss):
    """IMPALA: ``L = -mean(rho_s A_s log pi(a_s|x_s)) + c_v mean((V(x_s) - v_s)^2) / 2 - c_e H``.

    The rollout's actions came from a behaviour policy mu (its ``action_log_prob``), which may
    be some updates older than the learner's pi. :meth:`preprocess` evaluates pi and V with the
    current parameters over the whole ``[T, B]`` rollout, once, and corrects for the lag with
    V-trace (:func:`rlplat.functional.vtrace`): the targets v_s (``value_target``) and the
    advantages ``rho_s (r_s + gamma v_{s+1} - V(x_s))`` (``advantage``, the importance weight
    included). With mu = pi and lambda = 1 this is A2C with GAE(gamma, 1) targets. Defaults
    are the paper's (appendix D.1 and its code): rho_bar = c_bar = 1, ``entropy_coef`` 0.01,
    ``value_coef`` 0.5 on half the squared error. No recurrent core (``network.core``).

    Args:
        observation_space: The env's single observation space (supplied by rlplat).
        action_space: The env's single action space (supplied by rlplat).
        network: Factory of the configured torso (supplied by rlplat).
        gamma: Discount factor in [0, 1].
        clip_rho_threshold: rho_bar > 0, truncation of the importance weights in the v-trace targets.
        clip_pg_rho_threshold: Truncation (> 0) of the importance weights of the policy gradient.
        clip_c_threshold: c_bar > 0, truncation of the trace coefficients.
        vtrace_lambda: lambda in [0, 1] discounting the traces (1: the paper's v-trace).
        normalize_advantage: Normalise the advantages per minibatch (not in the paper).
        entropy_coef: Weight c_e of the entropy bonus.
        value_coef: Weight c_v of the value loss (half the mean squared error).
        features: Width of the torso output the heads read.
        share_torso: One torso for actor and critic instead of two.
        log_std_init: Initial log std of the Gaussian policy (Box actions).

    Attributes:
        corrects_policy_lag: True: learns correctly from rollouts of an older policy, so an
            asynchronous collector may feed it.

    Raises:
        ConfigError: naming ``loss.<key>``: gamma or vtrace_lambda outside [0, 1], a
            threshold <= 0, a negative coefficient, or a recurrent ``network.core``.
    """

    corrects_policy_lag = True
    recurrent_cores = False

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        clip_rho_threshold: float = 1.0,
        clip_pg_rho_threshold: float = 1.0,
        clip_c_threshold: float = 1.0,
        vtrace_lambda: float = 1.0,
        normalize_advantage: bool = False,
        entropy_coef: float = 0.01,
        value_coef: float = 0.5,
        features: int = 64,
        share_torso: bool = False,
        log_std_init: float = 0.0,
    ) -> None:
        check_unit_interval(vtrace_lambda=vtrace_lambda)
        thresholds = {"clip_rho_threshold": clip_rho_threshold, "clip_pg_rho_threshold": clip_pg_rho_threshold}
        for name, value in {**thresholds, "clip_c_threshold": clip_c_threshold}.items():
            check_positive(f"loss.{name}", value, note="1.0 is the paper's", allow_inf=True)  # inf: no clipping
        for name, value in {"entropy_coef": entropy_coef, "value_coef": value_coef}.items():
            check_non_negative(f"loss.{name}", value)
        super().__init__(
            observation_space,
            action_space,
            network,
            gamma=gamma,
            gae_lambda=1.0,  # unused: v-trace replaces GAE
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
            normalize_advantage=normalize_advantage,
            entropy_coef=entropy_coef,
            value_coef=value_coef,
        )
        if self.recurrent:
            raise ConfigError("network.core: loss 'impala' takes no recurrent core; set network.core=null")
        self.clip_rho_threshold = clip_rho_threshold
        self.clip_pg_rho_threshold = clip_pg_rho_threshold
        self.clip_c_threshold = clip_c_threshold
        self.vtrace_lambda = vtrace_lambda

    @torch.no_grad()
    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add ``state_value`` V(x_t), ``value_target`` v_t and ``advantage`` (v-trace's,
        :func:`rlplat.functional.vtrace`), each ``[T, B, 1]`` float32, to a ``[T, B]`` rollout,
        from pi's log-probabilities and V under the current parameters and the rollout's
        ``action_log_prob`` (mu's); its diagnostics are logged beside the losses of its updates."""
        T, B = rollout.batch_size
        _, target_log_prob = self.rollout_log_prob(rollout)  # [T * B], in the rollout's order
        state_value, next_state_value = self.state_values(rollout)  # [T, B, 1] each
        behaviour_log_prob = rollout[keys.ACTION_LOG_PROB]  # [T, B]
        log_ratio = target_log_prob.view(T, B) - behaviour_log_prob
        value_target, advantage = vtrace(
            behaviour_log_prob,
            target_log_prob.view(T, B),
            rollout[keys.NEXT_REWARD],
            state_value,
            next_state_value,
            rollout[keys.NEXT_DONE],
            rollout[keys.NEXT_TERMINATED],
            self.gamma,
            clip_rho_threshold=self.clip_rho_threshold,
            clip_pg_rho_threshold=self.clip_pg_rho_threshold,
            clip_c_threshold=self.clip_c_threshold,
            lmbda=self.vtrace_lambda,
        )
        rollout[keys.STATE_VALUE] = state_value
        rollout[keys.ADVANTAGE] = advantage
        rollout[keys.VALUE_TARGET] = value_target
        self.rollout_diagnostics = {**value_diagnostics(state_value, value_target), **self.rho_diagnostics(log_ratio)}
        return rollout

    def rho_diagnostics(self, log_ratio: Tensor) -> dict[str, Tensor]:
        """``rho_mean``, the mean truncated importance weight ``min(rho_bar, pi / mu)``, and
        ``rho_clip_fraction``, the fraction of steps where ``pi / mu`` exceeds rho_bar by more
        than float32 rounding (1e-5 relative): 0-dim float32, from ``[T, B]`` log(pi / mu)."""
        ratio = log_ratio.exp()
        clipped = ratio > self.clip_rho_threshold * (1.0 + 1e-5)
        rho_mean = ratio.clamp(max=self.clip_rho_threshold).mean()
        return {"rho_mean": rho_mean, "rho_clip_fraction": clipped.to(ratio.dtype).mean()}

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` batch -> ``loss_objective`` (the policy gradient), ``loss_critic`` (the value
        loss), ``loss_entropy``; diagnostics ``entropy`` and the rollout's ``rho_mean``,
        ``rho_clip_fraction``, ``explained_variance``, ``value_mean``."""
        return self.policy_gradient_terms(batch, value_scale=0.5)
