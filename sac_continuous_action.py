"""Soft Actor-Critic (SAC) for continuous (Box) action spaces.

Papers:
    Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic Actor", arXiv:1801.01290
    Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (automatic alpha), arXiv:1812.05905
    Chen et al. 2021, "Randomized Ensembled Double Q-Learning" (critic ensembles, subsampled min, UTD), arXiv:2101.05982

Example:
    python sac_continuous_action.py --env-id Hopper-v5 --seed 1

Deviations from the papers (each marked `# DEVIATION(n)` in the code):
    1. Two Q networks with the clipped double-Q minimum and no separate V network: the SAC-v2 form (arXiv:1812.05905),
       generalised to an ensemble of N critics whose target takes the min over a random subset of M (REDQ).
    2. The critic loss is the plain mean squared error summed over critics, without the 1/2 of arXiv:1812.05905 eq. 5 (as CleanRL).
       Adam is invariant to this constant factor apart from its epsilon.
    3. log_std is squashed into [LOG_STD_MIN, LOG_STD_MAX] = [-5, 2] by a tanh rescale (SpinningUp / D. Yarats).
    4. The actor is updated `policy_frequency` times every `policy_frequency` update steps (TD3's delay, made up for),
       not once per step as in Algorithm 1 of the paper (CleanRL's schedule).
    5. The temperature loss reuses log pi(a|s) from the actor step, drawn before the actor's parameters moved, instead
       of a fresh sample from the updated actor (saves an actor forward pass; the expectation is the same policy's up
       to one gradient step).
    6. Training starts with `learning_starts` env steps of uniformly random actions (as SpinningUp and CleanRL).
"""

import contextlib
import inspect
import io
import math
import os
import pickle
import random
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Annotated

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from gymnasium.vector import AutoresetMode


@dataclass
class Args:
    # --- common block: experiment, seeding, device, tracking, video, saving, evaluation, checkpointing ---
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name of this experiment; part of the run name runs/<env_id>__<exp_name>__<seed>__<unix time>"""
    seed: int = 1
    """seed of torch, numpy, random, the environments and the evaluation episodes"""
    torch_deterministic: bool = True
    """set `torch.backends.cudnn.deterministic`"""
    cuda: bool = True
    """use a CUDA GPU when one is present (falls back to the CPU otherwise)"""
    compile: Annotated[bool | None, tyro.conf.DisallowNone] = None
    """compile the critic and the actor updates, one graph each (torch.compile); unset: on for CPU runs of 100k+ training steps (README, Performance)"""
    track: bool = False
    """log to Weights and Biases as well (needs `pip install wandb`)"""
    wandb_project_name: str = "actor-critic"
    """the W&B project name"""
    wandb_entity: str | None = None
    """the W&B entity (team)"""
    capture_video: bool = False
    """record the first episode of each evaluation to runs/<run_name>/videos/step_<env step> (needs moviepy)"""
    save_model: bool = False
    """write the trained networks to runs/<run_name>/model.pt at the end"""
    eval_freq: int = 10_000
    """evaluate the policy without exploration noise every this many env steps, and at the end; 0: only at the end"""
    eval_episodes: int = 10
    """episodes per evaluation"""
    checkpoint_freq: int = 0
    """write runs/<run_name>/checkpoint.pt every this many env steps (0: only on SIGINT/SIGTERM)"""
    resume: str | None = None
    """continue the run saved in this checkpoint.pt; the run's saved configuration is used and other flags ignored"""
    log_freq: int = 100
    """write the loss metrics to TensorBoard every this many env steps"""

    # --- algorithm ---
    env_id: str = "Hopper-v5"
    """the id of a gymnasium environment with a Box action space"""
    total_timesteps: int = 1_000_000
    """environment steps in total, summed over all `num_envs` environments"""
    num_envs: int = 1
    """number of environments stepped in parallel (SyncVectorEnv)"""
    buffer_size: int = 1_000_000
    """replay buffer capacity in transitions (SAC paper, Table 1)"""
    gamma: float = 0.99
    """gamma: discount factor (SAC paper, Table 1)"""
    tau: float = 0.005
    """tau: Polyak coefficient for target networks (SAC paper, Table 1)"""
    batch_size: int = 256
    """minibatch size (SAC paper, Table 1)"""
    learning_starts: int = 5_000
    """env steps of uniformly random actions before updates start (CleanRL)"""
    policy_lr: float = 3e-4
    """learning rate of the actor's Adam (SAC paper, Table 1)"""
    q_lr: float = 1e-3
    """learning rate of the critics' and of log alpha's Adam (CleanRL; the paper uses 3e-4)"""
    policy_frequency: int = 2
    """update the actor this many times every this many update steps (CleanRL; TD3's delayed updates)"""
    target_network_frequency: int = 1
    """soft-update the target critics every this many critic updates (SAC paper: 1)"""
    alpha: float = 0.2
    """alpha: entropy temperature when it is fixed (--no-autotune)"""
    autotune: bool = True
    """tune alpha automatically to reach the target entropy (arXiv:1812.05905, eq. 18)"""
    target_entropy: float | None = None
    """H-bar: target entropy of the automatic tuning; None means -|A| (arXiv:1812.05905, Sec. 5)"""
    backup_entropy: bool = True
    """include -alpha log pi(a'|s') in the Bellman target (arXiv:1812.05905 eq. 3; HIL-SERL `use_backup_entropy`)"""
    num_critics: int = 2
    """N: number of soft Q networks in the ensemble (SAC: 2; REDQ: 10)"""
    num_subsample_critics: int | None = None
    """M: the target takes the min over M target critics drawn at random each update; None means all N (REDQ: 2)"""
    utd_ratio: int = 1
    """G: critic updates per environment step (update-to-data ratio; REDQ: 20)"""
    grad_clip_norm: float | None = None
    """clip the gradient norm of the actor and the critics to this value (off by default; HIL-SERL: 40)"""


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # DEVIATION(3)
HIDDEN = 256  # units per hidden layer (SAC paper, Table 1)
EVAL_SEED_OFFSET = 1_000_000  # evaluation episode k is reset with seed + EVAL_SEED_OFFSET + k
COMPILE_MIN_STEPS = 100_000  # unset --compile: compile CPU runs with this many env steps after learning starts
PROGRESS_SECONDS = 0.5, 30.0  # progress refresh interval on a terminal, and between plain lines otherwise
LOG_2PI = math.log(2 * math.pi)


class ConfigError(Exception):
    """A bad flag, env or checkpoint: the CLI prints the message on one line and exits with code 2."""


# ---------------------------------------------------------------------------------------------------------------------
# PURE MATH
# ---------------------------------------------------------------------------------------------------------------------
def tanh_gaussian_log_prob(u: torch.Tensor, eps: torch.Tensor, log_std: torch.Tensor, action_scale: torch.Tensor):
    """log pi(a|s) of a = tanh(u) * action_scale + action_bias with u = mean + exp(log_std) * eps, eps ~ N(0, I).

    Shapes: u, eps, log_std (B, |A|); action_scale (|A|,). Returns (B, 1).
    log pi(a|s) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) - log(action_scale_i)]   [arXiv:1801.01290 eq. 21]
    with log N(u_i; mean_i, std_i) = -eps_i^2 / 2 - log std_i - log(2 pi) / 2, since (u - mean) / std is eps (the same
    function of the parameters, so the same gradient, in fewer operations), and the stable form
    log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), exact where tanh(u) rounds to +-1.
    """
    log_det_tanh = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    per_dim = -0.5 * eps.pow(2) - log_std - log_det_tanh
    return per_dim.sum(-1, keepdim=True) - (0.5 * LOG_2PI * u.shape[-1] + torch.log(action_scale).sum())


def soft_q_target(rewards, terminations, next_q, next_log_prob, alpha, gamma: float, backup_entropy: bool):
    """Soft Bellman target of the critics.

    Shapes: rewards, terminations, next_log_prob (B,); next_q (M, B), the target critics' Q'_i(s', a'), a' ~ pi(.|s').
    y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))   [arXiv:1812.05905 eq. 3, 5]
    A truncation is stored with terminated = 0, so the target bootstraps from the true final observation s'.
    backup_entropy=False drops the -alpha log pi term (HIL-SERL's `use_backup_entropy`).
    """
    next_v = next_q.min(dim=0).values  # DEVIATION(1): clipped double-Q over the (subsampled) ensemble
    if backup_entropy:
        next_v = next_v - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminations) * next_v


def subsample_critics(num_critics: int, num_subsample: int, device=None):
    """Indices of `num_subsample` distinct critics out of `num_critics`, uniformly at random (REDQ, Alg. 1 line 8).

    Returns None, meaning all critics, when num_subsample == num_critics.
    """
    if num_subsample == num_critics:
        return None
    return torch.randperm(num_critics, device=device)[:num_subsample]


# ---------------------------------------------------------------------------------------------------------------------
# ENVIRONMENTS
# ---------------------------------------------------------------------------------------------------------------------
def make_env(env_id: str):
    """A thunk building one training env that records per-episode statistics (`infos["episode"]`).

    Seeding happens at the first reset: `envs.reset(seed=seed)` gives sub-env i the seed seed + i.
    """

    def thunk():
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))

    return thunk


def final_observations(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The true s_{t+1} of every sub-env, shape (num_envs, obs_dim).

    Under SAME_STEP autoreset an ended sub-env's `next_obs` row is already its reset observation; the final
    observation of the ended episode is in infos["final_obs"] (mask infos["_final_obs"]).
    """
    real_next_obs = next_obs.copy()
    if "_final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs


def env_snapshot(envs: gym.vector.SyncVectorEnv) -> bytes:
    """Pickle the sub-envs with their simulator state and RNG, for an exact resume.

    MuJoCo and ALE envs pickle through EzPickle, which rebuilds them from their constructor arguments; their np_random
    and simulator state (MjData, or the ALE state with its RNG) are stored beside them and put back by `env_restore`.
    """
    extras = []
    for env in envs.envs:
        base = env.unwrapped
        state = base.ale.cloneState(include_rng=True) if hasattr(base, "ale") else getattr(base, "data", None)
        extras.append((base.np_random, state))
    exact = all(state is not None or not isinstance(env.unwrapped, gym.utils.EzPickle)
                for env, (_, state) in zip(envs.envs, extras))
    return pickle.dumps((envs.envs, extras, exact))


def env_restore(snapshot: bytes):
    """Inverse of `env_snapshot`: returns (sub-envs, exact), exact=False where an env's state could not be saved."""
    sub_envs, extras, exact = pickle.loads(snapshot)
    for env, (np_random, state) in zip(sub_envs, extras):
        env.unwrapped.np_random = np_random
        if hasattr(env.unwrapped, "ale"):
            env.unwrapped.ale.restoreState(state)
        elif state is not None:
            import mujoco

            mujoco.mj_copyData(env.unwrapped.data, env.unwrapped.model, state)
    return sub_envs, exact


def vector_env(thunks) -> gym.vector.SyncVectorEnv:
    """SAME_STEP autoreset: a step that ends an episode returns the reset observation and infos["final_obs"]."""
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=AutoresetMode.SAME_STEP)


# ---------------------------------------------------------------------------------------------------------------------
# NETWORKS
# ---------------------------------------------------------------------------------------------------------------------
class QEnsemble(nn.Module):
    """N soft Q networks Q_i(s, a), each 256-256-1 with ReLU, evaluated in one batched pass.

    Layer weights are stacked to (N, in, out) and applied with `torch.baddbmm`, so N critics cost one kernel per layer.
    Each member is initialised as `nn.Linear` would be: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    """

    def __init__(self, envs, num_critics: int = 2):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        dims = [obs_dim + act_dim, HIDDEN, HIDDEN, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(num_critics, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_critics, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, obs, actions, idx=None, detach_params: bool = False):
        """Q values (N, B), or (M, B) for the critics `idx` selects; detach_params=True lets no gradient into the critics."""
        x = torch.cat([obs, actions], dim=-1)
        ws, bs = list(self.weights), list(self.biases)
        if idx is not None:
            ws, bs = [w[idx] for w in ws], [b[idx] for b in bs]
        if detach_params:
            ws, bs = [w.detach() for w in ws], [b.detach() for b in bs]
        x = x.expand(ws[0].shape[0], *x.shape)
        for w, b in zip(ws[:-1], bs[:-1]):
            x = F.relu(torch.baddbmm(b, x, w), inplace=True)
        # the output layer as multiply-and-sum: a batched matmul with one output column takes a slow path on the CPU
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

    def sample(self, obs):
        """Returns (action, u, eps, mean, log_std): a = tanh(u) * scale + bias, u = mean + std * eps, eps ~ N(0, I)."""
        mean, log_std = self(obs)
        eps = torch.randn_like(mean)
        # a = tanh(mean + std * eps) * scale + bias: the reparameterization trick   [arXiv:1801.01290 eq. 11]
        u = torch.addcmul(mean, log_std.exp(), eps)
        return torch.addcmul(self.action_bias, torch.tanh(u), self.action_scale), u, eps, mean, log_std

    def action_log_prob(self, obs):
        """Returns (action, log_prob (B, 1)), the action reparameterized; what the losses need."""
        action, u, eps, _, log_std = self.sample(obs)
        return action, tanh_gaussian_log_prob(u, eps, log_std, self.action_scale)

    def get_action(self, obs):
        """Returns (action, log_prob (B, 1), deterministic action), actions rescaled to the Box bounds."""
        action, u, eps, mean, log_std = self.sample(obs)
        log_prob = tanh_gaussian_log_prob(u, eps, log_std, self.action_scale)
        return action, log_prob, torch.tanh(mean) * self.action_scale + self.action_bias


def flatten_parameters(module: nn.Module, grad: bool = True) -> torch.Tensor:
    """Make every parameter of `module` a view into one flat tensor (and, with grad=True, every gradient a view into
    its gradient); returns the flat parameter.

    Adam, gradient clipping and the Polyak update then each run one kernel on one tensor instead of one per layer.
    Backward accumulates into the existing `.grad` views in place, so clear them with `flat.grad.zero_()`, never by
    setting them to None. Call it after `.to(device)`, which would make new tensors.
    """
    params = list(module.parameters())
    flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]), requires_grad=grad)
    if grad:
        flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        p.data = flat.data[offset: offset + p.numel()].view_as(p)
        if grad:
            p.grad = flat.grad[offset: offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat


# ---------------------------------------------------------------------------------------------------------------------
# REPLAY BUFFER
# ---------------------------------------------------------------------------------------------------------------------
class ReplayBuffer:
    """Preallocated circular storage of (s, a, r, s', terminated), sampled uniformly with torch indices.

    The five fields are column blocks of one (capacity, 2 |S| + |A| + 2) tensor, so storing a step is one copy and
    drawing a minibatch is one gather; `obs`, `actions`, ... are views of it.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device):
        self.capacity, self.pos, self.size, self.device = capacity, 0, 0, device
        self.widths = (obs_dim, act_dim, 1, obs_dim, 1)
        self.storage = torch.empty((capacity, sum(self.widths)), device=device)  # rows >= size are never read
        self.obs, self.actions, self.rewards, self.next_obs, self.terminations = self.split(self.storage)

    def split(self, rows: torch.Tensor):
        """The (obs, actions, rewards, next_obs, terminations) column views of rows of the storage."""
        obs, actions, rewards, next_obs, terminations = rows.split(self.widths, dim=-1)
        return obs, actions, rewards.squeeze(-1), next_obs, terminations.squeeze(-1)

    def fields(self):
        return self.obs, self.actions, self.rewards, self.next_obs, self.terminations

    def add(self, obs, actions, rewards, next_obs, terminations):
        """Store one row per sub-env; arrays are (num_envs, ...)."""
        n = len(obs)
        rows = np.concatenate([np.asarray(obs, np.float32), np.asarray(actions, np.float32),
                               np.asarray(rewards, np.float32)[:, None], np.asarray(next_obs, np.float32),
                               np.asarray(terminations, np.float32)[:, None]], axis=1)
        rows = torch.from_numpy(rows).to(self.device)
        if self.pos + n <= self.capacity:
            self.storage[self.pos: self.pos + n] = rows
        else:
            self.storage[torch.arange(self.pos, self.pos + n, device=self.device) % self.capacity] = rows
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int):
        """Returns (obs, actions, rewards, next_obs, terminations) for `batch_size` uniformly drawn transitions."""
        idx = torch.randint(0, self.size, (batch_size,), device=self.device)
        return self.split(self.storage.index_select(0, idx))

    def state_dict(self):
        # contiguous copies: a view would pickle the whole preallocated storage
        return {"pos": self.pos, "size": self.size, "fields": [f[: self.size].contiguous().cpu() for f in self.fields()]}

    def load_state_dict(self, state):
        self.pos, self.size = state["pos"], state["size"]
        for storage, saved in zip(self.fields(), state["fields"]):
            storage[: self.size] = saved.to(self.device)


# ---------------------------------------------------------------------------------------------------------------------
# LOSSES
# ---------------------------------------------------------------------------------------------------------------------
def compute_loss_q(actor, qf, qf_target, batch, alpha, gamma, backup_entropy, num_subsample):
    """J_Q = sum_i E[(Q_i(s, a) - y)^2], y from `soft_q_target`   [arXiv:1812.05905 eq. 5; DEVIATION(2)]. Returns (loss, metrics)."""
    obs, actions, rewards, next_obs, terminations = batch
    with torch.no_grad():
        next_actions, next_log_prob = actor.action_log_prob(next_obs)
        idx = subsample_critics(qf.weights[0].shape[0], num_subsample, obs.device)
        next_q = qf_target(next_obs, next_actions, idx)
        y = soft_q_target(rewards, terminations, next_q, next_log_prob.squeeze(-1), alpha, gamma, backup_entropy)
    q = qf(obs, actions)
    per_critic = (q - y).pow(2).mean(dim=1)
    q_means, losses = q.detach().mean(dim=1), per_critic.detach()  # detached: logging records no autograd graph
    metrics = {"qf1_values": q_means[0], "qf2_values": q_means[1], "qf1_loss": losses[0], "qf2_loss": losses[1],
               "qf_loss": losses.mean()}
    return per_critic.sum(), metrics


def compute_loss_pi(actor, qf, obs, alpha):
    """J_pi = E_s[alpha * log pi(a|s) - min_i Q_i(s, a)], a ~ pi(.|s) reparameterized   [arXiv:1801.01290 eq. 12, with alpha].

    Gradients reach the actor only: the critics' parameters enter detached. Returns (loss, detached log_prob (B,)).
    """
    actions, log_prob = actor.action_log_prob(obs)
    q = qf(obs, actions, detach_params=True).min(dim=0).values
    log_prob = log_prob.squeeze(-1)
    return (alpha * log_prob - q).mean(), log_prob.detach()


def compute_loss_alpha(log_alpha, log_prob, target_entropy: float):
    """J(alpha) = E_a~pi[-alpha * log pi(a|s) - alpha * H-bar]   [arXiv:1812.05905 eq. 18]; log_prob is detached."""
    return (-log_alpha.exp() * (log_prob + target_entropy)).mean()


def adam_(params, grads, exp_avgs, exp_avg_sqs, step_size, bias_correction2_sqrt, betas, eps):
    """Adam in place, in torch.optim.Adam's arithmetic (no weight decay; Kingma and Ba 2015, Algorithm 1):
    m <- b1 m + (1 - b1) g,  v <- b2 v + (1 - b2) g^2,
    theta <- theta - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

    step_size = lr / (1 - b1^t) and bias_correction2_sqrt = sqrt(1 - b2^t) are 0-d tensors, so a compiled caller is
    not recompiled as t grows. Used by `--compile` only; the eager path steps torch.optim.Adam.
    """
    for param, grad, exp_avg, exp_avg_sq in zip(params, grads, exp_avgs, exp_avg_sqs):
        exp_avg.lerp_(grad, 1 - betas[0])
        exp_avg_sq.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
        param.add_(exp_avg / (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) * -step_size)


def clip_grad_norm(grads: list, max_norm: float) -> list:
    """The gradients scaled by min(1, max_norm / (||g|| + 1e-6)), ||g|| the norm of all of them together, as
    torch.nn.utils.clip_grad_norm_ scales them. Used by `--compile` only."""
    total_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    return [g * scale for g in grads]


class WithParams:
    """`module` with the tensors of `params` ({name: tensor}) as its parameters: calling it, or one of its methods
    (which run with this object as `self`, so their `self(...)` calls come here), uses them; its buffers are its own."""

    def __init__(self, module: nn.Module, params: dict):
        self.module, self.params = module, params

    def __call__(self, *inputs, **kwargs):
        return torch.func.functional_call(self.module, self.params, inputs, kwargs)

    def __getattr__(self, name):
        method = getattr(type(self.module), name, None)
        if inspect.isfunction(method):
            return lambda *args, **kwargs: method(self, *args, **kwargs)
        return getattr(self.module, name)


def functional_updates(actor, qf, qf_target, log_alpha, q_optimizer, actor_optimizer, args, target_entropy: float,
                       compile: bool = True):
    """`--compile`: the critic update (with the Polyak update when asked) and the actor (and alpha) update as two
    compiled functions, update_critic(batch, update_target) and update_actor(obs), each returning detached metrics.

    The losses are `compute_loss_q`, `compute_loss_pi` and `compute_loss_alpha` themselves. Their gradients come from
    `torch.func.grad_and_value`, and `adam_` steps on the optimizers' own state (log alpha in the actor optimizer's
    second group, as in eager mode), so checkpoints are as in eager mode. Inductor then sees each update's forward,
    backward and optimizer step as one graph: no autograd engine, and no boolean ReLU masks saved between a forward
    and a backward graph (inductor's kernel for those is slow on AVX2 CPUs). Parameters are read and written only
    through `params` and `targets`, aliases of the modules' tensors. compile=False runs the same functions eagerly.
    """
    import torch._inductor.config

    torch._inductor.config.fallback_random = True  # the policy's noise from torch's generator, as in eager mode
    params = {"q": {name: p.detach() for name, p in qf.named_parameters()},
              "pi": {name: p.detach() for name, p in actor.named_parameters()}}
    if args.autotune:
        params["pi"]["log_alpha"] = log_alpha.detach()  # stepped with the actor, in its optimizer's second group
    targets = {name: p.detach() for name, p in qf_target.named_parameters()}
    optimizers = {"q": q_optimizer, "pi": actor_optimizer}
    groups, counts = {}, {}  # per optimizer, each parameter group's (names, Adam states, coefficients)
    for key, optimizer in optimizers.items():
        names = list(params[key])  # in the optimizer's order: the module's parameters, then log alpha
        groups[key] = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not optimizer.state[p]:  # laid out as torch.optim.Adam does; a resumed run's is already there
                    optimizer.state[p].update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p),
                                              exp_avg_sq=torch.zeros_like(p))
            group_names, names = names[: len(group["params"])], names[len(group["params"]):]
            coefs = torch.zeros(()), torch.zeros(())  # lr / (1 - b1^t), sqrt(1 - b2^t), set by `set_coefs`
            groups[key].append((group_names, [optimizer.state[p] for p in group["params"]], coefs))
        counts[key] = int(groups[key][0][1][0]["step"])
    betas, eps = q_optimizer.defaults["betas"], q_optimizer.defaults["eps"]
    num_subsample = args.num_subsample_critics or args.num_critics

    def adam_step(key, grads):
        if args.grad_clip_norm is not None:  # the networks' gradients; log alpha's is not clipped (as in eager mode)
            clipped = [name for name in params[key] if name != "log_alpha"]
            grads = {**grads, **dict(zip(clipped, clip_grad_norm([grads[n] for n in clipped], args.grad_clip_norm)))}
        for group_names, states, coefs in groups[key]:
            for state in states:
                state["step"].add_(1)
            adam_([params[key][n] for n in group_names], [grads[n] for n in group_names],
                  [state["exp_avg"] for state in states], [state["exp_avg_sq"] for state in states], *coefs, betas, eps)

    def loss_q(q_params, batch):
        alpha = log_alpha.detach().exp()
        return compute_loss_q(WithParams(actor, params["pi"]), WithParams(qf, q_params), WithParams(qf_target, targets),
                              batch, alpha, args.gamma, args.backup_entropy, num_subsample)

    def loss_pi(pi_params, obs):
        alpha = pi_params["log_alpha"].detach().exp() if args.autotune else log_alpha.detach().exp()
        actor_loss, log_prob = compute_loss_pi(WithParams(actor, pi_params), WithParams(qf, params["q"]), obs, alpha)
        metrics = {"actor_loss": actor_loss.detach(), "alpha": alpha[0], "entropy": -log_prob.mean()}
        if not args.autotune:
            return actor_loss, metrics
        # one gradient for both losses: they share no parameter (alpha enters the actor loss detached, log pi the
        # alpha loss), so each parameter gets its own loss's gradient, as in eager mode
        alpha_loss = compute_loss_alpha(pi_params["log_alpha"], log_prob, target_entropy)  # DEVIATION(5)
        return actor_loss + alpha_loss, {**metrics, "alpha_loss": alpha_loss.detach()}

    def critic_step(batch, update_target: bool):
        grads, (_, metrics) = torch.func.grad_and_value(loss_q, has_aux=True)(params["q"], batch)
        adam_step("q", grads)
        if update_target:  # theta' <- tau * theta + (1 - tau) * theta'   [arXiv:1801.01290 Algorithm 1]
            for name, p in params["q"].items():
                targets[name].lerp_(p, args.tau)
        return metrics

    def actor_step(obs):
        grads, (_, metrics) = torch.func.grad_and_value(loss_pi, has_aux=True)(params["pi"], obs)
        adam_step("pi", grads)
        return metrics

    if compile:
        critic_step, actor_step = torch.compile(critic_step), torch.compile(actor_step)

    def set_coefs(key):
        counts[key] += 1
        for group, (_, _, (step_size, bias_correction2_sqrt)) in zip(optimizers[key].param_groups, groups[key]):
            step_size.fill_(group["lr"] / (1 - betas[0] ** counts[key]))
            bias_correction2_sqrt.fill_(math.sqrt(1 - betas[1] ** counts[key]))

    def update_critic(batch, update_target: bool):
        set_coefs("q")
        return critic_step(tuple(batch), update_target)

    def update_actor(obs):
        set_coefs("pi")
        return actor_step(obs)

    return update_critic, update_actor


# ---------------------------------------------------------------------------------------------------------------------
# CHECKS, EVALUATION, PROGRESS
# ---------------------------------------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for out-of-range or contradictory flags, before anything is written."""
    problems = [
        (args.total_timesteps < args.num_envs, "--total-timesteps must be at least --num-envs"),
        (args.num_envs < 1, "--num-envs must be at least 1"),
        (args.batch_size < 1, "--batch-size must be at least 1"),
        (args.buffer_size < args.num_envs, "--buffer-size must be at least --num-envs"),
        (args.batch_size > args.buffer_size,
         f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}: lower it or raise the other"),
        (args.learning_starts >= args.total_timesteps,
         f"--learning-starts {args.learning_starts} >= --total-timesteps {args.total_timesteps}: no update would run;"
         " lower --learning-starts or raise --total-timesteps"),
        (args.learning_starts < args.batch_size,
         f"--learning-starts must be at least --batch-size ({args.batch_size}) so the first batch can be drawn"),
        (not args.policy_lr > 0, "--policy-lr must be positive"),
        (not args.q_lr > 0, "--q-lr must be positive"),
        (not 0 < args.tau <= 1, "--tau must lie in (0, 1]"),
        (not 0 < args.gamma <= 1, "--gamma must lie in (0, 1]"),
        (not args.alpha >= 0, "--alpha must be non-negative"),
        (args.num_critics < 2, "--num-critics must be at least 2"),
        (args.num_subsample_critics is not None and not 1 <= args.num_subsample_critics <= args.num_critics,
         f"--num-subsample-critics must lie in [1, --num-critics={args.num_critics}]"),
        (args.utd_ratio < 1, "--utd-ratio must be at least 1"),
        (args.policy_frequency < 1, "--policy-frequency must be at least 1"),
        (args.target_network_frequency < 1, "--target-network-frequency must be at least 1"),
        (args.grad_clip_norm is not None and not args.grad_clip_norm > 0, "--grad-clip-norm must be positive"),
        (args.eval_freq < 0, "--eval-freq must be non-negative (0: evaluate only at the end)"),
        (args.eval_episodes < 1, "--eval-episodes must be at least 1"),
        (args.checkpoint_freq < 0, "--checkpoint-freq must be non-negative (0: only on SIGINT/SIGTERM)"),
        (args.log_freq < 1, "--log-freq must be at least 1"),
    ]
    for bad, message in problems:
        if bad:
            raise ConfigError(message)
    for flag, module, hint in [(args.track, "wandb", "--track"), (args.capture_video, "moviepy", "--capture-video")]:
        if flag:
            try:
                __import__(module)
            except ImportError:
                raise ConfigError(f"{hint} needs {module}: `pip install {module}`, or drop {hint}") from None


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend (inductor) would use, or None when there is none."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # a torch without inductor's cpp_builder module
        return shutil.which(os.environ.get("CXX", "g++"))
    try:
        return get_cpp_compiler()
    except Exception:  # inductor's InvalidCxxCompiler: none of its candidates is on the PATH
        return None


def resolve_compile(args: Args, device: torch.device) -> bool:
    """Whether the updates are compiled: `--compile` or `--no-compile` when given; unset, compiled on the CPU when at
    least COMPILE_MIN_STEPS env steps train and a C++ compiler is found, where the compile time (20-70 s) is repaid
    many times (README, Performance); eager on a GPU, where the compiled path is unmeasured. Raises ConfigError for
    `--compile` on the CPU without a C++ compiler."""
    if args.compile is None:
        if device.type != "cpu" or args.total_timesteps - args.learning_starts < COMPILE_MIN_STEPS:
            return False
        if cpp_compiler() is None:
            print("note: no C++ compiler found (g++, or $CXX), so the updates run eagerly, about 1.2 times slower; "
                  "install one to compile them", file=sys.stderr)
            return False
        return True
    if args.compile and device.type == "cpu" and cpp_compiler() is None:
        raise ConfigError("--compile needs a C++ compiler on the CPU (g++, or the one $CXX names) and none was found: "
                          "install one, or drop --compile")
    return args.compile


def check_env(env_id: str, render: bool = False) -> None:
    """Raise ConfigError unless env_id makes an env with flat Box observations and a bounded Box action space, and,
    with render=True, one that renders frames for --capture-video."""
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        raise ConfigError(f"{env_id} is an Atari env with discrete actions: use sac_atari.py")
    try:
        env = gym.make(env_id)
    except gym.error.DependencyNotInstalled as e:
        raise ConfigError(f"{env_id} needs an extra dependency ({e}); for MuJoCo: "
                          "pip install -r requirements/requirements-mujoco.txt") from None
    except gym.error.Error as e:
        raise ConfigError(f"unknown env id {env_id!r} ({e}); list ids with "
                          "`python -c 'import gymnasium; gymnasium.pprint_registry()'`") from None
    space, obs_space = env.action_space, env.observation_space
    env.close()
    if render:
        try:
            env = gym.make(env_id, render_mode="rgb_array")
            env.reset(seed=0)
            env.render()
            env.close()
        except Exception as e:  # a missing renderer (pygame, EGL) would otherwise fail at the first evaluation
            raise ConfigError(f"--capture-video: {env_id} cannot render ({type(e).__name__}: {e}); install its "
                              "renderer or drop --capture-video") from None
    if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1):
        raise ConfigError(f"{env_id} has {obs_space} observations; this script needs a 1-D Box: flatten them in your "
                          "env (gymnasium.wrappers.FlattenObservation) before registering it")
    if isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"{env_id} has a Discrete action space: use sac_atari.py (SAC-discrete) for it")
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(f"{env_id} has a {type(space).__name__} action space; this script needs a Box")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)) and np.all(space.high > space.low)):
        raise ConfigError(f"{env_id} has unbounded or empty action bounds; SAC's tanh squashing needs finite low < high")


def load_checkpoint(path: str) -> dict:
    """Read a checkpoint written by this script; ConfigError if it is missing or unreadable."""
    if not os.path.isfile(path):
        raise ConfigError(f"--resume {path}: no such file; pass the checkpoint.pt inside a run directory")
    try:
        # weights_only=False: the checkpoint holds pickled environments. Resume only from checkpoints you wrote.
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        env_restore(checkpoint["envs"])
        Args(**checkpoint["args"])
    except Exception as e:  # a truncated zip, a foreign pickle or missing keys all mean the same to the user
        raise ConfigError(f"--resume {path}: not a readable checkpoint of this script ({type(e).__name__}); "
                          "pass a checkpoint.pt written by --checkpoint-freq or on SIGINT/SIGTERM") from None
    return checkpoint


@torch.no_grad()
def evaluate(actor: Actor, env_id: str, episodes: int, seed: int, device="cpu", video_dir: str | None = None):
    """Returns of `episodes` episodes with the deterministic action tanh(mean); episode k is reset with seed + k.

    Draws nothing from torch's RNG, so evaluating does not change the training run.
    """
    env = gym.make(env_id, render_mode="rgb_array" if video_dir else None)
    if video_dir:
        env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda k: k == 0, disable_logger=True)
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done, episodic_return = False, 0.0
        while not done:
            mean, _ = actor(torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0))
            action = torch.tanh(mean) * actor.action_scale + actor.action_bias
            obs, reward, terminated, truncated, _ = env.step(action[0].cpu().numpy())
            episodic_return += float(reward)
            done = terminated or truncated
        returns.append(episodic_return)
    env.close()
    return np.array(returns)


def crossed(before: int, now: int, every: int) -> bool:
    """True when a multiple of `every` lies in (before, now]."""
    return every > 0 and now // every > before // every


# ---------------------------------------------------------------------------------------------------------------------
# MAIN
# ---------------------------------------------------------------------------------------------------------------------
def main(args: Args) -> dict:
    """Train; returns a summary dict. Raises ConfigError, before writing anything, on bad flags, envs or checkpoints."""
    checkpoint = load_checkpoint(args.resume) if args.resume else None
    if checkpoint is not None:
        args = Args(**{**checkpoint["args"], "resume": args.resume})
    check_args(args)
    if args.capture_video and not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering; read when mujoco is first imported
    if args.capture_video:
        # torch's CUDA wheels bring triton, which the optimizers import at their first step; loaded after MuJoCo has
        # made an EGL context, triton's library segfaults (torch 2.14.1+cu130, mujoco 4.0.0), so load it first
        __import__("torch._dynamo")  # (an import statement here would make `torch` local to main)
    check_env(args.env_id, render=args.capture_video)

    # SEEDING AND DEVICE
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    args = replace(args, compile=resolve_compile(args, device))  # what a checkpoint resumes with

    if checkpoint:
        run_name, run_dir = checkpoint["run_name"], os.path.dirname(os.path.abspath(args.resume))
    else:
        run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = f"runs/{run_name}"
    if args.track:
        import wandb

        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=asdict(args),
                   name=run_name, id=run_name, resume="allow", save_code=True)
    from torch.utils.tensorboard import SummaryWriter

    # purge_step drops events a killed run logged after its last checkpoint
    writer = SummaryWriter(run_dir, purge_step=checkpoint["counters"][0] + 1 if checkpoint else None)
    if not checkpoint:
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in
                                                                                 asdict(args).items()))

    if checkpoint:
        sub_envs, exact_resume = env_restore(checkpoint["envs"])
        envs = vector_env([lambda env=env: env for env in sub_envs])
    else:
        envs = vector_env([make_env(args.env_id) for _ in range(args.num_envs)])
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    act_dim = int(np.prod(envs.single_action_space.shape))

    actor = Actor(envs).to(device)
    qf = QEnsemble(envs, args.num_critics).to(device)
    qf_target = QEnsemble(envs, args.num_critics).to(device)
    qf_target.load_state_dict(qf.state_dict())
    qf_target.requires_grad_(False)
    if args.compile:  # `functional_updates` steps Adam itself, on these optimizers' state
        q_optimizer = torch.optim.Adam(qf.parameters(), lr=args.q_lr)
        actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr)
    else:
        qf_flat, actor_flat = flatten_parameters(qf), flatten_parameters(actor)
        qf_target_flat = flatten_parameters(qf_target, grad=False)
        fused = {"fused": True} if device.type in ("cpu", "cuda") else {}  # one Adam kernel for all tensors
        q_optimizer = torch.optim.Adam([qf_flat], lr=args.q_lr, **fused)
        actor_optimizer = torch.optim.Adam([actor_flat], lr=args.policy_lr, **fused)
    # H-bar = -|A| (arXiv:1812.05905, Sec. 5)
    target_entropy = -float(act_dim) if args.target_entropy is None else args.target_entropy
    log_alpha = torch.zeros(1, device=device, requires_grad=True)
    if args.autotune:  # log alpha's Adam: a parameter group of the actor's optimizer, with its own learning rate
        actor_optimizer.add_param_group({"params": [log_alpha], "lr": args.q_lr})
    if not args.autotune:
        log_alpha.data.fill_(math.log(args.alpha) if args.alpha > 0 else -math.inf)
    rb = ReplayBuffer(args.buffer_size, obs_dim, act_dim, device)
    num_subsample = args.num_subsample_critics or args.num_critics
    grad_clip = args.grad_clip_norm

    # UPDATE FUNCTIONS: take a batch, step an optimizer, return detached metrics (no host sync)
    def update_critic(batch):
        loss, metrics = compute_loss_q(actor, qf, qf_target, batch, log_alpha.exp().detach(), args.gamma,
                                       args.backup_entropy, num_subsample)
        qf_flat.grad.zero_()
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(qf_flat, grad_clip)
        q_optimizer.step()
        return metrics

    def update_actor(obs):
        alpha = log_alpha.exp().detach()
        actor_loss, log_prob = compute_loss_pi(actor, qf, obs, alpha)
        metrics = {"actor_loss": actor_loss.detach(), "alpha": alpha[0], "entropy": -log_prob.mean()}
        loss = actor_loss
        if args.autotune:
            alpha_loss = compute_loss_alpha(log_alpha, log_prob, target_entropy)  # DEVIATION(5)
            metrics["alpha_loss"] = alpha_loss.detach()
            # one backward and one Adam step for both: the two losses share no parameter (alpha enters the actor loss
            # detached, log pi the alpha loss), so each parameter gets its own loss's gradient
            loss = actor_loss + alpha_loss
            log_alpha.grad = None
        actor_flat.grad.zero_()
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(actor_flat, grad_clip)
        actor_optimizer.step()
        return metrics

    @torch.no_grad()
    def update_targets():
        # theta' <- tau * theta + (1 - tau) * theta'   [arXiv:1801.01290 Algorithm 1]
        qf_target_flat.lerp_(qf_flat, args.tau)

    def update_critic_step(batch, update_target: bool):
        metrics = update_critic(batch)
        if update_target:
            update_targets()
        return metrics

    global_step = critic_updates = actor_updates = update_steps = 0
    last_return = None
    stateful = {"actor": actor, "qf": qf, "qf_target": qf_target, "q_optimizer": q_optimizer,
                "actor_optimizer": actor_optimizer, "rb": rb}
    if checkpoint:
        for key, module in stateful.items():
            module.load_state_dict(checkpoint[key])
        log_alpha.data.copy_(checkpoint["log_alpha"])
        global_step, critic_updates, actor_updates, update_steps = checkpoint["counters"]
        last_return = checkpoint["last_return"]
        obs = checkpoint["obs"]
        torch.set_rng_state(checkpoint["rng"]["torch"])
        np.random.set_state(checkpoint["rng"]["numpy"])
        random.setstate(checkpoint["rng"]["random"])
        if device.type == "cuda" and checkpoint["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        if not exact_resume:
            print(f"warning: {args.env_id}'s state cannot be saved; episodes in progress restart", file=sys.stderr)
            obs, _ = envs.reset(seed=args.seed + global_step)
        print(f"resumed {run_dir} at step {global_step:,}")
    else:
        obs, _ = envs.reset(seed=args.seed)
    if args.compile:  # after a resume has loaded the optimizers' state
        print("the updates are compiled at the first one: 20-70 s on a 2-core CPU (--no-compile: eager)")
        update_critic_step, update_actor = functional_updates(actor, qf, qf_target, log_alpha, q_optimizer,
                                                              actor_optimizer, args, target_entropy)

    def save_checkpoint():
        state = {key: module.state_dict() for key, module in stateful.items()}
        state.update(args=asdict(args), run_name=run_name, log_alpha=log_alpha.detach().cpu(), obs=obs,
                     counters=(global_step, critic_updates, actor_updates, update_steps), last_return=last_return,
                     envs=env_snapshot(envs),
                     rng={"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate(),
                          "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else []})
        path = f"{run_dir}/checkpoint.pt"
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # atomic: a reader sees the old checkpoint or the new one, never half of one
        return path

    stop_signal = []
    handlers = {sig: signal.signal(sig, lambda signum, frame: stop_signal.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    tty = sys.stdout.isatty()
    total_steps = args.total_timesteps // args.num_envs * args.num_envs
    start_time = last_print = time.time()
    start_step, train_start = global_step, None
    critic_metrics = actor_metrics = None
    eval_return = None

    def run_evaluation():
        video_dir = f"{run_dir}/videos/step_{global_step}" if args.capture_video else None  # one folder per evaluation
        mean_return = evaluate(actor, args.env_id, args.eval_episodes, args.seed + EVAL_SEED_OFFSET, device,
                               video_dir).mean()
        writer.add_scalar("eval/episodic_return", mean_return, global_step)
        return mean_return

    try:
        while global_step < total_steps and not stop_signal:
            # COLLECT: random actions for the first learning_starts steps (DEVIATION(6)), then a ~ pi(.|s)
            if global_step < args.learning_starts:
                u = torch.rand((args.num_envs, act_dim), device=device) * 2.0 - 1.0
                actions = (u * actor.action_scale + actor.action_bias).cpu().numpy()
            else:
                with torch.no_grad():
                    actions = actor.sample(torch.as_tensor(obs, dtype=torch.float32, device=device))[0].cpu().numpy()
            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            previous_step, global_step = global_step, global_step + args.num_envs

            if "final_info" in infos and "_episode" in infos["final_info"]:
                episode = infos["final_info"]["episode"]
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    last_return = float(episode["r"][i])
                    writer.add_scalar("charts/episodic_return", last_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(episode["l"][i]), global_step)

            # STORE: bootstrap through truncations, never through terminations: s' is the true final observation and
            # `terminations` alone masks the target. SAME_STEP autoreset means no stored transition spans a reset.
            rb.add(obs, actions, rewards, final_observations(next_obs, infos), terminations)
            obs = next_obs

            # UPDATE: every env step brings utd_ratio critic updates; every policy_frequency-th brings
            # policy_frequency actor updates (DEVIATION(4))
            if global_step >= args.learning_starts:
                train_start = train_start or (time.time(), global_step)
                for _ in range(args.num_envs):
                    for _ in range(args.utd_ratio):
                        batch = rb.sample(args.batch_size)
                        critic_updates += 1
                        update_target = critic_updates % args.target_network_frequency == 0
                        critic_metrics = update_critic_step(batch, update_target)
                    update_steps += 1
                    if update_steps % args.policy_frequency == 0:
                        for _ in range(args.policy_frequency):
                            actor_metrics = update_actor(batch[0])
                            actor_updates += 1

            # LOG
            if crossed(previous_step, global_step, args.log_freq) and critic_metrics is not None:
                for key, value in {**critic_metrics, **(actor_metrics or {})}.items():
                    writer.add_scalar(f"losses/{key}", value.item(), global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)),
                                  global_step)

            # EVALUATE
            if crossed(previous_step, global_step, args.eval_freq):
                eval_return = run_evaluation()
                print(("\n" if tty else "") + f"step {global_step:,}: eval/episodic_return {eval_return:.2f}")

            if crossed(previous_step, global_step, args.checkpoint_freq):
                save_checkpoint()
            if time.time() - last_print > PROGRESS_SECONDS[0 if tty else 1]:
                last_print = time.time()
                sps = (global_step - start_step) / (last_print - start_time)
                done = global_step / total_steps
                line = (f"step {global_step:,}/{total_steps:,} ({100 * done:.1f}%)  SPS {sps:.0f}"
                        f"  last return {'-' if last_return is None else f'{last_return:.2f}'}")
                if tty:
                    bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
                    print(f"\r[{bar}] {line}", end="", flush=True)
                else:
                    print(line, flush=True)

        # env steps per second after learning started: stepping, sampling and updating
        train_sps = (global_step - train_start[1]) / (time.time() - train_start[0]) if train_start else None
        if tty:
            print()
        if stop_signal:
            path = save_checkpoint()
            print(f"stopped by signal {stop_signal[0]} at step {global_step:,}; checkpoint written to {path}; "
                  f"continue with --resume {path}")
        else:
            if not crossed(global_step - args.num_envs, global_step, args.eval_freq):
                eval_return = run_evaluation()
            print(f"step {global_step:,}: final eval/episodic_return {eval_return:.2f}")
            if args.save_model:
                model = {"actor": actor.state_dict(), "qf": qf.state_dict(), "log_alpha": log_alpha.detach().cpu(),
                         "args": asdict(args)}
                torch.save(model, f"{run_dir}/model.pt")
                print(f"model saved to {run_dir}/model.pt")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        envs.close()
        writer.close()
        if args.track:
            wandb.finish()

    if train_sps is not None:
        print(f"training-phase SPS: {train_sps:.1f}")
    return {"run_dir": run_dir, "global_step": global_step, "critic_updates": critic_updates,
            "actor_updates": actor_updates, "eval_return": eval_return, "train_sps": train_sps,
            "stopped_by": stop_signal[0] if stop_signal else None}


def parse_args(argv=None) -> Args:
    """tyro's parser, its boxed errors (an unknown flag, a value that does not parse or is missing) cut to one line on
    stderr and exit code 2, like the checks of `check_args`."""
    box = io.StringIO()
    try:
        with contextlib.redirect_stderr(box):
            return tyro.cli(Args, args=argv)
    except SystemExit as e:
        if not e.code:  # --help
            sys.stderr.write(box.getvalue())
            raise
        message = []  # the box's first section, between its title and the first rule, is the message
        for line in box.getvalue().splitlines()[1:]:
            text = line.strip("│╭╮╰╯ ")
            if text and set(text) <= {"─"}:
                break
            message.append(text)
        message = " ".join(" ".join(message).split()) or " ".join(box.getvalue().split())
        print(f"error: {message.rstrip('.')}; see --help", file=sys.stderr)
        raise SystemExit(2) from None


def cli(argv=None) -> dict:
    """Command-line entry: bad input ends in one line on stderr and exit code 2; a stop by signal exits 128 + signum."""
    args = parse_args(argv)
    try:
        summary = main(args)
    except ConfigError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)  # one line, whatever a library's message holds
        raise SystemExit(2) from None
    if summary["stopped_by"]:
        raise SystemExit(128 + summary["stopped_by"])
    return summary


if __name__ == "__main__":
    cli()
