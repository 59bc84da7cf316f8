"""Soft Actor-Critic (SAC) for continuous (Box) action spaces.

Papers:
    Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic
        Actor", arXiv:1801.01290
    Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (automatic alpha),
        arXiv:1812.05905
    Chen et al. 2021, "Randomized Ensembled Double Q-Learning" (critic ensembles, subsampled min,
        UTD), arXiv:2101.05982
    Ball et al. 2023, "Efficient Online RL with Offline Data" (RLPD: LayerNorm in the critics),
        arXiv:2302.02948

Example:
    python sac_continuous_action.py --env-id Hopper-v5 --seed 1

Deviations from the papers (each marked `# DEVIATION(n)` in the code):
    1. Clipped double-Q and no V network, the SAC-v2 form (arXiv:1812.05905), generalised to an
       ensemble of N critics whose target takes the min over a random subset of M (REDQ); the
       actor's loss, the min over all N (LeRobot's; REDQ's and HIL-SERL's own code: the mean).
    2. The critic loss is the squared error summed over critics, without eq. 5's 1/2 (CleanRL); Adam
       ignores the factor.
    3. log_std is squashed into [LOG_STD_MIN, LOG_STD_MAX] = [-5, 2] by a tanh rescale (D. Yarats's
       pytorch_sac, CleanRL; SpinningUp clamps it to [-20, 2]).
    4. The actor is updated `policy_frequency` times every `policy_frequency` update steps (TD3's
       delay, made up for; CleanRL's schedule), not once per step as in Algorithm 1, each time on
       the states of the last critic minibatch (CleanRL's), not a fresh one.
    5. The temperature loss reuses the actor step's log pi(a|s), drawn before the actor moved, not a
       fresh sample; its gradient step is on log alpha by its own Adam (CleanRL's), at q_lr: bit for
       bit the steps of a parameter group of the actor's Adam (Adam's state is per tensor, and J_pi
       and J(alpha) share no parameter), but an AdamW edit of the actor's optimizer leaves it be.
    6. Training starts with `learning_starts` env steps of uniformly random actions (SpinningUp,
       CleanRL).
"""

import ast
import contextlib
import functools
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
import torch.nn.functional as F
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

    env_id: str = "Hopper-v5"
    """gymnasium environment to train on; it needs a Box (continuous) action space"""
    total_timesteps: int = 1_000_000
    """environment steps to train for, counted over all --num-envs environments together"""
    num_envs: int = 1
    """number of environments stepped in lockstep in one process (gymnasium's SyncVectorEnv)"""
    eval_freq: int = 10_000
    """evaluate the policy without exploration noise every this many env steps, and at the end (0:
    only at the end)"""
    log_freq: int = 100
    """write the losses to TensorBoard every this many env steps"""
    buffer_size: int = 1_000_000
    """number of transitions the replay buffer holds, the oldest overwritten first (SAC paper, Table
    1)"""
    gamma: float = 0.99
    """discount factor of future rewards (gamma; SAC paper, Table 1)"""
    tau: float = 0.005
    """how far the target critics move toward the critics at each update (Polyak tau; SAC paper,
    Table 1)"""
    batch_size: int = 256
    """transitions per gradient step (SAC paper, Table 1)"""
    learning_starts: int = 5_000
    """env steps of uniformly random actions before the first update (CleanRL)"""
    policy_lr: float = 3e-4
    """learning rate of the actor's Adam (SAC paper, Table 1)"""
    q_lr: float = 1e-3
    """learning rate of the critics' and of the temperature's Adam (CleanRL; the SAC paper uses
    3e-4)"""
    policy_frequency: int = 2
    """update the actor this many times every this many update steps, each of --utd-ratio critic
    updates (CleanRL)"""
    target_update_interval: int = 1
    """move the target critics every this many critic updates (Stable-Baselines3's name and unit;
    SAC paper: 1)"""
    alpha: float = 0.2
    """entropy temperature when it is fixed by --no-autotune (alpha; SAC paper)"""
    autotune: bool = True
    """tune the temperature so that the policy's entropy tracks --target-entropy (arXiv:1812.05905,
    eq. 18)"""
    target_entropy: float | None = None
    """entropy the tuned temperature aims at; unset: minus the number of action dimensions (H-bar;
    arXiv:1812.05905)"""
    backup_entropy: bool = True
    """add the entropy bonus -alpha log pi(a'|s') to the critics' target (arXiv:1812.05905 eq. 3;
    LeRobot's HIL-SERL; the HIL-SERL authors' code: off)"""
    num_critics: int = 2
    """number of critics in the ensemble (N; SAC: 2, REDQ: 10)"""
    num_subsample_critics: int | None = None
    """the target's minimum is over this many critics drawn at random each update; unset: all (M;
    REDQ: 2)"""
    utd_ratio: int = 1
    """critic updates per environment step (update-to-data ratio G; REDQ: 20)"""
    max_grad_norm: float | None = None
    """clip the gradient norm of the actor and the critics to this value; unset: no clipping
    (LeRobot's HIL-SERL: 40; the HIL-SERL authors' code: none)"""
    critic_layer_norm: bool = False
    """normalise each hidden layer of the critics with LayerNorm, before its ReLU (RLPD,
    arXiv:2302.02948)"""


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # DEVIATION(3)
HIDDEN = 256  # units per hidden layer (SAC paper, Table 1)
LOG_2PI = math.log(2 * math.pi)


# PURE MATH
# --------------------------------------------------------------------------------------------------
def tanh_gaussian_log_prob(u: torch.Tensor, eps: torch.Tensor, log_std: torch.Tensor, action_scale: torch.Tensor):
    """log pi(a|s) of a = tanh(u) * action_scale + action_bias, u = mean + exp(log_std) * eps, eps ~
    N(0, I). Shapes: u, eps, log_std (B, |A|); action_scale (|A|,). Returns (B, 1).
    log pi(a|s) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) - log(action_scale_i)]
                                                                       [arXiv:1801.01290 eq. 21]
    with log N(u_i; mean_i, std_i) = -eps_i^2 / 2 - log std_i - log(2 pi) / 2, as (u - mean) / std =
    eps, and the stable log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), exact where tanh(u)
    rounds to +-1."""
    log_det_tanh = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    per_dim = -0.5 * eps.pow(2) - log_std - log_det_tanh
    return per_dim.sum(-1, keepdim=True) - (0.5 * LOG_2PI * u.shape[-1] + torch.log(action_scale).sum())


def soft_q_target(rewards, terminations, next_q, next_log_prob, alpha, gamma: float, backup_entropy: bool):
    """Shapes: rewards, terminations, next_log_prob (B,); next_q (M, B), Q'_i(s', a') with a' ~
    pi(.|s'). y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))
    [arXiv:1812.05905 eq. 3, 5] backup_entropy=False drops the -alpha log pi term (HIL-SERL's
    `use_backup_entropy`)."""
    next_v = next_q.min(dim=0).values  # DEVIATION(1): clipped double-Q over the (subsampled) ensemble
    if backup_entropy:
        next_v = next_v - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminations) * next_v


def subsample_critics(num_critics: int, num_subsample: int, device=None):
    """Indices of `num_subsample` distinct critics of `num_critics`, drawn uniformly (REDQ, Alg. 1
    line 8); all: [:]."""
    return slice(None) if num_subsample == num_critics else torch.randperm(num_critics, device=device)[:num_subsample]


# NETWORKS AND REPLAY BUFFER
# -------------------------------------------------------------------------------------------
class QEnsemble(nn.Module):
    """N soft Q networks Q_i(s, a), each 256-256-1 with ReLU, in one batched pass: layer weights are
    stacked to (N, in, out) for `torch.baddbmm`. Each member is initialised as `nn.Linear` is:
    U(+-1/sqrt(fan_in)). With layer_norm, each hidden layer is Linear, LayerNorm (its own gain and
    bias per member, eps 1e-5), ReLU, as RLPD's."""

    def __init__(self, envs, num_critics: int = 2, layer_norm: bool = False):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        dims = [obs_dim + act_dim, HIDDEN, HIDDEN, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(num_critics, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_critics, 1, fan_out).uniform_(-bound, bound)))
        hidden = len(dims) - 2 if layer_norm else 0  # LayerNorm gains 1 and biases 0, as nn.LayerNorm's
        self.norm_gains = nn.ParameterList(nn.Parameter(torch.ones(num_critics, 1, HIDDEN)) for _ in range(hidden))
        self.norm_biases = nn.ParameterList(nn.Parameter(torch.zeros(num_critics, 1, HIDDEN)) for _ in range(hidden))

    def forward(self, obs, actions, idx=slice(None), detach_params: bool = False):
        """Q values (N, B), or (M, B) for the critics `idx` selects; detach_params=True lets no
        gradient into the critics."""
        x = torch.cat([obs, actions], dim=-1)
        ws, bs, gs, hs = (
            [p[idx].detach() if detach_params else p[idx] for p in ps]
            for ps in (self.weights, self.biases, self.norm_gains, self.norm_biases)
        )
        x = x.expand(ws[0].shape[0], *x.shape)
        for k, (w, b) in enumerate(zip(ws[:-1], bs[:-1])):
            x = torch.baddbmm(b, x, w)
            if gs:  # --critic-layer-norm: g * (x - mean(x)) / sqrt(var(x) + eps) + h over the hidden units
                x = torch.addcmul(hs[k], F.layer_norm(x, x.shape[-1:]), gs[k])
            x = F.relu(x, inplace=True)
        # the output layer as multiply-and-sum: a batched matmul with one output column takes a slow
        # path on the CPU
        return (x * ws[-1].transpose(1, 2)).sum(-1) + bs[-1].squeeze(-1)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy with CleanRL's interface: Actor(envs), forward, get_action."""

    def __init__(self, envs):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        self.fc1 = nn.Linear(obs_dim, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc_mean = nn.Linear(HIDDEN, act_dim)
        self.fc_logstd = nn.Linear(HIDDEN, act_dim)
        high, low = envs.single_action_space.high, envs.single_action_space.low
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, obs):
        """Returns (mean, log_std), each (B, |A|), log_std in [LOG_STD_MIN, LOG_STD_MAX]."""
        x = F.relu(self.fc2(F.relu(self.fc1(obs), inplace=True)), inplace=True)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # DEVIATION(3)
        return self.fc_mean(x), log_std

    def get_action(self, obs):
        """Returns (action, log_prob (B, 1), deterministic action tanh(mean)), actions rescaled to
        the Box bounds."""
        mean, log_std = self(obs)
        eps = torch.randn_like(mean)
        # a = tanh(mean + std * eps) * scale + bias: the reparameterization trick
        # [arXiv:1801.01290 eq. 11]
        u = torch.addcmul(mean, log_std.exp(), eps)
        action = torch.addcmul(self.action_bias, torch.tanh(u), self.action_scale)
        log_prob = tanh_gaussian_log_prob(u, eps, log_std, self.action_scale)
        return action, log_prob, torch.addcmul(self.action_bias, torch.tanh(mean), self.action_scale)


class ReplayBuffer:
    """Preallocated circular storage of (s, a, r, s', terminated), sampled uniformly: column blocks
    of one float tensor, so storing a step is one copy and drawing a minibatch one gather."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device):
        self.capacity, self.pos, self.size, self.device = capacity, 0, 0, device
        self.widths = (obs_dim, act_dim, 1, obs_dim, 1)
        self.storage = torch.empty((capacity, sum(self.widths)), device=device)  # rows >= size are never read

    def add(self, obs, actions, rewards, next_obs, terminations):
        """Store one row per sub-env; arrays are (num_envs, ...), next_obs the true s'."""
        rows = np.concatenate([obs, actions, rewards[:, None], next_obs, terminations[:, None]], 1, dtype=np.float32)
        idx = torch.arange(self.pos, self.pos + len(rows)) % self.capacity
        self.storage[idx.to(self.device)] = torch.from_numpy(rows).to(self.device)
        self.pos, self.size = (self.pos + len(rows)) % self.capacity, min(self.size + len(rows), self.capacity)

    def sample(self, batch_size: int):
        """(obs, actions, rewards, next_obs, terminations) of `batch_size` transitions drawn
        uniformly."""
        return self.rows(torch.randint(0, self.size, (batch_size,), device=self.device))

    def rows(self, idx):
        obs, actions, rewards, next_obs, terminations = self.storage.index_select(0, idx).split(self.widths, dim=-1)
        return obs, actions, rewards.squeeze(-1), next_obs, terminations.squeeze(-1)

    def state_dict(self):  # a copy of the rows written: torch.save writes a view's whole storage, the whole buffer
        return {"pos": self.pos, "size": self.size, "storage": self.storage[: self.size].to("cpu", copy=True)}

    def load_state_dict(self, state):
        self.pos, self.size = state["pos"], state["size"]
        self.storage[: self.size] = state["storage"].to(self.device)


# LOSSES AND UPDATES
# --------------------------------------------------------------------------------------------------
def compute_loss_q(actor, qf, qf_target, batch, alpha, gamma, backup_entropy, num_subsample):
    """J_Q = sum_i E[(Q_i(s, a) - y)^2], y from `soft_q_target`   [arXiv:1812.05905 eq. 5;
    DEVIATION(2)]. Returns (loss, metrics)."""
    obs, actions, rewards, next_obs, terminations = batch
    with torch.no_grad():
        next_actions, next_log_prob, _ = actor.get_action(next_obs)
        idx = subsample_critics(qf.weights[0].shape[0], num_subsample, actions.device)
        next_q = qf_target(next_obs, next_actions, idx)
        y = soft_q_target(rewards, terminations, next_q, next_log_prob.squeeze(-1), alpha, gamma, backup_entropy)
    q = qf(obs, actions)
    per_critic = (q - y).pow(2).mean(dim=1)
    q_means, losses = q.detach().mean(dim=1), per_critic.detach()  # detached: logging records no autograd graph
    metrics = {
        "qf1_values": q_means[0],
        "qf2_values": q_means[1],
        "qf1_loss": losses[0],
        "qf2_loss": losses[1],
        "qf_loss": losses.mean(),
    }
    return per_critic.sum(), metrics


def compute_loss_pi(actor, qf, obs, alpha):
    """J_pi = E_s[alpha * log pi(a|s) - min_i Q_i(s, a)], a ~ pi(.|s) reparameterized
    [arXiv:1801.01290 eq. 12]; the critics' parameters enter detached, so gradients reach the actor
    only. Returns (loss, detached log_prob (B,))."""
    actions, log_prob, _ = actor.get_action(obs)
    q = qf(obs, actions, detach_params=True).min(dim=0).values  # DEVIATION(1): REDQ's actor takes the mean over N
    log_prob = log_prob.squeeze(-1)
    return (alpha * log_prob - q).mean(), log_prob.detach()


def compute_loss_alpha(log_alpha, log_prob, target_entropy: float):
    """J(alpha) = E_a~pi[-alpha * log pi(a|s) - alpha * H-bar]   [arXiv:1812.05905 eq. 18]; log_prob
    is detached."""
    return (-log_alpha.exp() * (log_prob + target_entropy)).mean()


def polyak_update(targets: list, params: list, tau: float) -> None:
    """theta' <- tau * theta + (1 - tau) * theta'   [arXiv:1801.01290 Algorithm 1]"""
    with torch.no_grad():
        torch._foreach_lerp_(targets, params, tau)


def optimizer_step(optimizer, loss, module=None, max_norm: float | None = None) -> None:
    """One step of `optimizer` on `loss`, the gradient norm of `module` first clipped to max_norm
    (None: not)."""
    optimizer.zero_grad()
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(module.parameters(), max_norm)
    optimizer.step()


def sac_updates(
    actor, qf, qf_target, log_alpha, q_optimizer, actor_optimizer, alpha_optimizer, args, target_entropy: float
):
    """update_critic(batch, update_target) and update_actor(obs): one gradient step each on the
    losses above (update_actor's on J_pi and J(alpha), log alpha by its own optimizer), returning
    detached metrics (no host sync); act(obs), a ~ pi(.|s) to collect with."""
    num_subsample = args.num_subsample_critics or args.num_critics
    step = functools.partial(optimizer_step, max_norm=args.max_grad_norm)
    targets, online = list(qf_target.parameters()), list(qf.parameters())  # once, not at each update

    def update_critic(batch, update_target: bool):
        alpha = log_alpha.exp().detach()
        loss, metrics = compute_loss_q(
            actor, qf, qf_target, batch, alpha, args.gamma, args.backup_entropy, num_subsample
        )
        step(q_optimizer, loss, qf)
        if update_target:
            polyak_update(targets, online, args.tau)
        return metrics

    def update_actor(obs):
        alpha = log_alpha.detach().exp()
        loss, log_prob = compute_loss_pi(actor, qf, obs, alpha)
        metrics = {"actor_loss": loss.detach(), "alpha": alpha[0], "entropy": -log_prob.mean()}
        if not args.autotune:
            step(actor_optimizer, loss, actor)
            return metrics
        alpha_loss = compute_loss_alpha(log_alpha, log_prob, target_entropy)  # on the actor step's log pi: DEVIATION(5)
        metrics["alpha_loss"] = alpha_loss.detach()
        # phi <- phi - lambda_pi grad J_pi(phi); log alpha <- log alpha - lambda grad J(alpha)
        # [arXiv:1812.05905 Algorithm 1]. One backward pass of J_pi + J(alpha) gives each the
        # gradient of its own loss bit for bit, as two passes do: J_pi takes alpha detached and
        # J(alpha) log pi detached, so they share no tensor that needs a gradient. Only the actor's
        # gradient is clipped.
        loss = loss + alpha_loss
        alpha_optimizer.zero_grad()
        step(actor_optimizer, loss, actor)
        alpha_optimizer.step()
        return metrics

    @torch.no_grad()
    def act(obs):
        return actor.get_action(obs)[0]

    return update_critic, update_actor, act


def target_of(source: nn.Module, target: nn.Module) -> nn.Module:
    """`target` made a copy of `source` that takes no gradient: the target network, moved by
    `polyak_update`."""
    target.load_state_dict(source.state_dict())
    return target.requires_grad_(False)


# MAIN
# --------------------------------------------------------------------------------------------------
def main(args: Args) -> dict:
    """Train; returns a summary. Raises ConfigError, before writing anything, on bad flags, envs or
    checkpoints."""
    args, checkpoint, device = setup(args, check_args, check_spaces, actions_in_bounds)
    with Run(args, checkpoint, device, "--buffer-size or --batch-size", actions_in_bounds) as run:
        obs_dim, act_dim = run.envs.single_observation_space.shape[0], run.envs.single_action_space.shape[0]
        actor = Actor(run.envs).to(device)
        qf = QEnsemble(run.envs, args.num_critics, args.critic_layer_norm).to(device)
        qf_target = target_of(qf, QEnsemble(run.envs, args.num_critics, args.critic_layer_norm).to(device))
        # learning rates as tensors on the device: one changed in place (as torch's schedulers do)
        # reaches the compiled updates with no recompile, and the captured ones at all
        fused = {"fused": True} if device.type in ("cpu", "cuda") else {}  # one Adam kernel for all tensors
        q_optimizer = torch.optim.Adam(qf.parameters(), lr=torch.tensor(args.q_lr, device=device), **fused)
        actor_optimizer = torch.optim.Adam(actor.parameters(), lr=torch.tensor(args.policy_lr, device=device), **fused)
        log_alpha = torch.zeros(1, device=device, requires_grad=True)
        alpha_optimizer = torch.optim.Adam([log_alpha], lr=torch.tensor(args.q_lr, device=device), **fused)
        if not args.autotune:  # alpha fixed: log alpha never takes a step
            log_alpha.data.fill_(math.log(args.alpha) if args.alpha > 0 else -math.inf)
        # H-bar = -|A| (arXiv:1812.05905, Sec. 5) unless --target-entropy sets it
        target_entropy = -float(act_dim) if args.target_entropy is None else args.target_entropy
        rb = ReplayBuffer(args.buffer_size, obs_dim, act_dim, device)
        stateful = dict(
            actor=actor,
            qf=qf,
            qf_target=qf_target,
            q_optimizer=q_optimizer,
            actor_optimizer=actor_optimizer,
            alpha_optimizer=alpha_optimizer,
            rb=rb,
            log_alpha=log_alpha,
        )

        def policy(obs):  # the deterministic action tanh(mean) * scale + bias, for evaluation
            mean = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))[0]
            return torch.addcmul(actor.action_bias, torch.tanh(mean), actor.action_scale).cpu().numpy()

        (global_step, critic_updates, actor_updates, update_steps), obs = run.resume(stateful, (0, 0, 0, 0), policy)
        update_critic, update_actor, act = sac_updates(
            actor, qf, qf_target, log_alpha, q_optimizer, actor_optimizer, alpha_optimizer, args, target_entropy
        )
        if args.compile:  # the same functions, compiled (on a GPU, captured too)
            optimizers = [q_optimizer, actor_optimizer, alpha_optimizer]
            update_critic, update_actor, act = compiled([update_critic, update_actor, act], device, optimizers)

        def update():  # utd_ratio critic updates; every policy_frequency-th call, policy_frequency actor updates
            nonlocal critic_updates, actor_updates, update_steps  # (DEVIATION(4))
            for _ in range(args.utd_ratio):
                batch = rb.sample(args.batch_size)
                critic_updates += 1
                metrics.update(update_critic(batch, critic_updates % args.target_update_interval == 0))
            update_steps += 1
            if update_steps % args.policy_frequency == 0:
                for _ in range(args.policy_frequency):
                    metrics.update(update_actor(batch[0]))
                    actor_updates += 1

        metrics = {}
        while global_step + args.num_envs <= args.total_timesteps and not run.stop_signal:
            # COLLECT: random actions for the first learning_starts steps (DEVIATION(6)), then a ~
            # pi(.|s)
            if global_step < args.learning_starts:
                u = torch.rand((args.num_envs, act_dim), device=device) * 2.0 - 1.0
                actions = (u * actor.action_scale + actor.action_bias).cpu().numpy()
            else:
                actions = act(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()
            next_obs, rewards, terminations, truncations, infos = run.envs.step(actions)
            check_rewards(rewards, actions, args.env_id, global_step)
            previous_step, global_step = global_step, global_step + args.num_envs

            # STORE: bootstrap through truncations, never through terminations: s' is the true final
            # observation and `terminations` alone masks the target. SAME_STEP autoreset means no
            # stored transition spans a reset.
            rb.add(obs, actions, rewards, final_observations(next_obs, infos), terminations)
            obs = next_obs

            # UPDATE: every env step brings one update step
            if global_step >= args.learning_starts:
                for _ in range(args.num_envs):
                    update()

            # LOG, EVALUATE, CHECKPOINT
            counters = (global_step, critic_updates, actor_updates, update_steps)
            run.log(infos, metrics, previous_step, global_step)
            run.after_step(previous_step, counters, obs, policy)
        model = {"actor": actor.state_dict(), "qf": qf.state_dict(), "log_alpha": log_alpha.detach().cpu()}
        summary = run.finish((global_step, critic_updates, actor_updates, update_steps), obs, policy, model)
    return {**summary, "critic_updates": critic_updates, "actor_updates": actor_updates}


# VALIDATION
# --------------------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for this script's out-of-range or contradictory flags, each flag's own
    range before the bounds flags set one another, so that each message names the flag to change."""
    check(
        [
            (not args.policy_lr > 0, f"--policy-lr must be positive, not {args.policy_lr}"),
            (not args.q_lr > 0, f"--q-lr must be positive, not {args.q_lr}"),
            (
                args.max_grad_norm is not None and not args.max_grad_norm > 0,
                f"--max-grad-norm must be positive, not {args.max_grad_norm}",
            ),
            (not 0 < args.tau <= 1, f"--tau must lie in (0, 1], not {args.tau}"),
            (not 0 < args.gamma <= 1, f"--gamma must lie in (0, 1], not {args.gamma}"),
            (not args.alpha >= 0, f"--alpha must be non-negative, not {args.alpha}"),
            (args.batch_size < 1, f"--batch-size must be at least 1, not {args.batch_size}"),
            (args.num_critics < 2, f"--num-critics must be at least 2, not {args.num_critics}"),
            (args.utd_ratio < 1, f"--utd-ratio must be at least 1, not {args.utd_ratio}"),
            (args.policy_frequency < 1, f"--policy-frequency must be at least 1, not {args.policy_frequency}"),
            (
                args.target_update_interval < 1,
                f"--target-update-interval must be at least 1, not {args.target_update_interval}",
            ),
            (
                args.buffer_size < max(args.batch_size, 2 * args.num_envs),
                f"--buffer-size ({args.buffer_size}) must be at least --batch-size ({args.batch_size}) and twice "
                f"--num-envs ({args.num_envs})",
            ),
            (
                args.learning_starts >= args.total_timesteps,
                f"--learning-starts ({args.learning_starts}) must lie below --total-timesteps "
                f"({args.total_timesteps}), or no update runs",
            ),
            (
                args.batch_size > args.learning_starts,
                f"--batch-size ({args.batch_size}) must be at most --learning-starts ({args.learning_starts})",
            ),
            (
                args.num_subsample_critics not in (None, *range(1, args.num_critics + 1)),
                f"--num-subsample-critics must lie in [1, --num-critics={args.num_critics}]",
            ),
            (
                args.autotune and args.alpha != Args.alpha,
                "--alpha fixes the temperature, which --autotune tunes from 1: add --no-autotune, or drop --alpha",
            ),
            (
                not args.autotune and args.target_entropy is not None,
                "--target-entropy is what --autotune aims at: drop it, or drop --no-autotune",
            ),
        ]
    )


def actions_in_bounds(args, make):
    """`make()`'s env, each action clipped into its Box: bias + scale * tanh(u) can miss a bound by
    a rounding (gymnasium's ClipAction would unbound the space)."""
    env = make()
    box = env.action_space
    if not isinstance(box, gym.spaces.Box):  # check_spaces refuses it after the trial env
        return env
    clip = functools.partial(np.clip, a_min=box.low, a_max=box.high, dtype=box.dtype)  # float16's too
    return gym.wrappers.TransformAction(env, clip, box)


def check_spaces(env_id: str, obs_space, action_space) -> None:
    """Raise ConfigError unless observations are a 1-D Box and actions a bounded Box."""
    box = isinstance(action_space, gym.spaces.Box)  # the bounds are read only from a Box
    check(
        [
            (isinstance(action_space, gym.spaces.Discrete), f"{env_id} has a Discrete action space: use sac_atari.py"),
            (not box, f"{env_id}'s action space is no Box; this script needs one"),
            (
                box and (len(action_space.shape) != 1 or action_space.shape[0] == 0),
                f"{env_id} has {action_space} actions; this script needs a 1-D Box of one action or more: "
                "reshape them with a gymnasium.ActionWrapper",
            ),
            (
                isinstance(obs_space, gym.spaces.Dict),
                f"{env_id} has Dict observations: use sac_hil_serl.py, whose encoders read images and vectors",
            ),
            (
                not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1),
                f"{env_id} has {obs_space} "
                "observations; this script needs a 1-D Box (see gymnasium.wrappers.FlattenObservation)",
            ),
            (
                box
                and not np.all(
                    np.isfinite(action_space.low)
                    & np.isfinite(action_space.high)
                    & (action_space.high > action_space.low)
                ),
                f"{env_id} has unbounded or empty action bounds; tanh needs finite low < high",
            ),
        ]
    )


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


# ==================================================================================================
# COMPILED UPDATES (--compile): `sac_updates` through torch.compile as it is, losses, backward pass
# and optimizer step included, so an edit above runs the same compiled; on a GPU each function is
# also recorded as a CUDA graph and replayed.
# A reader of the algorithm may stop above this banner.
# ==================================================================================================
CUDA_GRAPHS = True  # on a GPU, capture the compiled functions (False: compiled only, as benchmark/speed.py times it)


def compiled(functions: list, device, optimizers: list = ()) -> list:
    """Each of `functions` through torch.compile as it is (its losses, backward pass and optimizer
    step are traced from the code above at the first call, so an edit there is what runs); on a GPU,
    each also `Captured`, with the `optimizers` it steps."""
    importlib.import_module("torch._inductor.config").fallback_random = True  # random draws as eager mode's
    warnings.filterwarnings("ignore", "TensorFloat32")  # inductor on a GPU: float32 matmuls kept
    for logger in ["torch._dynamo.variables.ctx_manager", "torch.utils.cpp_extension"]:
        logging.getLogger(logger).setLevel(logging.ERROR)  # torch's notes
    functions = [torch.compile(function) for function in functions]
    if device.type == "cuda" and CUDA_GRAPHS:
        return [Captured(function, optimizers) for function in functions]
    return functions


class Captured:
    """`fn` recorded as CUDA graphs and replayed. Each distinct call signature (the inputs' tree,
    the shape, dtype, device and strides of each tensor, the value of each other input, such as a
    flag, and the settings of each parameter group of `optimizers`: a float's value, a tensor's
    identity) has a graph of its own: its first `warmup` calls run `fn` on this wrapper's side
    stream, as capture needs; the next records it; each call after copies the tensor inputs into the
    recorded ones and replays it. A replay reads what a tensor holds now, but the value a float had
    when its graph was recorded: a learning rate that changes reaches every replay as a tensor
    changed in place (as the scripts make it, and torch's schedulers change it), and a float one
    gets a graph per value. The outputs are the recorded tensors, which the next replay of the same
    graph overwrites: clone what you keep."""

    def __init__(self, fn, optimizers: list = (), warmup: int = 3):
        self.fn = fn
        self.optimizers = optimizers
        self.warmup = warmup  # calls before the recording: they compile `fn` and set up what CUDA makes lazily
        self.graphs = {}
        self.side_stream = None  # made at the first call: a CPU-only machine can build the wrapper

    def __call__(self, *inputs):
        leaves, spec = torch.utils._pytree.tree_flatten(inputs)
        signature = tuple((x.shape, x.dtype, x.device, x.stride()) if torch.is_tensor(x) else x for x in leaves)
        settings = tuple(
            id(value) if torch.is_tensor(value) else value
            for optimizer in self.optimizers
            for group in optimizer.param_groups
            for key, value in group.items()
            if key not in ("params", "param_names")
        )
        g = self.graphs.setdefault((spec, signature, settings), {"calls": 0})
        g["calls"] += 1
        if g["calls"] <= self.warmup:
            if self.side_stream is None:
                self.side_stream = torch.cuda.Stream()
            self.side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side_stream):
                out = self.fn(*inputs)
            torch.cuda.current_stream().wait_stream(self.side_stream)
            return out
        if "graph" not in g:
            g["graph"] = torch.cuda.CUDAGraph()
            g["inputs"] = [
                torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)
                if torch.is_tensor(x)
                else x
                for x in leaves
            ]  # the strides compiled for: no recompile
            with torch.cuda.graph(g["graph"]):
                g["outputs"] = self.fn(*torch.utils._pytree.tree_unflatten(g["inputs"], spec))
        recorded = [x for x in g["inputs"] if torch.is_tensor(x)]
        torch._foreach_copy_(recorded, [x for x in leaves if torch.is_tensor(x)])
        g["graph"].replay()
        return g["outputs"]


if __name__ == "__main__":
    cli()
