"""ACER: Retrace Q targets, truncated importance weights with bias correction, an EMA trust region;
Discrete actions.

Paper:
    Wang et al. 2016, "Sample Efficient Actor-Critic with Experience Replay" (Algorithms 1-2,
        Sec. 3), arXiv:1611.01224

Example:
    python acer.py --env-id CartPole-v1 --seed 1

Deviations from the paper (each marked `# DEVIATION(n)` in the code):
    1. Synchronous: `num_envs` envs step in lockstep, one learner updates (OpenAI baselines' ACER);
       the paper is async.
    2. A truncated step gets gamma * V(final observation) added to its reward, V at update time, and
       ends the episode.
    3. The Q loss is q_coef * (Q_ret - Q(s_t, a_t))^2: the paper gives only its gradient, and
       baselines halves it.
    4. Importance weights divide by max(mu, 1e-8): a behaviour probability that underflowed to 0
       gives a large weight.
    5. The global gradient norm is clipped to `max_grad_norm` (10, baselines).
"""

import ast
import contextlib
import importlib.util
import io
import logging
import math
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import sys
import time
import warnings
import zipfile
from dataclasses import asdict, dataclass, replace
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    # --- COMMON ARGS: the same text in all six scripts ---
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name in the run folder runs/<env_id>__<exp_name>__<seed>__<time>; odd characters become -"""
    seed: int = 1
    """random seed of torch, numpy, Python's random, the environments and the evaluation episodes"""
    cuda: bool = True
    """train on a CUDA GPU when one is present, else on the CPU (--no-cuda: always on the CPU)"""
    compile: bool = False
    """torch.compile the updates as written (on a GPU, SAC, TD3 and HIL-SERL also capture them)"""
    capture_video: bool = False
    """record each evaluation's first 1,000 steps to runs/<run_name>/videos/ (the `video` extra)"""
    save_model: bool = False
    """save the trained networks to runs/<run_name>/model.pt when the run ends"""
    eval_episodes: int = 10
    """number of episodes each evaluation plays; the mean of their returns is logged"""
    checkpoint_freq: int = 0
    """write runs/<run_name>/checkpoint.pt every this many env steps (0: on Ctrl-C or SIGTERM)"""
    resume: str | None = None
    """continue the run of this checkpoint.pt with its flags; it takes or names those given"""
    resume_anyway: bool = False
    """let --resume continue a finished run, dropping what it logged after that checkpoint"""
    env_kwargs: tuple[str, ...] = ()
    """gym.make's keywords as KEY:VALUE, VALUE a Python literal or else a string (RL Zoo's)"""
    # --- END OF COMMON ARGS ---

    env_id: str = "CartPole-v1"
    """environment to train on: any with Discrete actions and 1-D observations, or an Atari id"""
    total_timesteps: int = 500_000
    """environment steps to train for, counted over all --num-envs environments; rounded down to
    whole segments"""
    num_envs: int = 8
    """number of environments stepped in lockstep in one process (SB2 zoo's CartPole; baselines uses
    16 for Atari)"""
    eval_freq: int = 50_000
    """evaluate the policy without exploration noise every this many env steps, and at the end (0:
    only at the end)"""
    log_freq: int = 1_600
    """write the latest update's losses to TensorBoard every this many env steps"""
    num_steps: int = 20
    """env steps per environment in a segment, the unit that is learned from and replayed (T_max;
    paper, baselines)"""
    replay_ratio: int = 4
    """updates on segments replayed from the buffer after each update on the newest segment (paper,
    baselines)"""
    replay_start: int = 10_000
    """transitions to store before the replayed updates begin (baselines: 10,000 per env, 160,000 at
    its 16)"""
    buffer_size: int = 50_000
    """number of transitions the replay buffer holds, as whole segments of --num-envs x --num-steps
    (baselines: 50,000 per env, 800,000 at its 16)"""
    replay_ratio_poisson: bool = False
    """draw the number of replayed updates from a Poisson of mean --replay-ratio instead
    (baselines)"""
    gamma: float = 0.99
    """discount factor of future rewards (gamma; paper)"""
    truncation_c: float = 10.0
    """cap on the importance weights in the policy gradient; the excess goes to a bias correction
    (c; paper)"""
    q_coef: float = 0.5
    """weight of the Q-head loss in the total loss (baselines)"""
    ent_coef: float = 0.01
    """weight of the entropy bonus, which keeps the policy exploring (beta; baselines)"""
    trust_region: bool = True
    """keep each policy update within a trust region around the average policy (paper, Sec. 3.3)"""
    avg_decay: float = 0.99
    """decay of the moving average of the network's parameters that is the average policy (alpha;
    paper)"""
    max_kl: float = 1.0
    """size of the trust region, a bound on the linearised KL(pi_avg || pi) (delta; paper,
    baselines)"""
    max_grad_norm: float = 10.0
    """scale the gradient down when its global norm exceeds this value (baselines)"""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """which optimizer: rmsprop, as the paper's Atari runs and baselines (their settings tuned with
    it), or adam"""
    learning_rate: float = 7e-4
    """learning rate of the optimizer (baselines)"""
    rms_alpha: float = 0.99
    """RMSprop's decay of its running mean of squared gradients (baselines)"""
    optimizer_eps: float = 1e-5
    """epsilon of RMSprop or Adam, the constant added to the step's denominator (baselines)"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over the run (baselines' `learn` default; its Atari
    runs keep it constant)"""


HIDDEN = 64  # units per hidden layer of the MLP (SB2 zoo's ACER MlpPolicy)
MU_FLOOR = 1e-8  # DEVIATION(4): importance weights divide by max(mu, MU_FLOOR)
METRICS = ("policy_loss", "q_loss", "entropy", "avg_policy_kl", "rho_mean")  # acer_loss's metrics, logged as losses/*


# PURE MATH
# --------------------------------------------------------------------------------------------------
def retrace_targets(rewards, dones, q_taken, values, rho_bar, last_values, gamma: float):
    """Q_ret(s_t, a_t) (T, N) backwards from V(s_T) = last_values (N,)   [arXiv:1611.01224 eq. 5,
    Alg. 2]; the rest is (T, N): dones 1 where an episode ended (a truncation's bootstrap is in its
    reward), rho_bar = min(1, pi / mu)."""
    q_ret, future = torch.empty_like(rewards), last_values
    for t in reversed(range(len(rewards))):
        future = q_ret[t] = rewards[t] + gamma * (1.0 - dones[t]) * future  # Q_ret <- r_t + gamma (1 - d_t) Q_ret
        future = rho_bar[t] * (future - q_taken[t]) + values[t]  # Q_ret <- rho_bar_t (Q_ret - Q(s_t, a_t)) + V(s_t)
    return q_ret


def trust_region_project(g, k, delta: float):
    """g' = g - max(0, (k.g - delta) / ||k||^2) k per row (..., A), so k.g' <= delta
    [arXiv:1611.01224 eq. 12]"""
    excess = ((k * g).sum(-1, keepdim=True) - delta).clamp(min=0.0)
    return g - excess / (k * k).sum(-1, keepdim=True).clamp(min=1e-12) * k


# NETWORKS AND REPLAY OF WHOLE SEGMENTS
# --------------------------------------------------------------------------------
def layer_init(layer: nn.Module, gain: float = np.sqrt(2)) -> nn.Module:
    """Orthogonal weights with this gain and zero biases (baselines and SB3)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class Agent(nn.Module):
    """One trunk, a policy head (logits of pi(.|s)) and a Q head (Q(s, .))   [paper, Sec. 3]; V =
    sum_a pi Q(s, a)."""

    def __init__(self, envs):
        super().__init__()
        obs_shape, num_actions = envs.single_observation_space.shape, int(envs.single_action_space.n)
        if len(obs_shape) == 3:  # NatureCNN (Mnih et al. 2015) for (stack, 84, 84) frames
            self.trunk = nn.Sequential(
                layer_init(nn.Conv2d(obs_shape[0], 32, 8, stride=4)),
                nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)),
                nn.ReLU(),
            )
        else:  # a 64-64 tanh MLP for 1-D observations
            self.trunk = nn.Sequential(
                layer_init(nn.Linear(obs_shape[0], HIDDEN)), nn.Tanh(), layer_init(nn.Linear(HIDDEN, HIDDEN)), nn.Tanh()
            )
        features = self.trunk[-2].out_features
        self.policy_head, self.q_head = (layer_init(nn.Linear(features, num_actions), gain) for gain in (0.01, 1.0))

    def forward(self, obs):
        """(logits (B, A), Q(s, .) (B, A)), computed in float32; Atari's uint8 frames are scaled to
        [0, 1] here only."""
        features = self.trunk(obs.float() * (1.0 / 255.0) if obs.dtype == torch.uint8 else obs.float())
        return self.policy_head(features), self.q_head(features)

    @torch.no_grad()
    def act(self, obs):
        """(a ~ pi(.|s) (B,), mu = pi(.|s) (B, A)), Gumbel-max: a = argmax_a logits_a - log(-log
        u_a), u_a ~ U[0, 1)."""
        logits = self(obs)[0]
        return (logits - torch.rand_like(logits).log_().neg_().log_()).argmax(-1), logits.softmax(-1)


class SegmentBuffer:
    """The last `buffer_size` transitions as whole segments of T steps in N envs: s_0..s_T (uint8
    Atari frames, else float32), a_t, r_t, d_t, mu(.|s_t), and final_obs {(slot, t, n): s_t+1 where
    env n truncated at t}, DEVIATION(2)."""

    FIELDS = ("obs", "actions", "rewards", "dones", "mu")

    def __init__(self, buffer_size: int, T: int, N: int, obs_space, num_actions: int, device):
        self.slots, self.T, self.N, self.final_obs, self.pos, self.size = buffer_size // (T * N), T, N, {}, 0, 0
        obs_dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        self.obs = torch.zeros((self.slots, T + 1, N, *obs_space.shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros((self.slots, T, N), dtype=torch.long, device=device)
        self.rewards, self.dones = (torch.zeros((self.slots, T, N), device=device) for _ in range(2))
        self.mu = torch.zeros((self.slots, T, N, num_actions), device=device)

    @property
    def transitions(self) -> int:
        return self.size * self.T * self.N

    def add(self, segment: dict) -> None:
        """Store a segment (the FIELDS and final_obs {(t, n): obs}), overwriting the oldest when
        full."""
        for name in self.FIELDS:
            getattr(self, name)[self.pos] = segment[name]
        self.final_obs = {key: value for key, value in self.final_obs.items() if key[0] != self.pos}
        self.final_obs.update({(self.pos, *key): value for key, value in segment["final_obs"].items()})
        self.pos, self.size = (self.pos + 1) % self.slots, min(self.size + 1, self.slots)

    def sample(self) -> dict:
        """A uniformly drawn stored segment (torch's RNG), in `add`'s format."""
        slot = int(torch.randint(self.size, ()))
        final_obs = {key[1:]: value for key, value in self.final_obs.items() if key[0] == slot}
        return {name: getattr(self, name)[slot] for name in self.FIELDS} | {"final_obs": final_obs}

    def state_dict(self) -> dict:
        stored = {name: getattr(self, name)[: self.size].clone() for name in self.FIELDS}  # a view saves all slots
        return stored | {"final_obs": self.final_obs, "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        for name in self.FIELDS:
            getattr(self, name)[: state["size"]] = state[name]
        self.final_obs = {key: value.to(self.obs.device) for key, value in state["final_obs"].items()}
        self.pos, self.size = state["pos"], state["size"]


# LOSSES AND UPDATES
# --------------------------------------------------------------------------------------------------
@torch.compiler.disable  # eager under --compile too: how many truncations a segment holds, and where, varies
@torch.no_grad()
def truncation_rewards(agent: Agent, segment: dict, gamma: float):
    """The segment's rewards r_t (T, N), with gamma * V(s') added where env n was truncated at step
    t, s' its final observation, V(s') = sum_a pi(a|s') Q(s', a) from the network as it is now
    (DEVIATION(2))."""
    rewards = segment["rewards"].clone()
    if segment["final_obs"]:
        final_logits, final_q = agent(torch.stack(list(segment["final_obs"].values())))
        rewards[tuple(zip(*segment["final_obs"]))] += gamma * (final_logits.softmax(-1) * final_q).sum(-1)
    return rewards


def acer_loss(agent: Agent, avg_agent: Agent, segment: dict, args: Args):
    """(loss, detached metrics) of one segment, on-policy or replayed with its stored mu
    [arXiv:1611.01224 Alg. 2]."""
    rewards = truncation_rewards(agent, segment, args.gamma)
    T, N = segment["actions"].shape
    logits, q = (x.view(T + 1, N, -1) for x in agent(segment["obs"].flatten(0, 1)))
    actions = segment["actions"].unsqueeze(-1)
    q_taken = q[:T].gather(-1, actions).squeeze(-1)  # Q(s_t, a_t), with the Q head's gradient
    pi = logits.softmax(-1)  # with the policy head's gradient, which only the loss's last line uses
    with torch.no_grad():
        values = (pi * q).sum(-1)  # V(s) = sum_a pi(a|s) Q(s, a), (T + 1, N)
        rho_all = pi[:T] / segment["mu"].clamp(min=MU_FLOOR)  # rho(a) = pi(a|s) / mu(a|s) for every a, DEVIATION(4)
        rho = rho_all.gather(-1, actions).squeeze(-1)
        q_ret = retrace_targets(rewards, segment["dones"], q_taken, values[:T], rho.clamp(max=1), values[T], args.gamma)
        pi_avg = avg_agent(segment["obs"][:T].flatten(0, 1))[0].view(T, N, -1).softmax(-1)
        avg_kl = (pi_avg * (pi_avg.clamp(min=1e-12).log() - pi[:T].clamp(min=1e-12).log())).sum(-1).mean()

    # g = d objective / df on a leaf copy f of pi(.|s_t) (phi of Sec. 3.3), per sample:
    #   g = min(c, rho_t) grad log pi(a_t|s_t) (Q_ret - V(s_t))                              [eq. 9]
    #     + E_{a~pi}[relu(1 - c / rho_t(a)) grad log pi(a|s_t) (Q(s_t, a) - V(s_t))]
    #     + beta grad H(pi(.|s_t)),   rho_t(a) = pi(a|s_t) / mu(a|s_t)
    f = pi[:T].detach().requires_grad_()
    log_pi = f.clamp(min=1e-12).log()
    truncated_term = rho.clamp(max=args.truncation_c) * log_pi.gather(-1, actions).squeeze(-1) * (q_ret - values[:T])
    bias_weights = (1.0 - args.truncation_c / rho_all).clamp(min=0.0) * f.detach()  # relu(1 - c / rho(a)) pi(a|s)
    bias_correction = (bias_weights * log_pi * (q[:T].detach() - values[:T].unsqueeze(-1))).sum(-1)
    entropy = -(f * log_pi).sum(-1)
    objective = truncated_term + bias_correction + args.ent_coef * entropy
    g = torch.autograd.grad(objective.sum(), f)[0]
    if args.trust_region:  # g' from k = d KL(pi_avg || pi) / df = -pi_avg / pi                                [eq. 12]
        g = trust_region_project(g, -pi_avg / f.detach().clamp(min=1e-12), args.max_kl)
    q_loss = (q_ret - q_taken).pow(2).mean()  # DEVIATION(3): the loss has q_coef times this, not half of it
    # -(f * g').sum(-1).mean(), f = pi with its gradient, carries g' into the network     [eq. 12]
    loss = -(pi[:T] * g).sum(-1).mean() + args.q_coef * q_loss
    metrics = -(truncated_term + bias_correction).mean(), q_loss, entropy.mean(), avg_kl, rho.mean()
    return loss, {key: value.detach() for key, value in zip(METRICS, metrics)}


@torch.no_grad()
def update_average(avg_agent: nn.Module, agent: nn.Module, decay: float) -> None:
    """theta_avg <- alpha * theta_avg + (1 - alpha) * theta, in place, per parameter
    [arXiv:1611.01224 Sec. 3.3]"""
    torch._foreach_lerp_(list(avg_agent.parameters()), list(agent.parameters()), 1.0 - decay)


def acer_updates(agent, avg_agent, optimizer, args):
    """update(segment): one step of `optimizer` on `acer_loss`, the gradient norm clipped first,
    then theta_avg's; returns detached metrics (no host sync)."""

    def update(segment):
        loss, metrics = acer_loss(agent, avg_agent, segment, args)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # DEVIATION(5)
        optimizer.step()
        update_average(avg_agent, agent, args.avg_decay)  # [paper, Alg. 2]
        return metrics

    return update


# MAIN
# --------------------------------------------------------------------------------------------------
def main(args: Args) -> dict:
    """Train; returns a summary. Raises ConfigError, before writing anything, on bad flags, envs or
    checkpoints."""
    args, checkpoint, device = setup(args, check_args, check_spaces, observation_wrappers)
    T, N = args.num_steps, args.num_envs
    notes = []  # printed once nothing can refuse the run, so an error stays one line
    if args.total_timesteps % (T * N):  # whole segments only
        args = replace(args, total_timesteps=args.total_timesteps // (T * N) * T * N)
        notes.append(f"--total-timesteps rounded down to {args.total_timesteps:,}, whole segments")
    if args.replay_ratio and args.replay_start > args.total_timesteps:
        notes.append(f"--replay-start {args.replay_start:,} is past the run's end: on-policy updates only")
    with Run(args, checkpoint, device, "--buffer-size, --num-envs or --num-steps", observation_wrappers) as run:
        agent, avg_agent = Agent(run.envs).to(device), Agent(run.envs).to(device).requires_grad_(False)
        avg_agent.load_state_dict(agent.state_dict())  # theta_avg, the average policy's network, starts at theta
        # the learning rate a tensor on the device: --anneal-lr changes it in place, and compiled
        # code reads the new value with no recompile
        lr = torch.tensor(args.learning_rate, device=device)
        optimizer = (
            torch.optim.RMSprop(agent.parameters(), lr, args.rms_alpha, args.optimizer_eps)
            if args.optimizer == "rmsprop"
            else torch.optim.Adam(agent.parameters(), lr, eps=args.optimizer_eps)
        )
        buffer = SegmentBuffer(
            args.buffer_size, T, N, run.envs.single_observation_space, int(run.envs.single_action_space.n), device
        )
        stateful = dict(agent=agent, avg_agent=avg_agent, optimizer=optimizer, buffer=buffer)

        def policy(obs):  # the greedy action argmax_a pi(a|s), for evaluation
            return agent(torch.as_tensor(obs, device=device))[0].argmax(-1).cpu().numpy()

        (global_step, replay_updates), obs = run.resume(stateful, (0, 0), policy)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        update = acer_updates(agent, avg_agent, optimizer, args)
        if args.compile:  # the same function, compiled
            update = compiled(update)

        while global_step < args.total_timesteps and not run.stop_signal:
            previous_step = global_step
            segment = {name: torch.zeros_like(getattr(buffer, name)[0]) for name in buffer.FIELDS} | {"final_obs": {}}
            for t in range(T):  # COLLECT a segment: T steps of the N envs in lockstep (DEVIATION(1)), with mu
                segment["obs"][t] = torch.as_tensor(obs)
                segment["actions"][t], segment["mu"][t] = agent.act(segment["obs"][t])
                actions = segment["actions"][t].cpu().numpy()
                obs, rewards, terminations, truncations, infos = run.envs.step(actions)
                check_rewards(rewards, actions, args.env_id, global_step)
                global_step += N  # SAME_STEP autoreset: every step a transition, no reset step enters a segment
                run.log(infos, None, global_step - N, global_step)
                # a truncation's final obs, not a termination's: DEVIATION(2)
                for n in np.flatnonzero(truncations & ~terminations):
                    segment["final_obs"][(t, int(n))] = segment["obs"].new_tensor(infos["final_obs"][n])
                segment["rewards"][t] = torch.from_numpy(rewards)
                segment["dones"][t] = torch.from_numpy(terminations | truncations)
            segment["obs"][T] = torch.as_tensor(obs)
            buffer.add(segment)  # STORE

            # UPDATE: on-policy on this segment, then `replay_ratio` updates on replayed segments
            # [paper, Alg. 1]
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"].fill_(args.learning_rate * (1.0 - previous_step / args.total_timesteps))
            replays = args.replay_ratio if buffer.transitions >= args.replay_start else 0
            if replays and args.replay_ratio_poisson:
                replays = int(torch.poisson(torch.tensor(float(replays))))
            for batch in [segment, *(buffer.sample() for _ in range(replays))]:
                metrics = update(batch)
            replay_updates += replays

            if crossed(previous_step, global_step, args.log_freq):  # LOG the latest update's losses
                run.log({}, metrics, previous_step, global_step)
                run.writer.add_scalar("charts/replay_transitions", buffer.transitions, global_step)
                run.writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            run.after_step(previous_step, (global_step, replay_updates), obs, policy)
        model = {"agent": agent.state_dict(), "avg_agent": avg_agent.state_dict()}
        summary = run.finish((global_step, replay_updates), obs, policy, model)
    return {**summary, "iterations": global_step // (T * N), "replay_updates": replay_updates}


def compiled(update):
    """`update` through torch.compile as it is written (its loss, backward pass and optimizer step
    traced at the first call, so an edit above is what runs), its random draws as eager mode's."""
    importlib.import_module("torch._inductor.config").fallback_random = True  # random draws as eager mode's
    warnings.filterwarnings("ignore", "TensorFloat32")  # inductor on a GPU: float32 matmuls kept
    for logger in ["torch._dynamo.variables.ctx_manager", "torch.utils.cpp_extension"]:
        logging.getLogger(logger).setLevel(logging.ERROR)  # torch's notes
    return torch.compile(update)


# VALIDATION AND ATARI OBSERVATIONS
# ------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for this script's out-of-range or contradictory flags, each flag's own
    range before the bounds flags set one another, so that each message names the flag to change."""
    check(
        [
            *(
                (
                    not getattr(args, name) >= 0,
                    f"--{name.replace('_', '-')} must be non-negative, not {getattr(args, name)}",
                )
                for name in ("replay_ratio", "replay_start", "q_coef", "ent_coef")
            ),
            *(
                (not getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive, not {getattr(args, name)}")
                for name in ("num_steps", "learning_rate", "truncation_c", "max_kl", "max_grad_norm", "optimizer_eps")
            ),
            (not 0 < args.gamma <= 1, f"--gamma must lie in (0, 1], not {args.gamma}"),
            (not 0 <= args.avg_decay < 1, f"--avg-decay must lie in [0, 1), not {args.avg_decay}"),
            (not 0 <= args.rms_alpha < 1, f"--rms-alpha must lie in [0, 1), not {args.rms_alpha}"),
            (
                args.optimizer == "adam" and args.rms_alpha != Args.rms_alpha,
                "--rms-alpha is RMSprop's: drop it, or use --optimizer rmsprop",
            ),
            (
                not args.trust_region and args.max_kl != Args.max_kl,
                "--max-kl bounds the trust region: drop it, or drop --no-trust-region",
            ),
            (
                args.replay_ratio_poisson and args.replay_ratio == 0,
                "--replay-ratio-poisson draws around --replay-ratio, which is 0: raise it, or drop the flag",
            ),
        ]
    )
    segment = args.num_envs * args.num_steps
    whole = args.buffer_size // segment * segment  # the transitions of the whole segments the buffer holds
    check(
        [
            (
                args.total_timesteps < segment,
                f"--total-timesteps ({args.total_timesteps}) must be at least one segment, --num-envs x --num-steps "
                f"= {segment}",
            ),
            (
                args.buffer_size < segment,
                f"--buffer-size ({args.buffer_size}) must be at least one segment, --num-envs x --num-steps "
                f"= {segment}",
            ),
            (
                args.replay_ratio > 0 and args.replay_start > whole,
                f"--replay-start {args.replay_start} exceeds the {whole} transitions --buffer-size holds: lower it",
            ),
        ]
    )


def check_spaces(env_id: str, obs_space, action_space) -> None:
    """Raise ConfigError unless the env has Discrete actions and 1-D Box observations or (stack, 84,
    84) frames."""
    frames_or_flat = obs_space.shape is not None and (len(obs_space.shape) == 1 or obs_space.shape[1:] == (84, 84))
    check(
        [
            (
                not isinstance(action_space, gym.spaces.Discrete),
                f"{env_id} has a {type(action_space).__name__} action "
                "space; ACER needs Discrete actions: use sac_continuous_action.py or a2c.py for Box actions",
            ),
            (
                isinstance(action_space, gym.spaces.Discrete) and action_space.start != 0,
                f"{env_id}'s Discrete actions start at {getattr(action_space, 'start', 0)}; this script's start at 0: "
                "shift them with a gymnasium.ActionWrapper",
            ),
            (
                not (isinstance(obs_space, gym.spaces.Box) and frames_or_flat),
                f"{env_id} has {obs_space} observations; "
                "this script needs Atari frames or a 1-D Box: wrap the env in gymnasium.wrappers.FlattenObservation",
            ),
        ]
    )


def observation_wrappers(args, make):
    """`make`'s env or, for Atari, SB3's AtariWrapper (no-op starts, 4 frames skipped and
    max-pooled, episodic life, fire on reset, 84 x 84 grey frames, clipped rewards) stacked by 4;
    ALE/* ids (ale_py) keep their sticky actions."""
    name = args.env_id.split(":")[-1]  # an ale_py:ALE/Pong-v5 id too
    if not (name.startswith("ALE/") or "NoFrameskip" in name):
        if re.fullmatch(r"\w+-v[04]", name) and importlib.util.find_spec("ale_py"):  # ale_py's Pong-v4 skips frames
            gym.register_envs(importlib.import_module("ale_py"))
            ale = "ale_py" in str(getattr(gym.registry.get(name), "entry_point", ""))
            check([(ale, f"{name} skips frames itself: use {name[:-3]}NoFrameskip-v4 or ALE/{name[:-3]}-v5")])
        return make()
    ale_py = importlib.import_module("ale_py")  # registers ALE's ids with gymnasium
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # its banner would precede an error's line
    gym.register_envs(ale_py)
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    skip = "frameskip" in parse_env_kwargs(args.env_kwargs)  # it would multiply the 4 that MaxAndSkip skips
    check([(skip, "--env-kwargs frameskip: the Atari wrappers skip 4 frames themselves (MaxAndSkip); drop it")])
    env = make(**({"frameskip": 1} if name.startswith("ALE/") else {}))  # AtariWrapper's MaxAndSkip skips
    env = gym.wrappers.TransformObservation(AtariWrapper(env), np.squeeze, gym.spaces.Box(0, 255, (84, 84), np.uint8))
    return gym.wrappers.FrameStackObservation(env, 4)  # pads a new episode with its first frame


# COMMON BLOCK: the same text in all six scripts (tests/test_common_block.py compares it); a reader
# may stop here =====
EVAL_SEED_OFFSET = 1_000_000  # evaluation episode k's seed: seed + EVAL_SEED_OFFSET + k
VIDEO_STEPS = 1_000  # the most frames --capture-video records of an evaluation
LEAST = dict(seed=0, total_timesteps=0, num_envs=1, eval_episodes=1, log_freq=1)
LEAST.update(eval_freq=0, checkpoint_freq=0)  # each common count's least value
RESUMABLE = ["total_timesteps", "eval_freq", "eval_episodes", "log_freq", "checkpoint_freq"]
RESUMABLE += ["save_model", "capture_video", "cuda", "compile"]  # what --resume may change


class ConfigError(Exception):
    """Bad input, a failed save or a diverged run: `cli` prints one line, exit code 2."""


def check(problems) -> None:
    """Raise ConfigError with the message of the first bad (bad, message) pair."""
    for bad, message in problems:
        if bad:
            raise ConfigError(message)


def crossed(before: int, now: int, every: int) -> bool:
    """True when a multiple of `every` lies in (before, now]."""
    return every > 0 and now // every > before // every


def make_env(args, wrap=None, video_dir: str | None = None):
    """A thunk: args.env_id, --env-kwargs, episode statistics, `wrap(args, make)`, an mp4 writer."""

    def make(**kwargs):
        kwargs = {**parse_env_kwargs(args.env_kwargs), **kwargs}
        if video_dir is not None:
            kwargs["render_mode"] = "rgb_array"
        return gym.wrappers.RecordEpisodeStatistics(gym.make(args.env_id, **kwargs))

    def thunk():
        env = wrap(args, make) if wrap else make()
        return VideoWriter(env, f"{video_dir}/evaluation.mp4") if video_dir else env

    return thunk


class VideoWriter(gym.Wrapper):
    """Its first VIDEO_STEPS frames to an mp4 at `path`, each handed to ffmpeg as it comes."""

    def __init__(self, env, path: str):
        super().__init__(env)
        self.path = path
        self.frames = 0
        self.writer = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.record()
        return obs, info

    def step(self, action):
        step = self.env.step(action)
        self.record()
        return step

    def record(self) -> None:
        if self.frames >= VIDEO_STEPS:
            return
        frame = self.env.render()
        if self.writer is None:
            ffmpeg = importlib.import_module("moviepy.video.io.ffmpeg_writer")
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fps = self.env.metadata.get("render_fps", 30)
            self.writer = ffmpeg.FFMPEG_VideoWriter(self.path, frame.shape[1::-1], fps)
        try:
            self.writer.write_frame(frame)
            self.frames += 1
        except OSError:  # the encoder is gone (a Ctrl-C reaches it too): the video ends
            self.frames = VIDEO_STEPS

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.writer is not None:
                self.writer.close()
        super().close()


def parse_env_kwargs(pairs: tuple) -> dict:
    """--env-kwargs KEY:VALUE pairs, each VALUE a Python literal or else a word."""
    kwargs = {}
    for pair in pairs:
        key, colon, value = pair.partition(":")
        check([(not (colon and key.isidentifier()), f"--env-kwargs {pair}: write KEY:VALUE")])
        check([(key in kwargs, f"--env-kwargs {key} is given twice")])
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):  # a word, unless a literal mistyped
            broken = value[:1] in "[({'\"0123456789-+."
            check([(broken, f"--env-kwargs {pair}: a broken literal")])
            kwargs[key] = value
    return kwargs


def final_observations(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The true s_{t+1}: SAME_STEP autoreset puts an ended sub-env's reset in next_obs."""
    real_next_obs = next_obs.copy()
    for i in np.flatnonzero(infos.get("_final_obs", [])):
        real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs


def check_rewards(rewards: np.ndarray, actions: np.ndarray, env_id: str, step: int) -> None:
    """A NaN or infinite reward for a finite action: the env's fault, one line, never stored."""
    acted = np.isfinite(actions).reshape(len(rewards), -1).all(-1)  # a NaN action: the NaN guard's
    bad = rewards[acted & ~np.isfinite(rewards)].tolist()
    check([(bad, f"step {step:,}: {env_id} returned rewards {bad}; fix the env")])


def simulator_state(env):
    """An EzPickle base env's unpickled state: ALE's emulator or MuJoCo's data."""
    if hasattr(env, "ale"):
        return env.ale.cloneState(include_rng=True)
    return getattr(env, "data", None) if isinstance(env, gym.utils.EzPickle) else None


def pickle_envs(envs: list) -> bytes | None:
    """The sub-envs, wrappers and all, each beside its base env's RNG and simulator state; an
    EzPickle base env by reference (its own unpickling shifts arguments); None if one won't."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out)
    remade = {id(env.unwrapped) for env in envs if isinstance(env.unwrapped, gym.utils.EzPickle)}
    pickler.persistent_id = lambda obj: "env" if id(obj) in remade else None
    saved = [(env, env.unwrapped.np_random, simulator_state(env.unwrapped)) for env in envs]
    try:
        pickler.dump(saved)
    except Exception:  # a renderer's pointers, a robot's link: new episodes
        return None
    return out.getvalue()


def setup(args, check_args, check_spaces, wrap=None):
    """Before anything is written: --resume's checkpoint, the checks, a trial env, seeds, device."""
    checkpoint = None
    if args.resume:
        args, checkpoint = load_checkpoint(args)
    for key, value in asdict(args).items():
        flag = "--" + key.replace("_", "-")
        check([(isinstance(value, float) and not math.isfinite(value), f"{flag} must be finite")])
        least = LEAST.get(key, -math.inf)
        check([(isinstance(value, int) and value < least, f"{flag} must be at least {least}")])
    check([(args.seed >= 2**32, "--seed must lie in [0, 2**32 - 1]")])
    too_few = 0 < args.total_timesteps < args.num_envs
    check([(too_few, "--total-timesteps must be at least --num-envs")])
    check_args(args)
    if args.capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo, read at its first import
        __import__("torch._dynamo")  # CUDA wheels' triton segfaults if loaded after MuJoCo's EGL
        ffmpeg = None
        with contextlib.suppress(Exception):  # no moviepy, or a bad $FFMPEG_BINARY
            ffmpeg = importlib.import_module("moviepy.config").FFMPEG_BINARY
            ffmpeg = shutil.which(ffmpeg)
        check([(not ffmpeg, "--capture-video needs moviepy and its ffmpeg (the `video` extra)")])
    try:  # a trial env, reset, stepped (and rendered): bad input fails here
        with warnings.catch_warnings():  # a warning would precede the error's line
            warnings.simplefilter("ignore")
            env = make_env(args, wrap, "" if args.capture_video else None)()
            info = env.reset(seed=0)[1]
            info = {**info, **env.step(env.action_space.sample())[-1]}
            frame = env.render() if args.capture_video else None
            env.close()
    except ConfigError:  # a script's wrapper refusing a flag
        raise
    except Exception as e:  # the library's error, which may say what to install
        raise ConfigError(
            f"--env-id {args.env_id} cannot be made and stepped ({type(e).__name__}: {e}): an unknown env id "
            "(gymnasium.pprint_registry()), a bad --env-kwargs value or a package to install?"
        ) from None
    check_spaces(args.env_id, env.observation_space, env.action_space)
    taken = sorted({"episode", "final_obs", "final_info"} & set(info))  # wrappers write these
    check([(taken, f"{args.env_id}'s infos hold {taken}, gymnasium's own keys: rename them")])
    check([(args.capture_video and frame is None, f"--capture-video: {args.env_id} renders nothing")])
    for seed in (random.seed, np.random.seed, torch.manual_seed):
        seed(args.seed)
    torch.backends.cudnn.deterministic = True
    cuda = torch.cuda.is_available() and args.cuda
    device = torch.device("cuda" if cuda else "cpu")
    if args.compile and not cuda:  # a trial compile: inductor's C++ toolchain works
        try:
            torch.compile(lambda x: x + 1)(torch.ones(2))
        except Exception as e:  # no compiler, or one that fails
            raise ConfigError(f"--compile needs a working C++ compiler (g++, or $CXX): {str(e).splitlines()[0]}")
    return args, checkpoint, device


def load_checkpoint(args) -> tuple:
    """(args, checkpoint): --resume's, checked; its flags, but for the RESUMABLE ones given."""
    try:  # weights_only=False: pickled envs; resume only from checkpoints you wrote
        damaged = zipfile.ZipFile(args.resume).testzip()  # the CRC-32s torch wrote
        checkpoint = torch.load(args.resume, map_location="cpu", weights_only=False)
        script = checkpoint.get("script") if "counters" in checkpoint else "--save-model"
    except Exception as e:
        damaged = f"{type(e).__name__}: {e}"
    check([(damaged, f"--resume {args.resume}: unreadable or damaged ({damaged})")])
    own = os.path.basename(__file__)
    check([(script != own, f"--resume {args.resume}: a file of {script}, not a checkpoint of {own}")])
    finished = os.path.join(os.path.dirname(args.resume), "finished")  # by Run.finish
    if os.path.isfile(finished) and not args.resume_anyway:
        raise ConfigError(
            f"--resume: that run {open(finished).read().strip()}; to go on from this checkpoint's step "
            f"{checkpoint['counters'][0]:,}, dropping what it logged later, add --resume-anyway"
        )
    saved = {**checkpoint["args"], "resume": args.resume, "resume_anyway": args.resume_anyway}
    given = [key for key, value in asdict(args).items() if value != saved.get(key)]
    ignored = ["--" + key.replace("_", "-") for key in given if key not in RESUMABLE]
    if ignored:
        print(f"--resume: {', '.join(ignored)} ignored: a resumed run keeps its checkpoint's")
    saved.update({key: getattr(args, key) for key in given if key in RESUMABLE})
    step, total = checkpoint["counters"][0], saved["total_timesteps"]
    check([(total < step, f"--total-timesteps {total:,} is below the checkpoint's step {step:,}")])
    return type(args)(**saved), checkpoint


class Run(contextlib.AbstractContextManager):
    """A run's envs, directory, writer, signals, progress line, evaluations and checkpoints;
    `memory_flags`: what to lower when memory runs out; `at(args, counters)`: where it stands."""

    def __init__(self, args, checkpoint, device, memory_flags: str, wrap=None, at=None):
        self.args = args
        self.checkpoint = checkpoint
        self.device = device
        self.memory_flags = memory_flags
        self.wrap = wrap
        self.at = at or (lambda args, counters: f"at step {counters[0]:,}")
        name = f"{args.env_id}__{args.exp_name}"
        name = re.sub(r"[^\w.+-]", "-", name, flags=re.ASCII)  # a file name anywhere
        self.name = f"{name}__{args.seed}__{int(time.time())}"
        self.dir = f"runs/{self.name}"
        # exact: a checkpoint's envs go on where they were
        envs, self.exact = self.restored_envs(checkpoint["envs"] if checkpoint else None)
        if checkpoint:
            self.name = checkpoint["run_name"]
            self.dir = os.path.dirname(os.path.abspath(args.resume))
        too_long = len(self.name.encode()) > 255
        check([(too_long, "the run name is over 255 bytes: shorten --exp-name")])
        # SAME_STEP autoreset: an episode's last step returns the reset obs, infos the final
        thunks = [lambda env=env: env for env in envs]
        self.envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode="SameStep")
        self.last_return = checkpoint["last_return"] if checkpoint else None
        self.eval_return = self.eval_step = self.counters = None
        self.eval_due = None  # the step of an evaluation begun, not ended
        self.stop_signal = []
        signals = (signal.SIGINT, signal.SIGTERM)
        self.handlers = {sig: signal.signal(sig, self.on_signal) for sig in signals}

    def restored_envs(self, data: bytes | None) -> tuple:
        """(envs, exact): pickle_envs' sub-envs given their state back, or new envs, not exact."""
        if data is None:
            return [make_env(self.args, self.wrap)() for _ in range(self.args.num_envs)], False
        unpickler = pickle.Unpickler(io.BytesIO(data))
        unpickler.persistent_load = lambda _: make_env(self.args, self.wrap)().unwrapped
        saved = unpickler.load()
        for env, np_random, state in saved:
            base = env.unwrapped
            base.np_random = np_random
            if hasattr(base, "ale"):
                base.ale.restoreState(state)
            elif state is not None:
                __import__("mujoco").mj_copyData(base.data, base.model, state)
        lost = [state is None and isinstance(env.unwrapped, gym.utils.EzPickle) for env, _, state in saved]
        return [env for env, _, _ in saved], not any(lost)

    def on_signal(self, signum, frame) -> None:
        self.stop_signal.append(signum)
        with contextlib.suppress(RuntimeError):  # a print that the signal interrupted
            print(f"\nsignal {signum}: the run stops after this step", flush=True)

    def resume(self, stateful: dict, counters: tuple, policy):
        """(counters, obs): these and a first obs, or the checkpoint's, `stateful` loaded; an
        evaluation a signal cut short is made, of `policy`."""
        self.stateful = stateful
        try:  # once main() has built all: a failure before leaves nothing
            os.makedirs(self.dir, exist_ok=bool(self.checkpoint))
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{self.dir}/finished")  # --resume-anyway on a finished run
        except FileExistsError:  # a run started this second: the next second's name
            stem, stamp = self.name.rsplit("__", 1)
            self.name = f"{stem}__{int(stamp) + 1}"
            self.dir = f"runs/{self.name}"
            return self.resume(stateful, counters, policy)
        except OSError as e:
            raise ConfigError(f"cannot make {self.dir} ({e.strerror}): nothing is written") from None
        obs = None
        if self.checkpoint:
            counters = self.checkpoint["counters"]
            obs = self.checkpoint["obs"] if self.exact else None
            self.load(stateful)
            where = self.at(self.args, counters)
            print(f"resumed {self.dir} {where}" + ("" if obs is not None else "; new episodes start"))
        # what a killed run logged after its last checkpoint is dropped
        purge_step = counters[0] + 1 if self.checkpoint else None
        self.writer = SummaryWriter(self.dir, purge_step=purge_step)
        table = "\n".join(f"|{key}|{value}|" for key, value in asdict(self.args).items())
        self.writer.add_text("hyperparameters", table)
        self.last_log = time.time(), counters[0]
        if obs is None:
            obs = self.envs.reset(seed=self.args.seed + counters[0])[0]
        if self.checkpoint and self.checkpoint.get("eval_due") is not None:
            self.evaluate(policy, self.checkpoint["eval_due"])
        return counters, obs

    def load(self, stateful: dict) -> None:
        """`stateful` and the RNGs as the checkpoint holds them."""
        for key, obj in stateful.items():
            if isinstance(obj, torch.Tensor):
                obj.data.copy_(self.checkpoint[key])
                continue
            obj.load_state_dict(self.checkpoint[key])
            for group in getattr(obj, "param_groups", []):  # a tensor learning rate
                group.update({k: v.to(self.device) for k, v in group.items() if torch.is_tensor(v)})
        rng = self.checkpoint["rng"][: 3 + (self.device.type == "cuda")]
        setters = [torch.set_rng_state, np.random.set_state, random.setstate]
        for set_state, state in zip([*setters, torch.cuda.set_rng_state_all], rng):
            set_state(state)

    def save_checkpoint(self, counters: tuple, obs) -> str:
        """runs/<run_name>/checkpoint.pt: `stateful`, RNGs and sub-envs, written durably."""
        state = {key: obj.state_dict() for key, obj in self.stateful.items() if hasattr(obj, "state_dict")}
        state.update({k: v.detach().cpu() for k, v in self.stateful.items() if torch.is_tensor(v)})
        rng = [torch.get_rng_state(), np.random.get_state(), random.getstate()]
        rng.append(torch.cuda.get_rng_state_all() if self.device.type == "cuda" else [])
        state.update(script=os.path.basename(__file__), args=asdict(self.args), rng=rng)
        state.update(run_name=self.name, counters=counters, obs=obs, last_return=self.last_return)
        state.update(envs=pickle_envs(self.envs.envs), eval_due=self.eval_due)
        return self.save(state, "checkpoint.pt", counters[0], "the previous checkpoint, if any, is kept")

    def save(self, obj, name: str, global_step: int, kept: str) -> str:
        """`obj` (torch.save's or a writer's) to runs/<run_name>/<name>, durably, nets finite."""
        nets = [(key, obj) for key, obj in self.stateful.items() if isinstance(obj, nn.Module)]
        bad = [key for key, net in nets if not all(p.isfinite().all() for p in net.parameters())]
        diverged = f"step {global_step:,}: the run diverged in {', '.join(bad)}; {kept}"
        check([(bad, f"{diverged}: lower the rates")])
        path = os.path.join(self.dir, name)
        try:
            with open(f"{path}.tmp", "wb") as f:
                obj(f) if callable(obj) else torch.save(obj, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(f"{path}.tmp", path)
        except Exception as e:  # a full disk too (torch.save's RuntimeError)
            with contextlib.suppress(OSError):
                os.remove(f"{path}.tmp")
            raise ConfigError(f"cannot write {path} ({type(e).__name__}: {e}); {kept}") from None
        return path

    def log(self, infos: dict, metrics: dict | None, previous_step: int, global_step: int):
        """Ended episodes; every --log-freq steps `metrics` (0-d tensors), SPS and progress."""
        ended = infos.get("final_info", {})
        for i in np.flatnonzero(ended.get("_episode", [])):
            self.last_return = float(ended["episode"]["r"][i])
            self.writer.add_scalar("charts/episodic_return", self.last_return, global_step)
            length = int(ended["episode"]["l"][i])
            self.writer.add_scalar("charts/episodic_length", length, global_step)
        if not (metrics and crossed(previous_step, global_step, self.args.log_freq)):
            return
        stacked = torch.stack([v.float() for v in metrics.values()]).tolist()  # one sync
        bad = [f"{key} is {value}" for key, value in zip(metrics, stacked) if not math.isfinite(value)]
        check([(bad, f"step {global_step:,}: the run diverged, {', '.join(bad)}: lower the rates")])
        for key, value in zip(metrics, stacked):
            self.writer.add_scalar(f"losses/{key}", value, global_step)
        then, step = self.last_log
        self.last_log = time.time(), global_step
        sps = int((global_step - step) / max(self.last_log[0] - then, 1e-6))  # since the last
        self.writer.add_scalar("charts/SPS", sps, global_step)
        last = "-" if self.last_return is None else f"{self.last_return:.2f}"
        line = f"step {global_step:,}  SPS {sps}  last return {last}"
        tty = sys.stdout.isatty()  # a terminal's line overwrites itself
        line = f"\r{line}".ljust(60) if tty else line
        print(line, end="" if tty else "\n", flush=True)

    def evaluate(self, policy, global_step: int) -> None:
        """eval/episodic_return of `policy` (numpy batches), unless a signal ends it."""
        video_dir = f"{self.dir}/videos/step_{global_step}" if self.args.capture_video else None
        env = make_env(self.args, self.wrap, video_dir)
        envs = gym.vector.SyncVectorEnv([env], autoreset_mode="SameStep")
        self.eval_due, returns = global_step, []
        try:
            for k in range(self.args.eval_episodes):
                obs, infos = envs.reset(seed=self.args.seed + EVAL_SEED_OFFSET + k)
                while "episode" not in infos.get("final_info", {}):  # a lost life plays on
                    if self.stop_signal:
                        return
                    with torch.no_grad():
                        obs, _, _, _, infos = envs.step(policy(obs))
                returns.append(float(infos["final_info"]["episode"]["r"][0]))
        finally:
            envs.close()
        self.eval_return = float(np.mean(returns))
        self.eval_step, self.eval_due = global_step, None
        self.writer.add_scalar("eval/episodic_return", self.eval_return, global_step)
        print(f"\nstep {global_step:,}: eval/episodic_return {self.eval_return:.2f}")

    def after_step(self, previous_step: int, counters: tuple, obs, policy) -> None:
        """Keep `counters` for an error's checkpoint; evaluate and checkpoint where due."""
        self.counters = counters
        if crossed(previous_step, counters[0], self.args.eval_freq):
            self.evaluate(policy, counters[0])
        if crossed(previous_step, counters[0], self.args.checkpoint_freq):
            self.save_checkpoint(counters, obs)

    def finish(self, counters: tuple, obs, policy, model: dict) -> dict:
        """On a signal, a checkpoint and the command to continue; else the end of the run."""
        step = counters[0]
        if self.eval_step != step and not self.stop_signal:
            self.evaluate(policy, step)  # the final evaluation
        stopped = self.stop_signal[0] if self.stop_signal else None
        if stopped:
            self.stop(counters, obs, f"stopped by signal {stopped}")
        else:
            print(f"step {step:,}: final eval/episodic_return {self.eval_return:.2f}")
            if self.args.save_model:
                model = {**model, "args": asdict(self.args)}
                self.save(model, "model.pt", step, "no model.pt is written")
                print(f"model saved to {self.dir}/model.pt")
            done = f"finished at step {step:,}\n".encode()
            self.save(lambda f: f.write(done), "finished", step, "its last checkpoint, if any, is kept")
        return dict(run_dir=self.dir, global_step=step, eval_return=self.eval_return, stopped_by=stopped)

    def stop(self, counters: tuple, obs, why: str) -> None:
        """A checkpoint, and the command that continues the run from it."""
        path = self.save_checkpoint(counters, obs)
        print(f"\n{why} {self.at(self.args, counters)}; checkpoint written to {path}")
        command = [sys.executable, os.path.abspath(__file__), "--resume", os.path.abspath(path)]
        print("continue with:\n" + shlex.join(command), flush=True)

    def __exit__(self, kind, error, tb) -> None:
        """After an error, a checkpoint (a signal meanwhile waits); close; out of memory: one line
        naming `memory_flags`."""
        if hasattr(self, "writer"):  # none before resume(): nothing was written
            if error is not None and sys.stdout.isatty():  # the error on a line of its own
                print(flush=True)
            if isinstance(error, Exception) and self.counters:  # what the run holds, its networks finite
                with contextlib.suppress(ConfigError):
                    self.stop(self.counters, None, "ended by an error")  # resumed with new episodes
            self.writer.close()
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler)
        self.envs.close()
        if isinstance(error, (MemoryError, RuntimeError)) and "alloc" in str(error):
            first = str(error).splitlines()[0]
            raise ConfigError(f"out of memory ({first}): lower {self.memory_flags}") from None


def cli(argv=None) -> dict:
    """Command line: what tyro cannot parse gets tyro's message, other bad input one line,
    both exit code 2; a stop by a signal exits with 128 + signum."""
    args = tyro.cli(Args, args=argv, description=__doc__.split("\n\n")[0])
    with contextlib.suppress(Exception):  # --resume: the flags not given are the checkpoint's
        saved = torch.load(args.resume, map_location="cpu", weights_only=False, mmap=True)
        args = tyro.cli(Args, args=argv, default=Args(**saved["args"]))
    try:
        summary = main(args)
    except ConfigError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        sys.unraisablehook = lambda _: None  # quiet: a half-made env's __del__ may fail
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # before the run handles signals: nothing written
        raise SystemExit(128 + signal.SIGINT) from None
    if summary["stopped_by"]:
        raise SystemExit(128 + summary["stopped_by"])
    return summary


if __name__ == "__main__":
    cli()
