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
import traceback
import warnings
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
    """torch.compile the update functions as written (on a GPU, also captured as CUDA graphs)"""
    capture_video: bool = False
    """record each evaluation's first episode to runs/<run_name>/videos/ (needs moviepy)"""
    save_model: bool = False
    """save the trained networks to runs/<run_name>/model.pt when the run ends"""
    eval_episodes: int = 10
    """number of episodes each evaluation plays; the mean of their returns is logged"""
    checkpoint_freq: int = 0
    """write runs/<run_name>/checkpoint.pt every this many env steps (0: on Ctrl-C or SIGTERM)"""
    resume: str | None = None
    """continue the run of this checkpoint.pt with its flags (others but --resume-anyway ignored)"""
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
    """transitions to store before the replayed updates begin (baselines)"""
    buffer_size: int = 50_000
    """number of transitions the replay buffer holds, as whole segments of --num-envs x --num-steps
    (baselines)"""
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
    """decay the learning rate linearly to 0 over the run (baselines' default schedule)"""


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
    args, checkpoint, device = setup(args, observation_wrappers)
    T, N = args.num_steps, args.num_envs
    if args.total_timesteps % (T * N):  # whole segments only
        args = replace(args, total_timesteps=args.total_timesteps // (T * N) * T * N)
        print(f"note: --total-timesteps rounded down to {args.total_timesteps:,}, whole segments", file=sys.stderr)
    with Run(args, checkpoint, device, "--num-envs or --num-steps", observation_wrappers) as run:
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
        (global_step, replay_updates), obs = run.resume(stateful, (0, 0))
        update = acer_updates(agent, avg_agent, optimizer, args)
        if args.compile:  # the same function, compiled
            update = torch.compile(update)

        def policy(obs):  # the greedy action argmax_a pi(a|s), for evaluation
            return agent(torch.as_tensor(obs, device=device))[0].argmax(-1).cpu().numpy()

        while global_step < args.total_timesteps and not run.stop_signal:
            previous_step = global_step
            segment = {name: torch.zeros_like(getattr(buffer, name)[0]) for name in buffer.FIELDS} | {"final_obs": {}}
            for t in range(T):  # COLLECT a segment: T steps of the N envs in lockstep (DEVIATION(1)), with mu
                segment["obs"][t] = torch.as_tensor(obs)
                segment["actions"][t], segment["mu"][t] = agent.act(segment["obs"][t])
                obs, rewards, terminations, truncations, infos = run.envs.step(segment["actions"][t].cpu().numpy())
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


# VALIDATION AND ATARI OBSERVATIONS
# ------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for this script's out-of-range or contradictory flags."""
    segment = args.num_envs * args.num_steps
    check(
        [
            (
                args.total_timesteps < segment,
                f"--total-timesteps must be at least --num-envs x --num-steps = {segment}",
            ),
            (args.buffer_size < segment, f"--buffer-size must be at least --num-envs x --num-steps = {segment}"),
            *(
                (not getattr(args, name) >= 0, f"--{name.replace('_', '-')} must be non-negative")
                for name in ("replay_ratio", "replay_start", "q_coef", "ent_coef")
            ),
            (
                args.replay_ratio > 0 and args.replay_start > args.buffer_size // segment * segment,
                f"--replay-start "
                f"{args.replay_start} exceeds the {args.buffer_size // segment * segment} transitions --buffer-size "
                "holds: lower it",
            ),
            *(
                (not getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive")
                for name in ("num_steps", "learning_rate", "truncation_c", "max_kl", "max_grad_norm", "optimizer_eps")
            ),
            (not (0 < args.gamma <= 1 and 0 <= args.avg_decay < 1), "--gamma must be in (0, 1], --avg-decay in [0, 1)"),
            (not 0 <= args.rms_alpha < 1, "--rms-alpha must lie in [0, 1)"),
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
    if not (args.env_id.startswith("ALE/") or "NoFrameskip" in args.env_id):
        return make()
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    env = make(**({"frameskip": 1} if args.env_id.startswith("ALE/") else {}))  # AtariWrapper's MaxAndSkip skips
    env = gym.wrappers.TransformObservation(AtariWrapper(env), np.squeeze, gym.spaces.Box(0, 255, (84, 84), np.uint8))
    return gym.wrappers.FrameStackObservation(env, 4)  # pads a new episode with its first frame


# COMMON BLOCK: the same text in all six scripts (tests/test_common_block.py compares it); a reader
# may stop here =====
EVAL_SEED_OFFSET = 1_000_000  # evaluation episode k is reset with seed + EVAL_SEED_OFFSET + k


class ConfigError(Exception):
    """A bad flag, env or checkpoint, a failed save or a diverged run: `cli` prints one line and
    exits with code 2."""


def check(problems) -> None:
    """Raise ConfigError with the message of the first (bad, message) pair that is bad."""
    if messages := [message for bad, message in problems if bad]:
        raise ConfigError(messages[0])


def crossed(before: int, now: int, every: int) -> bool:
    """True when a multiple of `every` lies in (before, now]."""
    return every > 0 and now // every > before // every


def make_env(args, video_dir: str | None = None, wrap=None):
    """A thunk making args.env_id with episode statistics (and a video_dir's first episode), through
    `wrap(args, make)` where the script passes its observation wrappers."""

    def make(**kwargs):  # gym.make(env_id, **kwargs), its first episode's video, its statistics
        kwargs.update({"render_mode": "rgb_array"} if video_dir is not None else {})
        if args.env_id.startswith("ALE/") or "NoFrameskip" in args.env_id:  # ale_py registers these ids on import
            ale_py = importlib.import_module("ale_py")
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # its banner would precede errors
            gym.register_envs(ale_py)
        env = gym.make(args.env_id, **{**parse_env_kwargs(args.env_kwargs), **kwargs})
        if video_dir:
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda k: k == 0, disable_logger=True)
        return gym.wrappers.RecordEpisodeStatistics(env)

    return lambda: wrap(args, make) if wrap else make()


def parse_env_kwargs(pairs: tuple) -> dict:
    """--env-kwargs KEY:VALUE ... as gym.make's keywords: each VALUE a Python literal (True, 3, 0.5,
    'a', [1, 2]) or else the string itself."""
    kwargs = {}
    for pair in pairs:
        key, colon, value = pair.partition(":")
        check([(not (colon and key.isidentifier()), f"--env-kwargs {pair}: write KEY:VALUE, such as image_obs:True")])
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):  # not a literal: the string
            kwargs[key] = value
    return kwargs


def remade(obj) -> bool:
    """Whether `unpickle_envs` makes `obj` anew, not unpickling it: an EzPickle env (MuJoCo's,
    Atari's), whose constructor arguments gymnasium records shifted for some, or a base env that
    cannot be pickled (a renderer's pointers, as gym-hil's hold)."""
    if not isinstance(obj, gym.Env):
        return False
    if isinstance(obj, gym.utils.EzPickle):
        return True
    try:  # a base env is pickled whole where it can be
        return obj is obj.unwrapped and not pickle.dumps(obj)
    except Exception:
        return True


def pickle_envs(envs: list, states: list) -> bytes:
    """The sub-envs beside their simulator states, those `remade` by reference: Run.__init__
    restores an EzPickle env's state; another's episode starts anew (its state is not kept)."""
    states = [
        (rng, state if isinstance(env.unwrapped, gym.utils.EzPickle) or not remade(env.unwrapped) else None)
        for env, (rng, state) in zip(envs, states)
    ]
    (pickler := pickle.Pickler(out := io.BytesIO())).persistent_id = lambda obj: "env" if remade(obj) else None
    pickler.dump((envs, states))
    return out.getvalue()


def unpickle_envs(data: bytes, args, wrap=None, make: bool = True) -> tuple:
    """pickle_envs' (envs, states), each EzPickle env made by make_env (make=False: not made, to
    check the rest)."""
    unpickler = pickle.Unpickler(io.BytesIO(data))
    unpickler.persistent_load = lambda i: make and make_env(args, None, wrap)().unwrapped
    return unpickler.load()


def final_observations(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The true s_{t+1}, key by key for Dict observations: SAME_STEP autoreset puts an ended
    sub-env's reset in next_obs."""
    real_next_obs = {key: x.copy() for key, x in next_obs.items()} if isinstance(next_obs, dict) else next_obs.copy()
    for i in np.flatnonzero(infos.get("_final_obs", [])):
        finals = infos["final_obs"][i].items() if isinstance(next_obs, dict) else [(..., infos["final_obs"][i])]
        for key, final in finals:
            real_next_obs[key][i] = final
    return real_next_obs


def setup(args, wrap=None):
    """Before anything is written: --resume's checkpoint (its flags win), checks, seeds and the
    device; `wrap`: the script's observation wrappers, as make_env takes them."""
    checkpoint = None
    if args.resume:
        check([(not os.path.isfile(args.resume), f"--resume {args.resume}: no such file; pass a run's checkpoint.pt")])
        try:  # weights_only=False: the checkpoint holds pickled environments; resume only from checkpoints you wrote
            checkpoint = torch.load(args.resume, map_location="cpu", weights_only=False)
        except Exception as e:  # a truncated zip or no torch file at all
            raise ConfigError(
                f"--resume {args.resume}: not a readable checkpoint ({type(e).__name__}); pass a "
                "checkpoint.pt written by --checkpoint-freq or on SIGINT/SIGTERM"
            ) from None
        own = os.path.basename(__file__)
        written_by = isinstance(checkpoint, dict) and checkpoint.get("script")
        check(
            [
                (
                    isinstance(checkpoint, dict) and "args" in checkpoint and "counters" not in checkpoint,
                    f"--resume "
                    f"{args.resume}: a model.pt (the trained networks), not a checkpoint; pass the run's checkpoint.pt",
                ),
                (
                    written_by and written_by != own,
                    f"--resume {args.resume}: a checkpoint of {written_by}; resume it with {written_by}",
                ),
            ]
        )
        finished = os.path.join(os.path.dirname(args.resume), "finished")  # written by Run.finish
        if os.path.isfile(finished) and not args.resume_anyway:
            raise ConfigError(
                f"--resume {args.resume}: that run {open(finished).read().strip()}, and resuming drops "
                "what it logged since: add --resume-anyway to do so"
            )
        try:
            args = Args(**{**checkpoint["args"], "resume": args.resume})
            unpickle_envs(checkpoint["envs"], args, wrap, make=False)
        except Exception as e:  # another script's flags or envs, a foreign pickle or missing keys
            raise ConfigError(
                f"--resume {args.resume}: not a checkpoint of {own} ({type(e).__name__}); pass a "
                "checkpoint.pt this script wrote, by --checkpoint-freq or on SIGINT/SIGTERM"
            ) from None
    check(
        [
            (not math.isfinite(value), f"--{key.replace('_', '-')} must be finite, not {value}")
            for key, value in asdict(args).items()
            if isinstance(value, float)
        ]
    )
    check(
        [
            (not 0 <= args.seed < 2**32, f"--seed must lie in [0, 2**32 - 1], not {args.seed}"),
            (
                min(args.num_envs, args.eval_episodes, args.log_freq) < 1,
                "--num-envs, --eval-episodes and --log-freq must be at least 1",
            ),
            (0 < args.total_timesteps < args.num_envs, "--total-timesteps must be 0 or at least --num-envs"),
            (min(args.eval_freq, args.checkpoint_freq) < 0, "--eval-freq and --checkpoint-freq must be non-negative"),
            (
                args.capture_video and not importlib.util.find_spec("moviepy"),
                "--capture-video needs `pip install moviepy`",
            ),
        ]
    )
    check_args(args)
    if args.capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering; read when mujoco is first imported
        __import__("torch._dynamo")  # CUDA wheels' triton segfaults when first loaded after MuJoCo's EGL context
    try:  # the env, and for --capture-video a frame, which would otherwise fail at the first evaluation
        with warnings.catch_warnings():  # a library's warnings would come before the one line of an error
            warnings.simplefilter("ignore")
            env = make_env(args, "" if args.capture_video else None, wrap)()
            env.reset(seed=0)
            frame = env.render() if args.capture_video else None
    except gym.error.DependencyNotInstalled as e:  # gymnasium's message says what to install
        raise ConfigError(f"{args.env_id} needs a package that is not installed: {e}") from None
    except Exception as e:  # an unknown id, a missing package or renderer: one line, whatever the library raised
        raise (
            e
            if isinstance(e, ConfigError)
            else ConfigError(  # a ConfigError names the flag to change
                f"{args.env_id} cannot be made ({type(e).__name__}: {e}): an unknown env id (see "
                "gymnasium.pprint_registry()), an --env-kwargs key it does not take, or a missing extra "
                "or (--capture-video, --from-pixels) MuJoCo renderer?"
            )
        ) from None
    check([(args.capture_video and frame is None, f"--capture-video: {args.env_id} renders no frames")])
    check_spaces(args.env_id, env.observation_space, env.action_space)
    env.close()
    for seed in (random.seed, np.random.seed, torch.manual_seed):
        seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    compiler = device.type != "cpu" or shutil.which(os.environ.get("CXX", "g++"))  # torch.compile's on the CPU
    check([(args.compile and not compiler, "--compile needs a C++ compiler (g++, or $CXX): install one, or drop it")])
    if args.compile:  # compiled code draws its random numbers from torch's generator, as eager code does
        importlib.import_module("torch._inductor.config").fallback_random = True
        notes = {  # torch's own notes, which ask nothing of the user
            "torch._dynamo.variables.ctx_manager": "Profiler record function",  # the optimizer's profiling
            "torch.utils.cpp_extension": "No CUDA runtime is found",  # a CUDA build of torch on a CPU machine
        }
        for logger, note in notes.items():
            logging.getLogger(logger).addFilter(lambda record, note=note: note not in record.getMessage())
    return args, checkpoint, device


def at_step(args, counters: tuple) -> str:
    """Where a run stands, for its stop and resume lines: its env step (a script may pass Run its
    own)."""
    return f"at step {counters[0]:,}"


class Run:
    """A run's envs, directory, TensorBoard writer, signal handling, progress line, evaluations and
    checkpoints."""

    def __init__(self, args, checkpoint: dict | None, device, memory_flags: str, wrap=None, at=at_step):
        self.args, self.checkpoint, self.device = args, checkpoint, device
        self.at = at  # at(args, counters): where the run stands, for its stop and resume lines
        self.memory_flags = memory_flags  # the flags that size what a training step allocates
        self.wrap = wrap  # the script's observation wrappers, as make_env takes them
        safe = re.sub(r"[^\w.+-]", "-", f"{args.env_id}__{args.exp_name}", flags=re.ASCII)  # a file name anywhere
        self.name = checkpoint["run_name"] if checkpoint else f"{safe}__{args.seed}__{int(time.time())}"
        self.dir = os.path.dirname(os.path.abspath(args.resume)) if checkpoint else f"runs/{self.name}"
        check(
            [
                (
                    len(self.name.encode()) > 255,
                    f"the run name {self.name[:40]}... is longer than a file name may be "
                    "(255 bytes): shorten --exp-name",
                )
            ]
        )
        saved = checkpoint and unpickle_envs(checkpoint["envs"], args, wrap)  # the sub-envs, their RNG and state
        for env, (np_random, state) in zip(*saved) if saved else []:
            env.unwrapped.np_random = np_random
            if hasattr(env.unwrapped, "ale"):
                env.unwrapped.ale.restoreState(state)
            elif state is not None:  # after make_env's first frame, which aims the camera, as in the saved run
                __import__("mujoco").mj_copyData(env.unwrapped.data, env.unwrapped.model, state)
        thunks = [lambda env=env: env for env in saved[0]] if saved else [make_env(args, None, wrap)] * args.num_envs
        # SAME_STEP autoreset: a step that ends an episode returns the reset observation, the final
        # one in infos
        self.envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.exact = saved and all(
            state is not None or not remade(env.unwrapped) for env, (_, state) in zip(*saved)
        )  # else make_env made a new env
        self.last_return = checkpoint["last_return"] if checkpoint else None
        self.eval_return, self.eval_step, self.stop_signal = None, None, []
        self.progress = False  # a progress line is on the terminal, not yet ended by a newline
        self.handlers = {
            sig: signal.signal(sig, lambda signum, frame: self.stop_signal.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)
        }

    def resume(self, stateful: dict, counters: tuple):
        """(counters, obs): these counters and a first observation, or the checkpoint's, its
        `stateful` loaded."""
        self.stateful, checkpoint, obs = stateful, self.checkpoint, None
        try:  # the run directory, made now that main() has built all it needs: a failure before leaves nothing on disk
            os.makedirs(self.dir, exist_ok=True)
            check([(not os.access(self.dir, os.W_OK | os.X_OK), f"{self.dir} is not writable: run from elsewhere")])
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{self.dir}/finished")  # a finished run resumed with --resume-anyway: running again
        except OSError as e:
            raise ConfigError(
                f"cannot make the run directory {self.dir} ({e.strerror}): is runs/ a file, or "
                "read-only? nothing is written"
            ) from None
        # purge_step drops what a killed run logged after its last checkpoint
        self.writer = SummaryWriter(self.dir, purge_step=checkpoint["counters"][0] + 1 if checkpoint else None)
        self.writer.add_text("hyperparameters", "\n".join(f"|{k}|{v}|" for k, v in asdict(self.args).items()))
        if checkpoint:
            for key, obj in stateful.items():
                if isinstance(obj, torch.Tensor):
                    obj.data.copy_(checkpoint[key])
                else:
                    obj.load_state_dict(checkpoint[key])
            setters = torch.set_rng_state, np.random.set_state, random.setstate, torch.cuda.set_rng_state_all
            for set_state, state in zip(setters, checkpoint["rng"][: 3 + (self.device.type == "cuda")]):
                set_state(state)
            counters, obs = checkpoint["counters"], checkpoint["obs"] if self.exact else None
            print(f"resumed {self.dir} {self.at(self.args, counters)}" + ("" if self.exact else "; new episodes start"))
        self.last_log = time.time(), counters[0]
        return counters, self.envs.reset(seed=self.args.seed + counters[0])[0] if obs is None else obs

    def save_checkpoint(self, counters: tuple, obs) -> str:
        """runs/<run_name>/checkpoint.pt, written atomically; the sub-envs beside their RNG and
        simulator state."""
        states = [
            (
                env.unwrapped.np_random,
                env.unwrapped.ale.cloneState(include_rng=True)
                if hasattr(env.unwrapped, "ale")
                else getattr(env.unwrapped, "data", None),
            )
            for env in self.envs.envs
        ]
        state = {
            key: obj.detach().cpu() if isinstance(obj, torch.Tensor) else obj.state_dict()
            for key, obj in self.stateful.items()
        }
        rng = torch.get_rng_state(), np.random.get_state(), random.getstate()
        state.update(
            script=os.path.basename(__file__),
            args=asdict(self.args),
            run_name=self.name,
            counters=counters,
            obs=obs,
            last_return=self.last_return,
            rng=(*rng, torch.cuda.get_rng_state_all() if self.device.type == "cuda" else []),
            envs=pickle_envs(self.envs.envs, states),
        )
        return self.save(state, "checkpoint.pt", counters[0], "the previous checkpoint, if any, is kept")

    def save(self, obj, name: str, global_step: int, kept: str) -> str:
        """`obj` (bytes, a function that writes a file, or by torch.save) to runs/<run_name>/<name>
        (or an absolute name) durably, via a temporary file fsynced and renamed, unless the NaN
        guard finds non-finite parameters."""
        bad = [
            key
            for key, net in self.stateful.items()
            if isinstance(net, nn.Module) and not all(p.isfinite().all() for p in net.parameters())
        ]
        check(
            [
                (
                    bad,
                    f"step {global_step:,}: the run diverged, {', '.join(bad)} holds non-finite values; nothing is "
                    f"saved and {kept}: lower the learning rates",
                )
            ]
        )
        path = os.path.join(self.dir, name)
        try:
            with open(f"{path}.tmp", "wb") as f:
                obj(f) if callable(obj) else f.write(obj) if isinstance(obj, bytes) else torch.save(obj, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(f"{path}.tmp", path)
            os.fsync(directory := os.open(os.path.dirname(path), os.O_RDONLY))
            os.close(directory)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(f"{path}.tmp")
            raise ConfigError(f"cannot write {path} ({e.strerror or e}); {kept}") from None
        return path

    def log(self, infos: dict, metrics: dict | None, previous_step: int, global_step: int) -> None:
        """Ended episodes; every --log-freq steps `metrics` (0-d tensors, one sync; non-finite stops
        the run), SPS and the progress line."""
        for i in np.flatnonzero(infos.get("final_info", {}).get("_episode", [])):
            self.last_return = float(infos["final_info"]["episode"]["r"][i])
            self.writer.add_scalar("charts/episodic_return", self.last_return, global_step)
            self.writer.add_scalar("charts/episodic_length", int(infos["final_info"]["episode"]["l"][i]), global_step)
        if metrics and crossed(previous_step, global_step, self.args.log_freq):
            values = dict(zip(metrics, torch.stack([v.float() for v in metrics.values()]).tolist()))
            diverged = [f"{key} is {value}" for key, value in values.items() if not math.isfinite(value)]
            check(
                [
                    (
                        diverged,
                        f"step {global_step:,}: the run diverged, {', '.join(diverged)}; nothing is saved and "
                        "the last checkpoint, if any, is kept: lower the learning rates",
                    )
                ]
            )
            for key, value in values.items():
                self.writer.add_scalar(f"losses/{key}", value, global_step)
            (then, step), self.last_log = self.last_log, (time.time(), global_step)
            sps = int((global_step - step) / max(self.last_log[0] - then, 1e-6))  # since the last write
            self.writer.add_scalar("charts/SPS", sps, global_step)
            last = "-" if self.last_return is None else f"{self.last_return:.2f}"
            print(f"\rstep {global_step:,}  SPS {sps}  last return {last}".ljust(60), end="", flush=True)
            self.progress = True

    def evaluate(self, policy, global_step: int) -> None:
        """eval/episodic_return: the mean return of `policy` (numpy in and out, no torch RNG) over
        real episodes."""
        video_dir = f"{self.dir}/videos/step_{global_step}" if self.args.capture_video else None
        env, returns = make_env(self.args, video_dir, self.wrap)(), []
        for k in range(self.args.eval_episodes):
            obs, info = env.reset(seed=self.args.seed + EVAL_SEED_OFFSET + k)
            while "episode" not in info:  # the real episode's end: RecordEpisodeStatistics sits below EpisodicLife
                with torch.no_grad():
                    batch = {key: x[None] for key, x in obs.items()} if isinstance(obs, dict) else obs[None]
                    obs, _, terminated, truncated, info = env.step(policy(batch)[0])
                if (terminated or truncated) and "episode" not in info:  # a life lost under EpisodicLife: play on
                    obs, _ = env.reset()
            returns.append(float(info["episode"]["r"]))
        env.close()
        self.eval_return, self.eval_step = float(np.mean(returns)), global_step
        self.writer.add_scalar("eval/episodic_return", self.eval_return, global_step)
        print(f"\nstep {global_step:,}: eval/episodic_return {self.eval_return:.2f}")
        self.progress = False

    def after_step(self, previous_step: int, counters: tuple, obs, policy) -> None:
        """Evaluate and checkpoint where their intervals were crossed."""
        if crossed(previous_step, counters[0], self.args.eval_freq):
            self.evaluate(policy, counters[0])
        if crossed(previous_step, counters[0], self.args.checkpoint_freq):
            self.save_checkpoint(counters, obs)

    def finish(self, counters: tuple, obs, policy, model: dict) -> dict:
        """On a signal a checkpoint and the command to continue; else the last evaluation,
        --save-model and `finished`."""
        if stopped := self.stop_signal[:1]:  # a signal in the final evaluation below comes too late: the run finishes
            path = self.save_checkpoint(counters, obs)
            command = shlex.join(["python", os.path.abspath(__file__), "--resume", os.path.abspath(path)])
            print(
                f"\nstopped by signal {self.stop_signal[0]} {self.at(self.args, counters)}; checkpoint written to "
                f"{path}; continue with:\n{command}"
            )
        else:
            if self.eval_step != counters[0]:
                self.evaluate(policy, counters[0])
            print(f"step {counters[0]:,}: final eval/episodic_return {self.eval_return:.2f}")
            if self.args.save_model:
                self.save({**model, "args": asdict(self.args)}, "model.pt", counters[0], "no model.pt is written")
                print(f"model saved to {self.dir}/model.pt")
            self.save(f"finished at step {counters[0]:,}\n".encode(), "finished", counters[0], "its checkpoint is kept")
        return {
            "run_dir": self.dir,
            "global_step": counters[0],
            "eval_return": self.eval_return,
            "stopped_by": stopped[0] if stopped else None,
        }

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb) -> None:
        """Close the run; torch's failure to allocate memory (CPU or CUDA) becomes a ConfigError
        naming the flags to lower: --buffer-size before the run directory is made (the buffers),
        `memory_flags` after it (a training step), with the traceback printed first, for the run's
        log."""
        self.close()
        if error is not None and self.progress:  # the error's line starts a line of its own
            print(flush=True)
        if not (isinstance(error, RuntimeError) and "allocate" in str(error)):
            return
        if not hasattr(self, "writer"):
            raise ConfigError(f"too little memory for these flags ({error}): lower --buffer-size") from None
        traceback.print_exception(error)
        first_line = str(error).splitlines()[0]
        raise ConfigError(f"out of memory in training ({first_line}): lower {self.memory_flags}") from None

    def close(self) -> None:
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler)
        self.envs.close()
        if hasattr(self, "writer"):  # none where main() failed before resume(): nothing was written
            self.writer.close()


def flag_error(box: str, argv: list) -> str:
    """The line for a flag tyro cannot parse, read from its error box: the flag, the value given and
    what the flag takes; only the command where the box names no flag of argv."""
    text = " ".join(re.sub("[\u2500-\u257f]", " ", box).split())  # the box's frame drawn out
    flags = [arg.split("=")[0] for arg in argv if arg.startswith("--")]
    named = [flag for flag in flags if re.search(re.escape(flag) + r"(?![\w-])", text)]
    if not named:
        return f"a flag's value is missing or does not parse in `{' '.join(argv)}`; see --help"
    flag = named[-1]
    if "Missing value" in text:
        return f"{flag} needs a value; see --help"
    given = [value for arg, value in zip(argv, argv[1:]) if arg == flag]
    given += [arg.partition("=")[2] for arg in argv if arg.startswith(flag + "=")]
    takes = "its type"
    helptext = re.search(re.escape(flag) + r" (\S+) ", text)  # "Argument helptext: --seed INT ..."
    if helptext:
        takes = helptext.group(1)
    choices = re.search(r"Expected (one of \(.*?\))", text)  # a Literal's values
    if choices:
        takes = choices.group(1)
    return f"{flag} {given[-1]!r} does not parse as {takes}; see --help"


def cli(argv=None) -> dict:
    """Command line: bad input ends in one line on stderr and exit code 2; a stop by a signal exits
    with 128 + signum."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # tyro's error box is silenced and replaced by one line; --help prints as usual
        stderr = io.StringIO()
        with contextlib.redirect_stderr(sys.stderr if {"-h", "--help"} & set(argv) else stderr):
            args, unknown = tyro.cli(Args, args=argv, return_unknown_args=True, description=__doc__.split("\n\n")[0])
        check([(unknown, f"unrecognized flag {' '.join(unknown)} in `{' '.join(argv)}`; see --help")])
        summary = main(args)
    except (SystemExit, ConfigError) as e:  # bad input: one line on stderr, whatever it says, exit code 2
        if isinstance(e, SystemExit) and not e.code:
            raise  # --help
        message = str(e) if isinstance(e, ConfigError) else flag_error(stderr.getvalue(), argv)
        print("error: " + " ".join(message.split()), file=sys.stderr)
        raise SystemExit(2) from None
    if summary["stopped_by"]:
        raise SystemExit(128 + summary["stopped_by"])
    return summary


if __name__ == "__main__":
    cli()
