"""Pure tensor math with no state: value estimators and distribution formulas."""

from rlplat.functional.advantages import generalized_advantage_estimate, n_step_return, td_lambda_return, vtrace
from rlplat.functional.distributions import (
    HALF_LOG_2PI,
    categorical_entropy,
    categorical_kl,
    categorical_log_prob,
    kl_estimate,
    normal_entropy,
    normal_kl,
    normal_log_prob,
    normal_mode_log_prob,
    normal_mode_log_prob_entropy,
    standard_normal_log_prob,
)

__all__ = [
    "HALF_LOG_2PI",
    "categorical_entropy",
    "categorical_kl",
    "categorical_log_prob",
    "generalized_advantage_estimate",
    "kl_estimate",
    "normal_entropy",
    "normal_kl",
    "normal_log_prob",
    "normal_mode_log_prob",
    "normal_mode_log_prob_entropy",
    "n_step_return",
    "standard_normal_log_prob",
    "td_lambda_return",
    "vtrace",
]
