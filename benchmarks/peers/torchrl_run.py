"""TorchRL side of ``make bench-peers`` (runs in the peers' virtualenv).

    python benchmarks/peers/torchrl_run.py ppo_overhead --seed 0
    python benchmarks/peers/torchrl_run.py sac_overhead --seed 0

Built from TorchRL's own components as its PPO and SAC tutorials assemble them: ``GymEnv``
(gymnasium's vector env inside), ``Collector``, ``ProbabilisticActor`` with a
Gaussian (PPO) or ``TanhNormal`` (SAC) head, ``ValueOperator``, ``GAE``, ``ClipPPOLoss`` or ``SACLoss``
with ``SoftUpdate``, and a ``ReplayBuffer`` over ``LazyTensorStorage``. Settings are those
of :mod:`settings`; each reports frames per second of its training loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from settings import PPO_OVERHEAD, SAC_OVERHEAD, THREADS, report_rate


def _mlp(n_out: int, hidden: list[int], activation: type[nn.Module]) -> nn.Module:
    from torchrl.modules import MLP

    return MLP(out_features=n_out, num_cells=hidden, activation_class=activation)


def ppo_overhead(seed: int) -> None:
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
    from torchrl.envs import GymEnv
    from torchrl.modules import IndependentNormal, ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    s = PPO_OVERHEAD
    env = GymEnv(s["env"], num_envs=s["num_envs"])
    env.set_seed(seed)
    action_dim = env.action_spec.shape[-1]
    actor_net = nn.Sequential(_mlp(2 * action_dim, s["hidden"], nn.Tanh), NormalParamExtractor())
    policy = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        spec=env.action_spec,
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,  # a Gaussian, clipped by the env, as the other libraries act
        return_log_prob=True,
    )
    value = ValueOperator(_mlp(1, s["hidden"], nn.Tanh), in_keys=["observation"])
    policy(env.reset())  # initialise the lazy layers
    value(env.reset())
    frames_per_batch = s["num_envs"] * s["steps_per_env"]
    collector = Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=s["frames"])
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=s["minibatch_size"],
    )
    advantage = GAE(gamma=s["gamma"], lmbda=s["gae_lambda"], value_network=value, average_gae=True)
    loss = ClipPPOLoss(policy, value, clip_epsilon=s["clip_epsilon"], entropy_coeff=0.0)
    optimizer = torch.optim.Adam(loss.parameters(), lr=s["lr"], eps=1e-5)

    start, frames = time.perf_counter(), 0
    for data in collector:
        frames += data.numel()
        with torch.no_grad():
            advantage(data)
        buffer.extend(data.reshape(-1))
        for _ in range(s["epochs"]):
            for _ in range(frames_per_batch // s["minibatch_size"]):
                terms = loss(buffer.sample())
                total = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), s["max_grad_norm"])
                optimizer.step()
                optimizer.zero_grad()
        collector.update_policy_weights_()
    report_rate(frames, start)
    collector.shutdown()


def sac_overhead(seed: int) -> None:
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.envs import GymEnv
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    s = SAC_OVERHEAD
    env = GymEnv(s["env"])
    env.set_seed(seed)
    action_dim = env.action_spec.shape[-1]
    actor_net = nn.Sequential(_mlp(2 * action_dim, s["hidden"], nn.ReLU), NormalParamExtractor())
    policy = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        spec=env.action_spec,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
        return_log_prob=False,
    )
    qvalue = ValueOperator(_mlp(1, s["hidden"], nn.ReLU), in_keys=["observation", "action"])
    reset = env.reset()
    policy(reset)
    qvalue(policy(reset))
    collector = Collector(
        env, policy, frames_per_batch=1, total_frames=s["frames"], init_random_frames=s["learning_starts"]
    )
    buffer = ReplayBuffer(storage=LazyTensorStorage(s["buffer_size"]), batch_size=s["batch_size"])
    loss = SACLoss(policy, qvalue, num_qvalue_nets=2, loss_function="l2", delay_actor=False, delay_qvalue=True)
    loss.make_value_estimator(gamma=s["gamma"])
    target_update = SoftUpdate(loss, tau=s["tau"])
    optimizer = torch.optim.Adam(loss.parameters(), lr=s["lr"])

    start, frames = time.perf_counter(), 0
    for data in collector:
        frames += data.numel()
        buffer.extend(data.reshape(-1))
        if frames >= s["learning_starts"]:
            terms = loss(buffer.sample())
            total = terms["loss_actor"] + terms["loss_qvalue"] + terms["loss_alpha"]
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
            target_update.step()
            collector.update_policy_weights_()
    report_rate(frames, start)
    collector.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=["ppo_overhead", "sac_overhead"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    torch.manual_seed(args.seed)
    {"ppo_overhead": ppo_overhead, "sac_overhead": sac_overhead}[args.task](args.seed)


if __name__ == "__main__":
    main()
