"""Soft Actor-Critic for discrete actions (SAC-discrete): Atari from pixels, and flat-observation
Discrete envs.

Papers:
    Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings", arXiv:1910.07207
    Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (automatic alpha),
        arXiv:1812.05905
    Mnih et al. 2015, "Human-level control through deep reinforcement learning" (NatureCNN, Atari
        preprocessing)

Example:
    python sac_atari.py --env-id BreakoutNoFrameskip-v4 --seed 1

Deviations from the papers and from CleanRL (each marked `# DEVIATION(n)` in the code):
    1. The actor and alpha losses sum over actions (eq. 12, 11's expectations); CleanRL averages,
       dividing both by |A|.
    2. The target entropy is 0.89 * log|A| (CleanRL, more stable past 100k steps); the paper uses
       0.98 * log|A|.
    3. Every `update_frequency` env steps an update, every `target_network_frequency` a target copy
       (Table 1; Alg. 1: Polyak).
    4. The critic loss is the plain mean squared error summed over the two critics, without the 1/2
       (as CleanRL).
    5. Training starts with `learning_starts` env steps of uniformly random actions (Table 1,
       CleanRL; not in Alg. 1).
    6. The replay buffer stores each frame once (CleanRL's SB3 buffer: 8 per transition) and
       rebuilds stacks exactly.
    7. The actor's loss takes the min of the two critics where eq. 12 has one Q (CleanRL; SAC-v2's
       actor).
    8. The temperature loss reuses the actor step's pi(a|s), computed before the actor moved
       (CleanRL), not after its step. Its step is by log alpha's own Adam (CleanRL's): the steps log
       alpha takes as a parameter group of the actor's Adam, bit for bit (Adam's state and step are
       per tensor, and the two losses share no parameter), but an edit of the actor's optimizer
       (AdamW's weight decay) leaves log alpha be.
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
from dataclasses import asdict, dataclass

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

    env_id: str = "BreakoutNoFrameskip-v4"
    """env to train on: an Atari id (*NoFrameskip-v4, ALE/*-v5) or any with Discrete actions and 1-D
    observations"""
    total_timesteps: int = 5_000_000
    """environment steps to train for, counted over all --num-envs environments together
    (CleanRL)"""
    num_envs: int = 1
    """number of environments stepped in lockstep in one process (gymnasium's SyncVectorEnv)"""
    eval_freq: int = 100_000
    """evaluate the policy without exploration noise every this many env steps, and at the end (0:
    only at the end)"""
    log_freq: int = 100
    """write the losses to TensorBoard every this many env steps"""
    buffer_size: int = 1_000_000
    """replay slots: one per transition and one more per episode end, the oldest overwritten first
    (CleanRL: 1M)"""
    checkpoint_buffer: bool = True
    """save the replay buffer in checkpoints (7 GB at 1M Atari frames); if not, a resumed run
    refills it first"""
    gamma: float = 0.99
    """discount factor of future rewards (gamma; arXiv:1910.07207, Table 1)"""
    tau: float = 1.0
    """how far the target critics move toward the trained ones at each target update; 1.0 copies
    them (tau; CleanRL)"""
    batch_size: int = 64
    """transitions sampled from the replay buffer for each update (arXiv:1910.07207, Table 1)"""
    learning_starts: int = 20_000
    """env steps of uniformly random actions before the first update (arXiv:1910.07207, Table 1;
    CleanRL)"""
    policy_lr: float = 3e-4
    """learning rate of the actor's Adam (arXiv:1910.07207, Table 1)"""
    q_lr: float = 3e-4
    """learning rate of the critics' Adam and of the entropy temperature alpha's (arXiv:1910.07207,
    Table 1)"""
    optimizer_eps: float = 1e-4
    """Adam's epsilon, the constant added to its step's denominator (CleanRL: steadier than 1e-8 on
    Atari)"""
    update_frequency: int = 4
    """update the critics, the actor and alpha once every this many env steps (arXiv:1910.07207,
    Table 1; CleanRL)"""
    target_network_frequency: int = 8_000
    """update the target critics every this many env steps (arXiv:1910.07207, Table 1; CleanRL)"""
    alpha: float = 0.2
    """entropy temperature, the weight of the policy's entropy in the objective, when --no-autotune
    fixes it (alpha)"""
    autotune: bool = True
    """adjust alpha during training to hold the policy's entropy at a target (arXiv:1910.07207, eq.
    11)"""
    target_entropy_scale: float = 0.89
    """the entropy target is this fraction of log(number of actions), a uniform policy's (CleanRL;
    paper: 0.98)"""


HIDDEN, CNN_FEATURES = 256, 512  # hidden units of the MLP for flat observations, and of NatureCNN's last layer


# PURE MATH
# --------------------------------------------------------------------------------------------------
def discrete_soft_q_target(rewards, terminations, next_probs, next_log_probs, next_q_min, alpha, gamma: float):
    """Soft Bellman target, the expectation over a' exact under pi; rewards, terminations (B,), the
    others (B, |A|). y = r + gamma * (1 - terminated) * sum_a' pi(a'|s') * (min_i Q'_i(s', a') -
    alpha * log pi(a'|s'))   [eq. 9, 10]"""
    return rewards + gamma * (1.0 - terminations) * (next_probs * (next_q_min - alpha * next_log_probs)).sum(dim=1)


def discrete_actor_loss(probs, log_probs, q_min, alpha):
    """J_pi = E_s[sum_a pi(a|s) * (alpha * log pi(a|s) - min_i Q_i(s, a))], all (B, |A|)   [eq. 12;
    DEVIATION(1)]"""
    return (probs * (alpha * log_probs - q_min)).sum(dim=1).mean()


def discrete_alpha_loss(log_alpha, probs, log_probs, target_entropy: float):
    """J(alpha) = E_s[sum_a pi(a|s) * (-alpha * (log pi(a|s) + H-bar))], pi (B, |A|) detached  [eq.
    11; DEVIATION(1)]"""
    return (probs * (-log_alpha.exp() * (log_probs + target_entropy))).sum(dim=1).mean()


# NETWORKS AND REPLAY BUFFER
# -------------------------------------------------------------------------------------------
def layer_init(layer: nn.Module) -> nn.Module:
    """He (Kaiming normal) weights and zero biases (CleanRL's sac_atari.py; He et al. 2015)."""
    nn.init.kaiming_normal_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def network_input(obs: torch.Tensor) -> torch.Tensor:
    """uint8 observations to [0, 1], frames (B, stack, 84, 84) channels-last (faster CPU
    convolutions); others to float32."""
    if obs.dtype != torch.uint8:
        return obs.float()
    layout = torch.channels_last if obs.dim() == 4 else torch.contiguous_format  # 1-D bytes too
    return torch.mul(obs, 1.0 / 255.0, out=torch.empty(obs.shape, device=obs.device, memory_format=layout))


class SoftQNetwork(nn.Module):
    """Q(s, .) (B, |A|): NatureCNN on frame stacks, or a 256-256 MLP on 1-D observations, then a
    linear head."""

    def __init__(self, envs):
        super().__init__()
        shape = envs.single_observation_space.shape
        if len(shape) == 3:
            self.encoder = nn.Sequential(
                layer_init(nn.Conv2d(shape[0], 32, 8, stride=4)),
                nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, CNN_FEATURES)),
                nn.ReLU(),
            )
        else:
            self.encoder = nn.Sequential(
                layer_init(nn.Linear(shape[0], HIDDEN)), nn.ReLU(), layer_init(nn.Linear(HIDDEN, HIDDEN)), nn.ReLU()
            )
        self.head = layer_init(nn.Linear(self.encoder[-2].out_features, int(envs.single_action_space.n)))
        self.to(memory_format=torch.channels_last)  # convolution weights in the layout of `network_input`

    def forward(self, obs):  # raw observations, or `network_input`'s (the update scales a batch once for all networks)
        return self.head(self.encoder(network_input(obs)))


class Actor(SoftQNetwork):
    """Categorical policy, the critics' network with logits as outputs; CleanRL's interface:
    forward, get_action."""

    def get_action(self, obs):
        """Returns (action (B,), log pi(.|s) (B, |A|), pi(.|s) (B, |A|)); log_softmax, never
        log(softmax)."""
        logits = self(obs)
        log_probs = logits.log_softmax(1)
        # nan_to_num: a diverged actor acts until the NaN guard stops the run, rather than
        # Categorical raising
        return torch.distributions.Categorical(logits=logits.nan_to_num()).sample(), log_probs, log_probs.exp()


class ReplayBuffer:
    """Each frame once (DEVIATION(6)), on the CPU, in a circular stream of slots per sub-env: a
    transition's slot holds its newest frame, action, reward and termination, the next slot its s'
    (an episode's end writes two: final, reset). Slot k's stack, rebuilt when sampling, is slots
    k-stack+1..k, padded with the episode's first as FrameStack pads."""

    FIELDS = ("frames", "actions", "rewards", "terminations", "age", "valid")  # per slot (num_envs, slots, ...)

    def __init__(self, capacity: int, num_envs: int, obs_space: gym.spaces.Box, device):
        self.stack = obs_space.shape[0] if len(obs_space.shape) == 3 else 1
        self.slots, self.num_envs, self.device = -(-capacity // num_envs), num_envs, device  # ceil(capacity / envs)
        shape, dtype = (num_envs, self.slots), torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        # torch.empty commits memory as frames arrive (not 7 GB at once); `size` and `valid` keep
        # unwritten slots unread
        self.frames = torch.empty(shape + (obs_space.shape[1:] if self.stack > 1 else obs_space.shape), dtype=dtype)
        self.actions = torch.zeros(shape, dtype=torch.long)
        self.rewards, self.terminations = torch.zeros(shape), torch.zeros(shape)
        self.age = torch.zeros(shape, dtype=torch.long)  # slots since the episode's first, up to `stack`
        self.valid = torch.zeros(shape, dtype=torch.bool)  # a transition leaves the slot and its s' is stored
        self.pos, self.size = np.zeros(num_envs, dtype=np.int64), np.zeros(num_envs, dtype=np.int64)
        self.transitions = 0  # since the buffer was created or restored: a run resumed without it refills it first

    def start(self, obs, envs=None, first: bool = True):
        """Write obs (num_envs, *obs_shape) to the next slot of each stream (or of streams `envs`);
        first: reset obs."""
        for env in range(self.num_envs) if envs is None else envs:
            p, frame = self.pos[env], (obs[env][-1] if self.stack > 1 else obs[env])  # the newest frame of a stack
            self.frames[env, p], self.valid[env, p] = torch.as_tensor(frame), False
            self.age[env, p] = 0 if first else min(int(self.age[env, p - 1]) + 1, self.stack)  # p - 1 = -1 wraps around
            self.pos[env], self.size[env] = (p + 1) % self.slots, min(self.size[env] + 1, self.slots)

    def add(self, actions, rewards, real_next_obs, terminations, dones, next_obs):
        """Complete each stream's newest slot's transition with s'; where `dones`, start a new
        episode with next_obs."""
        for env in range(self.num_envs):
            p = (self.pos[env] - 1) % self.slots
            self.actions[env, p], self.rewards[env, p] = int(actions[env]), float(rewards[env])
            self.terminations[env, p], self.valid[env, p] = float(terminations[env]), True
        self.start(real_next_obs, first=False)
        self.start(next_obs, np.flatnonzero(dones))
        self.transitions += self.num_envs

    def observations(self, env, slot):
        """The observations (B, *obs_shape) of slots `slot` (B,) of streams `env` (B,), their stacks
        padded as above."""
        back = torch.minimum(torch.arange(self.stack - 1, -1, -1), self.age[env, slot][:, None])  # (B, stack)
        frames = self.frames[env[:, None], (slot[:, None] - back) % self.slots]
        return frames if self.stack > 1 else frames[:, 0]

    def sample(self, batch_size: int):
        """(obs, actions, rewards, next_obs, terminations) of `batch_size` stored transitions,
        uniform, on `device`."""
        env, slot = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        wrapped, pos = torch.as_tensor(self.size == self.slots), torch.as_tensor(self.pos)
        while len(env) < batch_size:  # by rejection: redraw slots with no transition or a stack on overwritten slots
            e = torch.randint(0, self.num_envs, (2 * batch_size,))
            s = torch.randint(0, int(self.size.max()), (2 * batch_size,))
            keep = self.valid[e, s] & ~(wrapped[e] & ((s - pos[e]) % self.slots < self.stack - 1))
            env, slot = torch.cat([env, e[keep]]), torch.cat([slot, s[keep]])
        env, slot = env[:batch_size], slot[:batch_size]
        batch = (
            self.observations(env, slot),
            self.actions[env, slot],
            self.rewards[env, slot],
            self.observations(env, (slot + 1) % self.slots),
            self.terminations[env, slot],
        )
        return tuple(x.to(self.device, non_blocking=True) for x in batch)

    def state_dict(self):  # the slots in use: streams fill from slot 0
        fields = {k: getattr(self, k)[:, : int(self.size.max())].clone() for k in self.FIELDS}
        return {"pos": self.pos.copy(), "size": self.size.copy(), "transitions": self.transitions, **fields}

    def load_state_dict(self, state):
        self.pos, self.size, self.transitions = state["pos"].copy(), state["size"].copy(), state["transitions"]
        for k in self.FIELDS:
            getattr(self, k)[:, : state[k].shape[1]] = state[k]


# LOSSES AND UPDATES
# --------------------------------------------------------------------------------------------------
def compute_loss_q(actor, qf1, qf2, qf1_target, qf2_target, batch, alpha, gamma):
    """J_Q = sum_i E[(Q_i(s, a) - y)^2], y from `discrete_soft_q_target`   [arXiv:1910.07207 eq. 9;
    DEVIATION(4)]."""
    obs, actions, rewards, next_obs, terminations = batch
    with torch.no_grad():
        _, next_log_probs, next_probs = actor.get_action(next_obs)
        next_q_min = torch.min(qf1_target(next_obs), qf2_target(next_obs))
        y = discrete_soft_q_target(rewards, terminations, next_probs, next_log_probs, next_q_min, alpha, gamma)
    q1, q2 = (qf(obs).gather(1, actions[:, None]).squeeze(1) for qf in (qf1, qf2))
    qf1_loss, qf2_loss = nn.functional.mse_loss(q1, y), nn.functional.mse_loss(q2, y)
    metrics = {
        "qf1_values": q1.detach().mean(),
        "qf2_values": q2.detach().mean(),
        "qf1_loss": qf1_loss.detach(),
        "qf2_loss": qf2_loss.detach(),
        "qf_loss": (qf1_loss.detach() + qf2_loss.detach()) / 2,
    }
    return qf1_loss + qf2_loss, metrics


def compute_loss_pi(actor, qf1, qf2, obs, alpha):
    """`discrete_actor_loss` with the critics held fixed, Q their min (DEVIATION(7)); returns (loss,
    probs, log_probs), the last two detached."""
    _, log_probs, probs = actor.get_action(obs)
    with torch.no_grad():
        q_min = torch.min(qf1(obs), qf2(obs))
    return discrete_actor_loss(probs, log_probs, q_min, alpha), probs.detach(), log_probs.detach()


def sac_updates(
    actor, qf1, qf2, qf1_target, qf2_target, log_alpha, q_optimizer, actor_optimizer, alpha_optimizer, args
):
    """update(batch): one critic step, one actor step, then one step of log alpha by its own
    optimizer; returns detached metrics (no host sync)."""
    # H-bar = scale * log|A|, a fraction of the uniform policy's entropy   [arXiv:1910.07207 Sec. 4;
    # DEVIATION(2)]
    target_entropy = args.target_entropy_scale * float(np.log(actor.head.out_features))

    def update(batch):
        batch = (network_input(batch[0]), *batch[1:3], network_input(batch[3]), batch[4])  # once, not per network
        alpha = log_alpha.exp().detach()
        qf_loss, metrics = compute_loss_q(actor, qf1, qf2, qf1_target, qf2_target, batch, alpha, args.gamma)
        q_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        q_optimizer.step()
        actor_loss, probs, log_probs = compute_loss_pi(actor, qf1, qf2, batch[0], alpha)
        metrics.update(actor_loss=actor_loss.detach(), alpha=alpha[0], entropy=-(probs * log_probs).sum(1).mean())
        actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_optimizer.step()
        if args.autotune:  # on pi(.|s) from before the actor's step (DEVIATION(8))
            alpha_loss = discrete_alpha_loss(log_alpha, probs, log_probs, target_entropy)
            alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            alpha_optimizer.step()
            metrics["alpha_loss"] = alpha_loss.detach()
        return metrics

    return update


# MAIN
# --------------------------------------------------------------------------------------------------
def main(args: Args) -> dict:
    """Train; returns a summary. Raises ConfigError, before writing anything, on bad flags, envs or
    checkpoints."""
    args, checkpoint, device = setup(args, check_args, check_spaces, observation_wrappers)
    with Run(args, checkpoint, device, "--buffer-size or --batch-size", observation_wrappers) as run:
        actor = Actor(run.envs).to(device)
        qf1, qf2, qf1_target, qf2_target = (SoftQNetwork(run.envs).to(device) for _ in range(4))
        for target, source in ((qf1_target, qf1), (qf2_target, qf2)):
            target.requires_grad_(False).load_state_dict(source.state_dict())
        q_params = [*qf1.parameters(), *qf2.parameters()]
        # fused: one Adam kernel for all tensors
        q_optimizer = torch.optim.Adam(q_params, lr=args.q_lr, eps=args.optimizer_eps, fused=True)
        actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr, eps=args.optimizer_eps, fused=True)
        fixed_log_alpha = float(np.log(args.alpha)) if args.alpha > 0 else -math.inf  # --no-autotune
        log_alpha = torch.full((1,), 0.0 if args.autotune else fixed_log_alpha, device=device, requires_grad=True)
        alpha_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr, eps=args.optimizer_eps, fused=True)  # its own
        rb = ReplayBuffer(args.buffer_size, args.num_envs, run.envs.single_observation_space, device)
        stateful = dict(
            actor=actor,
            qf1=qf1,
            qf2=qf2,
            qf1_target=qf1_target,
            qf2_target=qf2_target,
            q_optimizer=q_optimizer,
            actor_optimizer=actor_optimizer,
            alpha_optimizer=alpha_optimizer,
            log_alpha=log_alpha,
        )

        def policy(obs):  # the greedy action argmax_a pi(a|s), for evaluation
            return actor(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()

        stateful |= {"rb": rb} if args.checkpoint_buffer else {}
        (global_step, updates), obs = run.resume(stateful, (0, 0), policy)
        for i in range(rb.stack) if not (run.exact and args.checkpoint_buffer) else ():  # a fresh stream: each frame
            rb.start(obs[:, : i + 1] if rb.stack > 1 else obs, first=i == 0)  # of the first stack, oldest first
        update = sac_updates(
            actor, qf1, qf2, qf1_target, qf2_target, log_alpha, q_optimizer, actor_optimizer, alpha_optimizer, args
        )
        if args.compile:  # the same function, compiled
            update = compiled(update)

        metrics = {}
        while global_step + args.num_envs <= args.total_timesteps and not run.stop_signal:
            # COLLECT: random actions for the first learning_starts steps (DEVIATION(5)), then a ~
            # pi(.|s)
            if global_step < args.learning_starts:
                actions = torch.randint(0, actor.head.out_features, (args.num_envs,), device=device).cpu().numpy()
            else:
                with torch.no_grad():
                    actions = actor.get_action(torch.as_tensor(obs, device=device))[0].cpu().numpy()
            next_obs, rewards, terminations, truncations, infos = run.envs.step(actions)
            check_rewards(rewards, actions, args.env_id, global_step)
            previous_step, global_step = global_step, global_step + args.num_envs

            # STORE the true final s': bootstrap through truncations, never terminations; no
            # transition spans a reset
            real_next_obs = final_observations(next_obs, infos)
            rb.add(actions, rewards, real_next_obs, terminations, terminations | truncations, next_obs)
            obs = next_obs

            # UPDATE every update_frequency env steps (DEVIATION(3)) once the buffer holds
            # learning_starts transitions
            if rb.transitions >= args.learning_starts:
                for _ in range(global_step // args.update_frequency - previous_step // args.update_frequency):
                    metrics = update(rb.sample(args.batch_size))
                    updates += 1
                if crossed(previous_step, global_step, args.target_network_frequency):
                    with torch.no_grad():  # theta' <- tau * theta + (1 - tau) * theta'; tau = 1 copies   [DEVIATION(3)]
                        torch._foreach_lerp_([*qf1_target.parameters(), *qf2_target.parameters()], q_params, args.tau)

            # LOG, EVALUATE, CHECKPOINT
            run.log(infos, metrics, previous_step, global_step)
            run.after_step(previous_step, (global_step, updates), obs, policy)
        model = {"actor": actor.state_dict(), "qf1": qf1.state_dict(), "qf2": qf2.state_dict()}
        summary = run.finish((global_step, updates), obs, policy, {**model, "log_alpha": log_alpha.detach().cpu()})
    return {**summary, "critic_updates": updates, "actor_updates": updates}


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
                (not getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive, not {getattr(args, name)}")
                for name in (
                    "policy_lr",
                    "q_lr",
                    "optimizer_eps",
                    "batch_size",
                    "update_frequency",
                    "target_network_frequency",
                )
            ),
            (not 0 < args.tau <= 1, f"--tau must lie in (0, 1], not {args.tau}"),
            (not 0 < args.gamma <= 1, f"--gamma must lie in (0, 1], not {args.gamma}"),
            (not args.alpha >= 0, f"--alpha must be non-negative, not {args.alpha}"),
            (
                not 0 <= args.target_entropy_scale <= 1,
                f"--target-entropy-scale must lie in [0, 1], not {args.target_entropy_scale}",
            ),
            (
                args.buffer_size < max(args.batch_size, 6 * args.num_envs),
                f"--buffer-size ({args.buffer_size}) must be at least --batch-size ({args.batch_size}) and 6 x "
                f"--num-envs ({args.num_envs}): each sub-env's share holds a 4-frame stack and s'",
            ),
            (
                args.learning_starts >= args.total_timesteps,
                f"--learning-starts ({args.learning_starts}) must lie below --total-timesteps "
                f"({args.total_timesteps}), or no update runs",
            ),
            (
                args.learning_starts < args.batch_size,
                f"--learning-starts ({args.learning_starts}) must be at least --batch-size ({args.batch_size})",
            ),
            (
                args.autotune and args.alpha != Args.alpha,
                "--alpha fixes the temperature, which --autotune tunes from 1: add --no-autotune, or drop --alpha",
            ),
            (
                not args.autotune and args.target_entropy_scale != Args.target_entropy_scale,
                "--target-entropy-scale sets what --autotune aims at: drop it, or drop --no-autotune",
            ),
        ]
    )


def check_spaces(env_id: str, obs_space, action_space) -> None:
    """Raise ConfigError unless the env has a Discrete action space and Atari frame stacks or 1-D
    Box observations."""
    box = isinstance(obs_space, gym.spaces.Box)
    check(
        [
            (
                not isinstance(action_space, gym.spaces.Discrete),
                f"{env_id} has a {type(action_space).__name__} action "
                "space; this script needs a Discrete one (for a Box one: sac_continuous_action.py)",
            ),
            (
                isinstance(action_space, gym.spaces.Discrete) and action_space.start != 0,
                f"{env_id}'s Discrete actions start at {getattr(action_space, 'start', 0)}; this script's start at 0: "
                "shift them with a gymnasium.ActionWrapper",
            ),
            (
                not (box and (len(obs_space.shape) == 1 or obs_space.shape == (4, 84, 84) and atari(env_id))),
                f"{env_id} has {obs_space} observations, not an Atari id's frames (which this script stacks "
                "itself, as its buffer expects) or a 1-D Box (use FlattenObservation)",
            ),
        ]
    )


def atari(env_id: str) -> bool:
    """An id whose env `observation_wrappers` makes 4 stacked 84 x 84 uint8 frames of."""
    return env_id.split(":")[-1].startswith("ALE/") or "NoFrameskip" in env_id


def observation_wrappers(args, make):
    """`make`'s env or, for Atari, SB3's AtariWrapper (no-op starts, 4 frames skipped and
    max-pooled, episodic life, fire on reset, 84 x 84 grey frames, clipped rewards) stacked by 4;
    ALE/* ids (ale_py) keep their sticky actions."""
    name = args.env_id.split(":")[-1]  # an ale_py:ALE/Pong-v5 id too
    if not atari(name):
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
