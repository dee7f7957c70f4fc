"""Recurrent cores (LSTM, GRU) between a torso and the heads, and the actor-critic over them.

``network.core=lstm|gru`` puts a core after the configured torso (any network entry: MLP,
CNN, multi-input): ``observation -> torso -> core -> heads``. The core's state is one flat
float32 tensor per env, ``[N, state_size]``, so that collectors, buffers and checkpoints carry
it as any other key (``recurrent_state``); it is zero at an episode's first step.
"""

from __future__ import annotations

import gymnasium
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.base import CoreSpec, NetworkFactory

CORES: dict[str, type[nn.LSTM] | type[nn.GRU]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class RecurrentCore(nn.Module):
    """An LSTM or GRU over torso features, with its state as one flat tensor per env.

    The state is ``[N, state_size]`` float32: the hidden state of each layer (GRU), or the
    hidden and the cell state of each layer (LSTM), flattened. Weights orthogonal (gain 1),
    biases zero, as CleanRL's recurrent PPO.

    Args:
        input_size: Width of the features in.
        spec: Kind, width and layers.

    Attributes:
        state_size: ``num_layers * hidden_size`` (GRU) or twice that (LSTM).
        hidden_size: Width of the output.
    """

    def __init__(self, input_size: int, spec: CoreSpec) -> None:
        super().__init__()
        self.kind, self.hidden_size, self.num_layers = spec.kind, spec.hidden_size, spec.num_layers
        self.rnn = CORES[spec.kind](input_size, spec.hidden_size, spec.num_layers, batch_first=True)
        for name, parameter in self.rnn.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(parameter, 1.0)
            else:
                nn.init.zeros_(parameter)
        self.parts = 2 if spec.kind == "lstm" else 1
        self.state_size = self.parts * spec.num_layers * spec.hidden_size

    def forward(self, features: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """Run the core over sequences that stay within one episode.

        Args:
            features: ``[N, L, input_size]`` float32.
            state: ``[N, state_size]`` float32, the state before the first step.

        Returns:
            ``(output [N, L, hidden_size], state [N, state_size] after the last step)``.
        """
        n = features.shape[0]
        layered = state.view(n, self.parts, self.num_layers, self.hidden_size).permute(1, 2, 0, 3)
        if self.parts == 2:
            output, (h, c) = self.rnn(features, (layered[0].contiguous(), layered[1].contiguous()))
            final = torch.stack((h, c))
        else:
            output, h = self.rnn(features, layered[0].contiguous())
            final = h.unsqueeze(0)
        return output, final.permute(2, 0, 1, 3).reshape(n, self.state_size)

    def step(self, features: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step: ``[N, input_size]`` features, ``[N, state_size]`` state -> ``[N,
        hidden_size]`` output and the next state."""
        output, state = self(features.unsqueeze(1), state)
        return output.squeeze(1), state


class RecurrentActorCritic(ActorCritic):
    """:class:`ActorCritic` with a recurrent core after each torso: ``observation -> torso ->
    core -> heads``. With ``share_torso`` one core serves both heads; else the critic has a
    core of its own. The state of the policy is both cores' states side by side,
    ``[N, state_size]``, and both advance at every step, so that a collector stores the state
    each of them starts a sequence from.

    Implements :class:`rlplat.collectors.base.RecurrentPolicy` (``act`` alone acts from the
    initial state: an episode's first step).

    Args:
        observation_space: The env's single observation space.
        action_space: As :class:`ActorCritic`.
        network: Factory of the torso.
        core: The core's settings (``network.core``, ``core_size``, ``core_layers``).
        features: Width of each torso's output, the core's input.
        share_torso: One torso and one core for both heads.
        log_std_init: Initial log std of the Gaussian head.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        core: CoreSpec,
        features: int = 64,
        share_torso: bool = False,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            network,
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
            head_features=core.hidden_size,
        )
        self.actor_core = RecurrentCore(features, core)
        self.critic_core = self.actor_core if share_torso else RecurrentCore(features, core)
        shared = self.critic_core is self.actor_core
        self.actor_state_size = self.actor_core.state_size
        self.state_size = self.actor_state_size + (0 if shared else self.critic_core.state_size)

    def initial_state(self, batch: int) -> Tensor:
        """``[batch, state_size]`` zeros on the parameters' device: an episode's first state."""
        return torch.zeros(batch, self.state_size, device=self.value_head.weight.device)

    def _split(self, state: Tensor) -> tuple[Tensor, Tensor]:
        actor = state[..., : self.actor_state_size]
        critic = actor if self.critic_core is self.actor_core else state[..., self.actor_state_size :]
        return actor, critic

    def _join(self, actor: Tensor, critic: Tensor) -> Tensor:
        return actor if self.critic_core is self.actor_core else torch.cat((actor, critic), -1)

    def step(self, observation: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of both cores: ``[N, *obs]`` observations and ``[N, state_size]`` states
        -> the actor's and the critic's ``[N, hidden_size]`` outputs and the next state."""
        actor_state, critic_state = self._split(state)
        actor, actor_state = self.actor_core.step(self.actor_torso(observation), actor_state)
        if self.critic_core is self.actor_core:
            return actor, actor, actor_state
        critic, critic_state = self.critic_core.step(self.critic_torso(observation), critic_state)
        return actor, critic, self._join(actor_state, critic_state)

    def act_recurrent(
        self, observation: Tensor, state: Tensor, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Act on ``[N, *obs]`` observations from ``[N, state_size]`` states: ``(action,
        log_prob, next state)`` (shapes as :meth:`ActorCritic.act`). Called under
        ``torch.inference_mode``."""
        actor, _, state = self.step(observation, state)
        action, log_prob = self.head.sample(actor, deterministic)
        return action, log_prob, state

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Act from the initial state (an episode's first step); acting over an episode
        carries the state with :meth:`act_recurrent`."""
        action, log_prob, _ = self.act_recurrent(observation, self.initial_state(observation.shape[0]), deterministic)
        return action, log_prob

    def step_values(self, observation: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, 1]`` V(s) of observations acted on from ``[N, state_size]`` states, and the
        next states (before any reset), without the policy head."""
        _, critic, state = self.step(observation, state)
        return F.linear(critic, self.value_head.weight, self.value_head.bias), state

    def sequence_outputs(
        self, observation: Tensor, state: Tensor, burn_in: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The actor's and the critic's outputs at a batch of sequences' masked steps.

        Args:
            observation: ``[N, P, *obs]``, P = W burn-in positions + the sequence proper.
            state: ``[N, state_size]``, the state at position 0.
            burn_in: ``[N, P]`` bool, the real burn-in steps (only in the first W columns).
            mask: ``[N, P]`` bool, the steps to return (none in the first W columns, all of
                column W).

        Returns:
            ``[M, hidden_size]`` each, M = ``mask.sum()``, in row-major order of ``mask``.
            The burn-in steps refresh the state without gradients (R2D2's burn-in).
        """
        width = int(mask[0].int().argmax())  # W: the sequence proper starts at the first masked column
        actor_state, critic_state = self._split(state)
        cores = [(self.actor_torso, self.actor_core, actor_state)]
        if self.critic_core is not self.actor_core:
            cores.append((self.critic_torso, self.critic_core, critic_state))
        outputs = []
        for torso, core, core_state in cores:
            if width:
                with torch.no_grad():
                    for j in range(width):  # left-padded: a padded step keeps the state
                        _, stepped = core.step(torso(observation[:, j]), core_state)
                        core_state = torch.where(burn_in[:, j, None], stepped, core_state)
            proper = observation[:, width:]
            n, length = proper.shape[:2]
            features = torso(proper.reshape(n * length, *proper.shape[2:])).view(n, length, -1)
            output, _ = core(features, core_state)
            outputs.append(output[mask[:, width:]])
        return outputs[0], outputs[-1]

    def sequence_log_prob_entropy_value(
        self, observation: Tensor, action: Tensor, state: Tensor, burn_in: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``[M]`` log pi(a|s), ``[M]`` entropy and ``[M, 1]`` V(s) at the masked steps of a
        batch of sequences, with gradients (arguments as :meth:`sequence_outputs`; ``action``
        ``[N, P, ...]``)."""
        actor, critic = self.sequence_outputs(observation, state, burn_in, mask)
        log_prob, entropy = self.head.log_prob_entropy(actor, action[mask])
        return log_prob, entropy, F.linear(critic, self.value_head.weight, self.value_head.bias)
