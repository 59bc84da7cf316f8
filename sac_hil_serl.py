"""HIL-SERL's Soft Actor-Critic for robot learning (LeRobot's SAC policy): image and state
observations through DrQ or ResNet-10 encoders, offline and mixed data (RLPD), the discrete gripper
critic, critic ensembles. Plain SAC for state observations is sac_continuous_action.py; this file
repeats its core (Args, the losses, the updates) on purpose.

Papers:
    Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic
        Actor", arXiv:1801.01290
    Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (automatic alpha),
        arXiv:1812.05905
    Chen et al. 2021, "Randomized Ensembled Double Q-Learning" (critic ensembles, subsampled min,
        UTD), arXiv:2101.05982
    Ball et al. 2023, "Efficient Online RL with Offline Data" (RLPD: LayerNorm in the critics),
        arXiv:2302.02948
    van Hasselt et al. 2016, "Deep RL with Double Q-learning" (the discrete gripper critic's
        target), arXiv:1509.06461
    Kostrikov et al. 2020, "Image Augmentation Is All You Need: Regularizing Deep RL from Pixels"
        (DrQ: the CNN and the random shift), arXiv:2004.13649
    Luo et al. 2024, "Precise and Dexterous Robotic Manipulation via Human-in-the-Loop
        Reinforcement Learning" (HIL-SERL: interventions, the gripper critic, RLPD's mixing),
        arXiv:2410.21845

Example:
    python sac_hil_serl.py --env-id InvertedPendulum-v5 --from-pixels --image-size 64 --seed 1

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
    7. With --num-discrete-actions and a shared encoder, the discrete critic reads the encoder's
       features detached, as the actor does, and its target reads the target critics' encoder;
       LeRobot's lets its loss train the encoder.
    8. --image-pooling spatial's dropout acts in gradient steps only and its head is 50 wide
       (LeRobot: in train mode, 256 wide).
    9. DrQ's shift is drawn once per sampled image, for one target (K = M = 1); the DrQ paper's main
       results average K = M = 2.
    10. Defaults are plain SAC's where LeRobot's differ: H-bar = -|A| (LeRobot: -|A| / 2), q_lr 1e-3
        (3e-4), a trained CNN (frozen) and no gradient clip (40).
"""

import ast
import contextlib
import functools
import gc
import importlib.util
import io
import json
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
import threading
import time
import warnings
import zipfile
from dataclasses import asdict, dataclass, replace
from typing import Literal

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
    q_lr: float = 1e-3  # DEVIATION(10)
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
    max_grad_norm: float | None = None  # DEVIATION(10)
    """clip the gradient norm of the actor and the critics to this value; unset: no clipping
    (LeRobot's HIL-SERL: 40; the HIL-SERL authors' code: none)"""
    critic_layer_norm: bool = False
    """normalise each hidden layer of the critics with LayerNorm, before its ReLU (RLPD,
    arXiv:2302.02948)"""
    from_pixels: bool = False
    """observe a rendered frame of --image-size pixels beside the env's own observation, as a Dict
    (pixels, state)"""
    image_size: int | None = None
    """--from-pixels' frame size in pixels, unset 84 (DrQ); an env's own images are resized to it
    (unset: as they come)"""
    frame_stack: int = 1
    """with --from-pixels, observe the last k frames, stacked on the channel axis (DrQ,
    arXiv:2004.13649: 3)"""
    augment: bool = True
    """shift each image of a batch at random by up to 4 pixels (DrQ's random shift,
    arXiv:2004.13649)"""
    shared_encoder: bool = True
    """with Dict observations, one image encoder, trained by the critics and read detached by the
    actor (HIL-SERL)"""
    image_pooling: Literal["flatten", "spatial"] = "flatten"
    """how the CNN's maps become a vector: flattened (DrQ), or each channel pooled by 8 learned maps
    (HIL-SERL)"""
    freeze_image_encoder: bool = False  # DEVIATION(10)
    """train no CNN weight (pooling and head still train); the replay keeps each frame's features,
    157 kB at 84 px (DrQ)"""
    image_encoder_weights: str | None = None
    """the CNN is HIL-SERL's ResNet-10 with this file's weights (helper2424/resnet10's; the page
    shows how to save them)"""
    save_replay: str | None = None
    """write the replay buffer to this new .npz (not one already there) at the end and on Ctrl-C or
    SIGTERM, for a later --offline-data"""
    offline_data: str | None = None
    """train on this .npz of transitions (written by --save-replay) too: a share of each batch comes
    from it (RLPD)"""
    offline_ratio: float | None = None
    """share of each batch drawn from the demo buffer once it holds that many; unset: 0.5, RLPD's
    symmetric sampling"""
    offline_steps: int = 0
    """update steps on --offline-data alone before the first env step (not in HIL-SERL, LeRobot)"""
    num_discrete_actions: int = 0
    """K gripper commands in the last action dimension, by a discrete critic (HIL-SERL); 0: off"""
    gripper_epsilon: float = 0.1
    """chance of a random gripper command in training (epsilon-greedy; DQN's final epsilon, Nature
    2015)"""
    discrete_q_lr: float | None = None
    """learning rate of the gripper critic's Adam; unset: --q-lr"""
    demo_buffer_size: int = 100_000
    """transitions the demo buffer holds: --offline-data's, then each step a person drove
    (LeRobot's offline_buffer_capacity)"""
    role: Literal["local", "learner", "actor", "both"] = "local"
    """local: one loop; learner, actor: apart (--learner-address); both: learner and child actor"""
    learner_address: str = "tcp://127.0.0.1:5555"
    """ZeroMQ address the learner binds (a port * takes a free one) and actors connect to"""
    actor_id: int = 0
    """this actor's id among one learner's; it seeds with --seed + id, and goes on with its rows"""
    control_hz: float = 10.0
    """the actor's env steps per second, on a deadline schedule (LeRobot's: 10); 0: no limit"""
    outbox_size: int = 10_000
    """rows an actor keeps until the learner's checkpoint holds them; when full, the actor waits"""
    network_timeout: float = 30.0
    """seconds an actor waits for the learner (start, pause, end), a learner for a silent actor"""


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # DEVIATION(3)
HIDDEN = 256  # units per hidden layer (SAC paper, Table 1); also the state encoding's width (HIL-SERL latent_dim)
LOG_2PI = math.log(2 * math.pi)
PIXELS = 84  # --from-pixels' frame size unless --image-size sets it (DrQ, arXiv:2004.13649)
IMAGE_FEATURES = 50  # an image's encoding width (DrQ, SAC-AE)
SPATIAL_FEATURES = 8  # SpatialEmbedding's K, learned maps per channel (HIL-SERL's image_embedding_pooling_dim)
IMAGENET = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])  # mean and std of each colour


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


def double_dqn_target(rewards, terminations, next_q, next_q_target, gamma: float):
    """Shapes: rewards, terminations (B,); next_q, next_q_target (B, K), Q_d(s', .) and the target
    network's Q_d'(s', .). y = r + gamma * (1 - terminated) * Q_d'(s', argmax_a Q_d(s', a))
    [arXiv:1509.06461 eq. 4; HIL-SERL]"""
    best = next_q.argmax(dim=-1, keepdim=True)  # the online network picks the command, the target network values it
    return rewards + gamma * (1.0 - terminations) * next_q_target.gather(-1, best).squeeze(-1)


def random_shift(images: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """DrQ's shift (arXiv:2004.13649, Sec. 3.1): images (B, C, H, W) edge-padded by `pad`, cropped
    at uniform offsets."""
    n, _, h, w = images.shape
    padded = F.pad(images, (pad,) * 4, mode="replicate")
    dy, dx = torch.randint(0, 2 * pad + 1, (2, n, 1, 1), device=images.device)
    rows, cols = torch.arange(h, device=images.device)[:, None] + dy, torch.arange(w, device=images.device) + dx
    return padded[torch.arange(n, device=images.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)


def gripper_levels(action_space, k: int) -> np.ndarray:
    """The values of the gripper's k commands: k evenly spaced points of the last action dimension's
    [low, high]."""
    return np.linspace(action_space.low[-1], action_space.high[-1], k, dtype=np.float32)


# LOSSES AND UPDATES
# --------------------------------------------------------------------------------------------------
def compute_loss_q(actor, qf, qf_target, batch, alpha, gamma, backup_entropy, num_subsample):
    """J_Q = sum_i E[(Q_i(s, a) - y)^2], y from `soft_q_target`   [arXiv:1812.05905 eq. 5;
    DEVIATION(2)]. Returns (loss, metrics)."""
    obs, actions, rewards, next_obs, terminations, _ = batch  # the last, the gripper's penalties, is Q_d's
    with torch.no_grad():
        next_actions, next_log_prob, _ = actor.get_action(next_obs)
        idx = subsample_critics(qf.weights[0].shape[0], num_subsample, actions.device)
        next_q = qf_target(next_obs, next_actions, idx)
        y = soft_q_target(rewards, terminations, next_q, next_log_prob.squeeze(-1), alpha, gamma, backup_entropy)
    q = qf(obs, actions[:, : next_actions.shape[-1]])  # the arm's dimensions: a gripper's value is Q_d's
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


def compute_loss_discrete_q(dq, dq_target, batch, levels, gamma: float):
    """J_d = E[(Q_d(s, g) - y)^2], g the command the env received, y `double_dqn_target`'s
    (HIL-SERL); (loss, metrics)"""
    obs, actions, rewards, next_obs, terminations, penalties = batch
    g = (actions[:, -1:] - levels).abs().argmin(dim=-1, keepdim=True)  # the stored value back to its command's index
    with torch.no_grad():  # r + info["discrete_penalty"]: the cost of moving the gripper, Q_d's alone (LeRobot's)
        y = double_dqn_target(rewards + penalties, terminations, dq(next_obs), dq_target(next_obs), gamma)
    q = dq(obs).gather(-1, g).squeeze(-1)
    loss = (q - y).pow(2).mean()
    return loss, {"discrete_qf_loss": loss.detach(), "discrete_qf_values": q.detach().mean()}


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


# NETWORKS: THE CRITICS, THE ACTOR, THE IMAGE ENCODERS AND THE GRIPPER'S CRITIC
# --------------------------------------------------------------------------------------------------
class QEnsemble(nn.Module):
    """N soft Q networks Q_i(s, a), each 256-256-1 with ReLU on one shared `Encoder`'s features of s
    (a flat s passes through it unchanged), in one batched pass: layer weights are stacked to (N,
    in, out) for `torch.baddbmm`. Each member is initialised as `nn.Linear` is: U(+-1/sqrt(fan_in)).
    With layer_norm, each hidden layer is Linear, LayerNorm (its own gain and bias per member, eps
    1e-5), ReLU, as RLPD's."""

    def __init__(self, envs, num_critics: int = 2, layer_norm: bool = False, gripper: bool = False, **image):
        super().__init__()
        self.encoder = Encoder(envs.single_observation_space, **image)
        obs_dim = self.encoder.out_dim
        act_dim = int(np.prod(envs.single_action_space.shape)) - gripper  # the arm's: a gripper's is DiscreteQ's
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
        gradient into the critics or their encoder."""
        features = self.encoder(obs)
        x = torch.cat([features.detach() if detach_params else features, actions], dim=-1)
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
    """Tanh-squashed Gaussian policy with CleanRL's interface: Actor(envs), forward, get_action;
    with a gripper, over the other action dimensions. It reads s through its own `Encoder` or, given
    the critics' (--shared-encoder), through theirs, detached: its loss trains no encoder
    (HIL-SERL's rule)."""

    def __init__(self, envs, shared_encoder=None, gripper: bool = False):
        super().__init__()
        self.encoder = Encoder(envs.single_observation_space) if shared_encoder is None else None
        self.shared = [shared_encoder] if shared_encoder else []  # in a list: not registered, not in .parameters()
        act_dim = int(np.prod(envs.single_action_space.shape)) - gripper
        self.fc1 = nn.Linear((shared_encoder or self.encoder).out_dim, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc_mean = nn.Linear(HIDDEN, act_dim)
        self.fc_logstd = nn.Linear(HIDDEN, act_dim)
        high, low = envs.single_action_space.high[:act_dim], envs.single_action_space.low[:act_dim]
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def features(self, obs):
        return self.encoder(obs) if self.encoder is not None else self.shared[0](obs).detach()

    def forward(self, obs):
        """Returns (mean, log_std), each (B, |A|), log_std in [LOG_STD_MIN, LOG_STD_MAX]."""
        x = F.relu(self.fc2(F.relu(self.fc1(self.features(obs)), inplace=True)), inplace=True)
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


def channels_first(shape) -> bool:
    """Whether an image of this shape, (C, H, W) or (H, W, C), has its channels first: its first
    axis is shorter than its last."""
    return shape[0] < shape[-1]


def to_tensors(obs, device):
    """Observations (B, ...) as float32: a Dict's vectors flattened, its uint8 images made (B, C, H,
    W) in [0, 1]."""
    if not isinstance(obs, dict):
        return torch.as_tensor(obs, dtype=torch.float32, device=device)
    out = {}
    for key, x in obs.items():
        x = torch.as_tensor(np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x, device=device)
        out[key] = (
            (x if channels_first(x.shape[1:]) else x.permute(0, 3, 1, 2)).float() / 255
            if x.dtype == torch.uint8
            else x.reshape(len(x), -1).float()
        )
    return out


class Encoder(nn.Module):
    """HIL-SERL's SACObservationEncoder: a flat Box passes; a Dict's images each through a CNN
    (DrQ's or ResNet-10; `frozen`: no gradient), a pooling (flatten or spatial) and a head, its
    vectors through theirs; all concatenated."""

    def __init__(self, obs_space, pooling: str = "flatten", weights: str | None = None, frozen: bool = False):
        super().__init__()
        spaces = obs_space.spaces if isinstance(obs_space, gym.spaces.Dict) else {}
        self.images = [key for key, space in spaces.items() if space.dtype == np.uint8]
        self.vectors = [key for key in spaces if key not in self.images]
        self.cnns, self.heads, self.maps = nn.ModuleDict(), nn.ModuleDict(), {}  # of each image
        for key in self.images:
            shape = spaces[key].shape if channels_first(spaces[key].shape) else np.roll(spaces[key].shape, 1)
            # DrQ's CNN (arXiv:2004.13649 App. B, from SAC-AE, arXiv:1910.01741), each convolution
            # with a ReLU: conv1 C -> 32 channels, 3x3, stride 2; conv2, conv3, conv4 32 -> 32, 3x3,
            # stride 1 (84 px: 41, 39, 37, 35)
            self.cnns[key] = (
                ResNet10(int(shape[0]), weights)
                if weights
                else nn.Sequential(
                    nn.Conv2d(int(shape[0]), 32, 3, stride=2),
                    nn.ReLU(),
                    *(m for _ in range(3) for m in (nn.Conv2d(32, 32, 3), nn.ReLU())),
                )
            )
            with torch.no_grad():
                maps = self.cnns[key].requires_grad_(not frozen)(torch.zeros(1, *map(int, shape))).shape[1:]
            pool = SpatialEmbedding(*maps) if pooling == "spatial" else nn.Flatten()
            head = (
                nn.Linear(maps[0] * SPATIAL_FEATURES if pooling == "spatial" else maps.numel(), IMAGE_FEATURES),
                nn.LayerNorm(IMAGE_FEATURES),
                nn.Tanh(),
            )  # the head: Linear to 50 features (DrQ), LayerNorm, Tanh
            self.heads[key], self.maps[key] = nn.Sequential(pool, *head), maps
        state_dim = sum(int(np.prod(spaces[key].shape)) for key in self.vectors)  # the vectors: Linear, LayerNorm, Tanh
        self.state = nn.Sequential(nn.Linear(state_dim, HIDDEN), nn.LayerNorm(HIDDEN), nn.Tanh()) if state_dim else None
        self.out_dim = IMAGE_FEATURES * len(self.images) + HIDDEN * bool(state_dim) if spaces else obs_space.shape[0]

    def forward(self, obs):
        if not isinstance(obs, dict):
            return obs
        parts = []
        for key in self.images:  # with --freeze-image-encoder the replay gives the CNN's features it stored of a frame
            cached = obs.get(f"{key}/features")
            maps = self.cnns[key](obs[key]) if cached is None else cached.unflatten(1, self.maps[key])
            parts.append(self.heads[key](maps))
        vectors = [self.state(torch.cat([obs[key] for key in self.vectors], dim=-1))] if self.vectors else []
        return torch.cat(parts + vectors, dim=-1)


class SpatialEmbedding(nn.Module):
    """HIL-SERL's SpatialLearnedEmbeddings: each channel of the maps x (B, C, H, W) pooled by K
    learned maps, e[b, c, k] = sum_{h, w} x[b, c, h, w] * W[c, h, w, k], flattened to (B, C K); then
    dropout, p 0.1 (LeRobot's)."""

    def __init__(self, channels: int, height: int, width: int):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(channels, height, width, SPATIAL_FEATURES))
        nn.init.kaiming_normal_(self.kernel, mode="fan_in", nonlinearity="linear")  # LeRobot's

    def forward(self, maps):  # DEVIATION(8): dropout in gradient steps only; acting and targets see none (eval mode's)
        return F.dropout(torch.einsum("bchw,chwk->bck", maps, self.kernel).flatten(1), 0.1, torch.is_grad_enabled())


def same_padded(x, kernel: int, stride: int, value: float = 0.0):
    """x padded as JAX's 'SAME' pads (HIL-SERL's ResNet-10 was trained in JAX): the odd pixel at
    the bottom and right."""
    pads = []
    for size in (x.shape[-1], x.shape[-2]):  # F.pad's order: the last dimension first
        total = max(0, (math.ceil(size / stride) - 1) * stride + kernel - size)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value)


class BasicBlock(nn.Module):
    """ResNet's basic block (arXiv:1512.03385) as HIL-SERL's ResNet-10 has it: relu(norm2(conv2(
    relu(norm1(conv1(x))))) + shortcut(x)), GroupNorms of 4 groups, 3 x 3 convolutions padded
    'SAME' (at stride 1, one pixel each side)."""

    def __init__(self, c_in: int, c: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv1, self.norm1 = nn.Conv2d(c_in, c, 3, stride, bias=False), nn.GroupNorm(4, c)
        self.conv2, self.norm2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.GroupNorm(4, c)
        shortcut = nn.Sequential(nn.Conv2d(c_in, c, 1, stride, bias=False), nn.GroupNorm(4, c))
        self.shortcut = shortcut if c_in != c else nn.Identity()

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(same_padded(x, 3, self.stride))))
        return F.relu(self.norm2(self.conv2(y)) + self.shortcut(x))


class ResNet10(nn.Module):
    """HIL-SERL's pretrained encoder (helper2424/resnet10, LeRobot's): a 7 x 7 stem, a 'SAME' max
    pool and four basic blocks of 64 to 512 channels, no pooling after; 512 maps at 1/32 of the
    image's size."""

    def __init__(self, channels: int, weights: str | None = None):
        super().__init__()
        self.embedder = nn.Sequential(nn.Conv2d(channels, 64, 7, 2, 3, bias=False), nn.GroupNorm(4, 64), nn.ReLU())
        self.stages = nn.ModuleList(BasicBlock(max(64, c // 2), c, 1 if c == 64 else 2) for c in (64, 128, 256, 512))
        if weights:  # else its own random weights (as tests write them); `check_encoder_weights` read the file
            self.load_state_dict(resnet10_names(torch.load(weights, "cpu", weights_only=True)))

    def forward(self, images):  # ImageNet's mean and std of each colour, repeated over a stack's frames
        mean, std = (x.repeat(images.shape[1] // 3 + 1)[: images.shape[1], None, None].to(images) for x in IMAGENET)
        x = self.embedder((images - mean) / std)
        x = F.max_pool2d(same_padded(x, 3, 2, -math.inf), 3, 2)
        for stage in self.stages:
            x = stage(x)
        return x


def resnet10_names(state: dict) -> dict:
    """A state dict in helper2424/resnet10's names (`encoder.stages.0.conv1.conv.weight`, of each
    of its versions) or in ours (`stages.0.conv1.weight`), in ours."""
    return {re.sub(r"^encoder\.|conv\.(?=weight)|group_norm\.", "", key): value for key, value in state.items()}


class DiscreteQ(nn.Module):
    """HIL-SERL's discrete critic Q_d(s, .) of the gripper's K commands: 256-256-K with ReLU on
    features of s."""

    def __init__(self, envs, k: int, shared_encoder=None):
        super().__init__()
        self.encoder = Encoder(envs.single_observation_space) if shared_encoder is None else None
        self.shared = [shared_encoder] if shared_encoder else []  # in a list: not registered, not in .parameters()
        self.net = nn.Sequential(
            nn.Linear((shared_encoder or self.encoder).out_dim, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, k),
        )

    features = Actor.features

    def forward(self, obs):
        return self.net(self.features(obs))


class Gripper:
    """--num-discrete-actions K: the last action dimension is one of K commands chosen by Q_d, with
    its own Adam and Polyak target, updated eagerly; its encoder is its own, or the critics' read
    detached (target's: DEVIATION(7))."""

    def __init__(self, args, envs, qf, qf_target, share: bool, device):
        k, fused = args.num_discrete_actions, {"fused": True} if device.type in ("cpu", "cuda") else {}
        self.dq, dq_target = (DiscreteQ(envs, k, q.encoder if share else None).to(device) for q in (qf, qf_target))
        self.dq_target = target_of(self.dq, dq_target)
        self.polyak_lists = list(self.dq_target.parameters()), list(self.dq.parameters())  # once
        self.optimizer = torch.optim.Adam(self.dq.parameters(), lr=args.discrete_q_lr or args.q_lr, **fused)
        self.levels = torch.as_tensor(gripper_levels(envs.single_action_space, k), device=device)
        self.stateful, self.args = dict(dq=self.dq, dq_target=self.dq_target, dq_optimizer=self.optimizer), args

    def act(self, x, global_step: int | None = None):
        """(B, 1) values of g = argmax_a Q_d(s, a); in training (at a global_step), uniform with
        probability epsilon."""
        with torch.no_grad():
            g = self.dq(x).argmax(dim=-1)
        if global_step is not None:  # epsilon: 1 for the first learning_starts steps, then --gripper-epsilon
            epsilon = 1.0 if global_step < self.args.learning_starts else self.args.gripper_epsilon
            g = torch.where(torch.rand(len(g), device=g.device) < epsilon, torch.randint_like(g, len(self.levels)), g)
        return self.levels[g, None]

    def update(self, batch, update_target: bool) -> dict:  # a step on J_d, and of the target; detached metrics
        loss, metrics = compute_loss_discrete_q(self.dq, self.dq_target, batch, self.levels, self.args.gamma)
        optimizer_step(self.optimizer, loss, self.dq, self.args.max_grad_norm)
        if update_target:
            polyak_update(*self.polyak_lists, self.args.tau)
        return metrics


def networks(args, envs, device) -> tuple:
    """(actor, qf, qf_target, grip): the critics on their `Encoder` and its Polyak-averaged copy;
    the actor on the critics' encoder, read detached (--shared-encoder with Dict observations,
    HIL-SERL's), or on its own; with --num-discrete-actions, the gripper's critic, else None."""
    gripper = args.num_discrete_actions > 0
    share = args.shared_encoder and isinstance(envs.single_observation_space, gym.spaces.Dict)
    actor = None if share else Actor(envs, gripper=gripper).to(device)  # first, as the seed's draws have gone
    image = dict(pooling=args.image_pooling, weights=args.image_encoder_weights, frozen=args.freeze_image_encoder)
    qf = QEnsemble(envs, args.num_critics, args.critic_layer_norm, gripper, **image).to(device)
    qf_target = QEnsemble(envs, args.num_critics, args.critic_layer_norm, gripper, **image).to(device)
    actor = actor or Actor(envs, qf.encoder, gripper).to(device)
    qf_target = target_of(qf, qf_target)  # with the critics' encoder: a Polyak-averaged copy, as theirs
    if args.freeze_image_encoder:  # a frozen CNN has nothing to track: the target reads the critics', stored once
        qf_target.encoder.cnns = qf.encoder.cnns
    grip = Gripper(args, envs, qf, qf_target, share, device) if gripper else None  # its own critic and Adam
    return actor, qf, qf_target, grip


def greedy_policy(actor, grip, device):
    """The deterministic policy, numpy in and out: tanh(mean) * scale + bias, and the greedy gripper
    command."""

    def policy(obs):
        x = to_tensors(obs, device)
        arm = torch.addcmul(actor.action_bias, torch.tanh(actor(x)[0]), actor.action_scale)
        return (torch.cat([arm, grip.act(x)], dim=-1) if grip else arm).cpu().numpy()

    return policy


# REPLAY: ONLINE, IMAGES STORED ONCE, DEMOS MIXED IN (RLPD)
# --------------------------------------------------------------------------------------------------
class ReplayBuffer:
    """Preallocated circular storage of (s, a, r, s', terminated, the gripper's penalty, whether a
    person acted), sampled uniformly: column blocks of one float tensor, so storing a step is one
    copy and drawing a minibatch one gather (Dict observations: ImageReplayBuffer)."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device):
        self.capacity, self.pos, self.size, self.device = capacity, 0, 0, device
        self.widths = (obs_dim, act_dim, 1, obs_dim, 1, 1, 1)
        self.storage = torch.empty((capacity, sum(self.widths)), device=device)  # rows >= size are never read

    def add(self, obs, actions, rewards, next_obs, terminations, dones, penalties=0.0, interventions=False):
        """Store one row per sub-env; arrays are (num_envs, ...), next_obs the true s', `dones`
        where episodes ended (read by ImageReplayBuffer), `penalties` info["discrete_penalty"] and
        `interventions` info["is_intervention"] (0 and False where the env gives none). Returns the
        rows' indices."""
        extras = [np.broadcast_to(x, len(rewards))[:, None] for x in (penalties, interventions)]
        rows = [obs, actions, rewards[:, None], next_obs, terminations[:, None], *extras]
        rows = np.concatenate(rows, 1, dtype=np.float32)
        idx = torch.arange(self.pos, self.pos + len(rows)) % self.capacity
        self.storage[idx.to(self.device)] = torch.from_numpy(rows).to(self.device)
        self.pos, self.size = (self.pos + len(rows)) % self.capacity, min(self.size + len(rows), self.capacity)
        return idx

    def sample(self, batch_size: int):
        """(obs, actions, rewards, next_obs, terminations, penalties) of `batch_size` transitions
        drawn uniformly."""
        return self.rows(torch.randint(0, self.size, (batch_size,), device=self.device))

    def rows(self, idx):
        columns = self.storage.index_select(0, idx).split(self.widths, dim=-1)
        obs, actions, rewards, next_obs, terminations, penalties, _ = columns
        return obs, actions, rewards.squeeze(-1), next_obs, terminations.squeeze(-1), penalties.squeeze(-1)

    def state_dict(self):  # a copy of the rows written: torch.save writes a view's whole storage, the whole buffer
        return {"pos": self.pos, "size": self.size, "storage": self.storage[: self.size].to("cpu", copy=True)}

    def load_state_dict(self, state):
        self.pos, self.size = state["pos"], state["size"]
        self.storage[: self.size] = state["storage"].to(self.device)


class ImageReplayBuffer(ReplayBuffer):
    """Dict observations: vectors in the rows; each image once, on the CPU: frames[i] is row i's s,
    frames[i + num_envs] its s' or, if row i ended an episode, last[i] (torch.empty commits memory
    only where written). `augment`: DrQ's shift of sampled images; given a frozen `encoder`, each
    frame's CNN features are stored too, computed once."""

    def __init__(self, capacity: int, obs_space, act_dim: int, num_envs: int, device, augment: bool, encoder=None):
        self.spaces, self.num_envs, self.encoder = obs_space.spaces, num_envs, encoder
        self.images = [key for key, space in self.spaces.items() if space.dtype == np.uint8]
        self.vectors = {key: int(np.prod(space.shape)) for key, space in self.spaces.items() if key not in self.images}
        super().__init__(capacity, sum(self.vectors.values()), act_dim, device)  # the vectors' widths, in the rows
        features = {f"{key}/features": (encoder.maps[key].numel(),) for key in self.images} if encoder else {}
        shapes = {**{key: self.spaces[key].shape for key in self.images}, **features}
        self.frames, self.last = (
            {
                key: torch.empty((capacity, *shape), dtype=torch.float32 if key in features else torch.uint8)
                for key, shape in shapes.items()
            }
            for _ in range(2)
        )
        self.ended = torch.ones(capacity, dtype=torch.bool)  # unwritten rows count as ended: the next row's s is new
        self.sampled, self.augment = list(features) or self.images, augment and not encoder  # no shift of features

    def flat(self, obs):  # (B, obs_dim): the vector keys flattened and concatenated
        n = len(next(iter(obs.values())))
        return np.concatenate([np.zeros((n, 0))] + [obs[key].reshape(n, -1) for key in self.vectors], 1)

    def stored(self, obs) -> dict:  # the frames and, with an encoder, their CNN features (by 256 frames)
        out = {key: torch.as_tensor(obs[key]) for key in self.images}
        with torch.no_grad():
            for key in self.images if self.encoder else ():
                out[f"{key}/features"] = torch.cat(
                    [
                        self.encoder.cnns[key](to_tensors({key: x}, self.device)[key]).flatten(1).cpu()
                        for x in out[key].split(256)
                    ]
                )
        return out

    def add(self, obs, actions, rewards, next_obs, terminations, dones, penalties=0.0, interventions=False):
        flat_obs, flat_next_obs = self.flat(obs), self.flat(next_obs)
        idx = super().add(flat_obs, actions, rewards, flat_next_obs, terminations, dones, penalties, interventions)
        ended = torch.as_tensor(dones, dtype=torch.bool)
        self.ended[idx] = ended
        new = self.ended[(idx - self.num_envs) % self.capacity]  # else s is stored already, as the row before's s'
        obs, next_obs = self.stored({key: obs[key][new.numpy()] for key in self.images}), self.stored(next_obs)
        for key in self.frames:  # s' first: a bulk load's next rows then get their own s
            self.frames[key][(idx + self.num_envs) % self.capacity] = next_obs[key]
            self.frames[key][idx[new]] = obs[key]
            self.last[key][idx[ended]] = next_obs[key][ended]
        return idx

    def stale(self) -> int:  # how many of the oldest rows have lost their s image to the newest rows' s'
        return min(max(self.size + self.num_envs - self.capacity, 0), self.num_envs) if self.images else 0

    def observations(self, flat, idx, next_obs: bool, keys):  # rows idx's s (or s'): vectors, and `keys` of frames
        obs = dict(zip(self.vectors, flat.split(list(self.vectors.values()), dim=-1)))
        for key in keys:
            frames = self.frames[key][(idx + self.num_envs) % self.capacity if next_obs else idx]
            ended = self.ended[idx].view(-1, *[1] * (frames.dim() - 1))
            obs[key] = torch.where(ended, self.last[key][idx], frames) if next_obs else frames
        return obs

    def sample(self, batch_size: int):
        stale = self.stale()
        idx = torch.randint(0, self.size - stale, (batch_size,), device=self.device)
        idx = (idx + self.pos * (self.size == self.capacity) + stale) % self.capacity if stale else idx
        obs, actions, rewards, next_obs, terminations, penalties = self.rows(idx)
        obs, next_obs = (
            to_tensors(self.observations(part, idx.cpu(), nxt, self.sampled), self.device)
            for part, nxt in ((obs, False), (next_obs, True))
        )
        for o in (obs, next_obs) if self.augment else ():  # one shift, one target (DEVIATION(9))
            o.update({key: random_shift(o[key]) for key in self.images})
        return obs, actions, rewards, next_obs, terminations, penalties

    def state_dict(self):  # copies of the rows written, as ReplayBuffer's
        written = min(self.size + self.num_envs, self.capacity)  # the rows' s and the newest rows' s'
        return {
            **super().state_dict(),
            "ended": self.ended[: self.size].clone(),
            **{f"frames/{key}": self.frames[key][:written].clone() for key in self.frames},
            **{f"last/{key}": self.last[key][: self.size][self.ended[: self.size]] for key in self.frames},
        }

    def load_state_dict(self, state):  # the newest rows end: a resume that cannot restore its envs starts new episodes
        super().load_state_dict(state)
        self.ended[: self.size] = state["ended"]
        newest = (self.pos - self.num_envs + torch.arange(self.num_envs)) % self.capacity
        newest = newest[~self.ended[newest]]  # their s' moves from the next row's s to `last`
        for key in self.frames:
            self.frames[key][: len(state[f"frames/{key}"])] = state[f"frames/{key}"]
            self.last[key][: self.size][self.ended[: self.size]] = state[f"last/{key}"]
            self.last[key][newest] = self.frames[key][(newest + self.num_envs) % self.capacity]
        self.ended[newest] = True


def replay_buffer(args, capacity: int, obs_space, act_dim: int, device, encoder, num_envs=None) -> ReplayBuffer:
    """A ReplayBuffer or, for Dict observations, an ImageReplayBuffer (with --freeze-image-encoder,
    of `encoder`'s)."""
    if not isinstance(obs_space, gym.spaces.Dict):
        return ReplayBuffer(capacity, obs_space.shape[0], act_dim, device)
    return ImageReplayBuffer(
        capacity,
        obs_space,
        act_dim,
        num_envs or args.num_envs,
        device,
        args.augment,
        encoder if args.freeze_image_encoder else None,
    )


class MixedReplay:
    """RLPD's symmetric sampling (arXiv:2302.02948): round(batch_size * ratio) of a batch from the
    demo buffer, once it holds that many transitions; until then, the whole batch from the online
    buffer."""

    def __init__(self, rb: ReplayBuffer, demo: ReplayBuffer, ratio: float | None):
        self.rb, self.demo, self.ratio = rb, demo, 0.5 if ratio is None else ratio

    def sample(self, batch_size: int):
        k = round(batch_size * self.ratio)
        k = k if self.demo.size >= k else 0
        parts = [buffer.sample(n) for buffer, n in ((self.rb, batch_size - k), (self.demo, k)) if n]
        return parts[0] if len(parts) == 1 else tuple(map(concatenate, zip(*parts)))


def concatenate(xs: list):
    """torch.cat of tensors, or of dicts of tensors key by key."""
    if isinstance(xs[0], dict):
        return {key: torch.cat([x[key] for x in xs]) for key in xs[0]}
    return torch.cat(xs)


def add_demos(demo: ReplayBuffer, rows: np.ndarray, obs, actions, rewards, next_obs, terminations, penalties) -> None:
    """The transitions of the sub-envs `rows` (a mask) selects into the demo buffer, each with both
    its frames: a person's takeovers need not follow each other."""
    if rows.any():
        obs, next_obs = (
            {key: x[rows] for key, x in o.items()} if isinstance(o, dict) else o[rows] for o in (obs, next_obs)
        )
        ones = np.ones(rows.sum(), dtype=bool)
        demo.add(obs, actions[rows], rewards[rows], next_obs, terminations[rows], ones, penalties[rows], ones)


# HUMAN INTERVENTIONS
# --------------------------------------------------------------------------------------------------
def step_info(infos: dict, key: str, dones: np.ndarray) -> list:
    """Each sub-env's info[key] of the step it took, None where it gave none: an ended episode's is
    in infos["final_info"] (SAME_STEP autoreset; the infos beside it are the reset's)."""
    values = []
    for i, done in enumerate(dones):
        source = infos.get("final_info", {}) if done else infos
        given = source.get(f"_{key}")
        values.append(source[key][i] if given is not None and given[i] else None)
    return values


class Interventions:
    """A person's takeovers, by the protocol of gym-hil's envs (LeRobot's HIL-SERL): where
    info["is_intervention"] is true the env ran info["teleop_action"], not the policy's action, so
    that is the action stored. Counts each episode's intervened steps (charts/intervention_rate,
    logged once the env has reported interventions)."""

    def __init__(self, args, action_space):
        self.env_id, self.space = args.env_id, action_space
        self.levels = gripper_levels(action_space, args.num_discrete_actions)  # none without a gripper
        self.steps = np.zeros((2, args.num_envs), dtype=np.int64)  # each episode's steps so far, and its intervened
        self.reported = False  # whether any step's info carried is_intervention: the charts start then

    def actions(self, infos: dict, actions: np.ndarray, dones: np.ndarray) -> tuple:
        """(actions, intervened): the actions the envs ran, and the mask of the sub-envs a person
        drove; a gripper's command is the nearest of its K levels."""
        flags = step_info(infos, "is_intervention", dones)
        teleop = step_info(infos, "teleop_action", dones)
        check_intervention_flags(self.env_id, flags)
        self.reported = self.reported or any(flag is not None for flag in flags)
        intervened = np.array([flag is not None and bool(flag) for flag in flags])
        for i in np.flatnonzero(intervened):
            action = np.asarray(teleop[i] if teleop[i] is not None else [], dtype=np.float32)
            check_teleop_action(self.env_id, self.space, action)
            if len(self.levels):
                action[-1] = self.levels[np.abs(self.levels - action[-1]).argmin()]
            actions[i] = action
        self.steps += np.stack([np.ones_like(intervened), intervened])
        return actions, intervened

    def log(self, writer, dones: np.ndarray, demo_size: int, global_step: int) -> None:
        """charts/intervention_rate, the intervened share of each ended episode's steps, and
        charts/demo_transitions; nothing with an env that has reported no intervention."""
        for i in np.flatnonzero(dones):
            if self.reported:
                writer.add_scalar("charts/intervention_rate", self.steps[1, i] / self.steps[0, i], global_step)
                writer.add_scalar("charts/demo_transitions", demo_size, global_step)
        self.steps[:, dones] = 0

    def state_dict(self) -> dict:
        return {"steps": self.steps.copy(), "reported": self.reported}

    def load_state_dict(self, state: dict) -> None:
        self.steps[:] = state["steps"]
        self.reported = state["reported"]


def final_dict_observations(next_obs: dict, infos: dict) -> dict:
    """The true s_{t+1} of Dict observations, key by key: SAME_STEP autoreset puts an ended
    sub-env's reset in next_obs, its final observation in infos."""
    real_next_obs = {key: x.copy() for key, x in next_obs.items()}
    for i in np.flatnonzero(infos.get("_final_obs", [])):
        for key, final in infos["final_obs"][i].items():
            real_next_obs[key][i] = final
    return real_next_obs


# THE LEARNER: WHAT TRAINS, AND ONE UPDATE STEP
# --------------------------------------------------------------------------------------------------
class Learner:
    """What trains: the actor, the critics and their Polyak targets, the gripper's critic, their
    Adams and the temperature; the replay and the demo buffer, mixed (RLPD); the update counters.
    `stateful`: what a checkpoint holds of it."""

    def __init__(self, args, envs, device, data: dict | None, num_envs: int | None = None):
        obs_space, action_space = envs.single_observation_space, envs.single_action_space
        self.args, self.metrics = args, {}
        self.actor, self.qf, self.qf_target, self.grip = networks(args, envs, device)
        act_dim = self.actor.action_scale.shape[0]  # |A|: the arm's dimensions, without a gripper's
        # learning rates as tensors on the device: one changed in place (as torch's schedulers do)
        # reaches the compiled updates with no recompile, and the captured ones at all
        fused = {"fused": True} if device.type in ("cpu", "cuda") else {}  # one Adam kernel for all tensors
        lr = functools.partial(torch.tensor, device=device)
        q_optimizer = torch.optim.Adam(self.qf.parameters(), lr=lr(args.q_lr), **fused)
        actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=lr(args.policy_lr), **fused)
        self.log_alpha = torch.zeros(1, device=device, requires_grad=True)
        alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=lr(args.q_lr), **fused)
        if not args.autotune:  # alpha fixed: log alpha never takes a step
            self.log_alpha.data.fill_(math.log(args.alpha) if args.alpha > 0 else -math.inf)
        self.optimizers = [q_optimizer, actor_optimizer, alpha_optimizer]
        # H-bar = -|A| (arXiv:1812.05905, Sec. 5) unless --target-entropy sets it
        target_entropy = -float(act_dim) if args.target_entropy is None else args.target_entropy  # DEVIATION(10)
        encoder = self.qf.encoder
        self.rb = replay_buffer(args, args.buffer_size, obs_space, action_space.shape[0], device, encoder, num_envs)
        self.demo = demo_buffer(args, data, obs_space, action_space.shape[0], device, encoder)  # offline, takeovers
        self.replay = MixedReplay(self.rb, self.demo, args.offline_ratio)  # RLPD's batches, once demos hold a share
        share = round(args.batch_size * self.replay.ratio)
        if data is not None and not args.offline_steps and not 0 < share <= self.demo.size:  # takeovers may fill it
            print(
                f"note: --offline-data gives the demo buffer {self.demo.size:,} transitions; a batch draws "
                f"{share} (--batch-size x --offline-ratio) from it once it holds that many",
                file=sys.stderr,
            )
        self.stateful = dict(actor=self.actor, qf=self.qf, qf_target=self.qf_target, q_optimizer=q_optimizer)
        self.stateful.update(log_alpha=self.log_alpha, actor_optimizer=actor_optimizer, rb=self.rb, demo=self.demo)
        self.stateful.update(alpha_optimizer=alpha_optimizer)
        self.stateful.update(self.grip.stateful if self.grip else {})
        self.update_critic, self.update_actor, self.act = sac_updates(
            self.actor, self.qf, self.qf_target, self.log_alpha, *self.optimizers, args, target_entropy
        )
        self.critic_updates, self.actor_updates, self.update_steps = 0, 0, 0

    def update(self, replay) -> None:
        """One update step: utd_ratio critic updates (and the gripper critic's), each on a batch of
        `replay`; every policy_frequency-th step, policy_frequency actor updates on the last batch's
        states (DEVIATION(4))."""
        for _ in range(self.args.utd_ratio):
            batch = replay.sample(self.args.batch_size)
            self.critic_updates += 1
            update_target = self.critic_updates % self.args.target_update_interval == 0
            self.metrics.update(self.update_critic(batch, update_target))
            self.metrics.update(self.grip.update(batch, update_target) if self.grip else {})
        self.update_steps += 1
        if self.update_steps % self.args.policy_frequency == 0:
            for _ in range(self.args.policy_frequency):
                self.metrics.update(self.update_actor(batch[0]))
                self.actor_updates += 1

    def model(self) -> dict:
        """--save-model's networks: the actor, the critics, log alpha and the gripper's critic."""
        model = dict(actor=self.actor.state_dict(), qf=self.qf.state_dict(), log_alpha=self.log_alpha.detach().cpu())
        return {**model, **({"discrete_qf": self.grip.dq.state_dict()} if self.grip else {})}


def collect_actions(obs, actor, act, grip, global_step: int, learning_starts: int) -> np.ndarray:
    """The actions to step the envs with: uniform within the bounds before `learning_starts` steps
    (DEVIATION(6)), then a ~ pi(.|s) by `act`; with a gripper, its epsilon-greedy command
    appended."""
    device = actor.action_scale.device
    x = to_tensors(obs, device)
    if global_step < learning_starts:
        n = len(next(iter(obs.values())) if isinstance(obs, dict) else obs)
        u = torch.rand((n, len(actor.action_scale)), device=device) * 2.0 - 1.0
        actions = u * actor.action_scale + actor.action_bias
    else:
        actions = act(x)
    return (torch.cat([actions, grip.act(x, global_step)], dim=-1) if grip else actions).cpu().numpy()


# MAIN
# --------------------------------------------------------------------------------------------------
def main(args: Args) -> dict:
    """Train; returns a summary. Raises ConfigError, before writing anything, on bad flags, envs or
    checkpoints."""
    if args.role == "actor" and not args.resume:  # actors of one --seed draw apart: each seeds with --seed + its id
        args = replace(args, seed=args.seed + args.actor_id)
    args, checkpoint, device = setup(args, check_args, check_spaces, observation_wrappers)
    files = ("offline_data", "save_replay", "image_encoder_weights")  # absolute, links followed: resumes run anywhere
    args = replace(args, **{key: os.path.realpath(path) for key in files if (path := getattr(args, key))})
    if args.role != "local":  # the actor and the learner apart, below their fence
        return split(args, checkpoint, device)
    memory_flags = "--buffer-size or --batch-size (with images, also --image-size)"
    with Run(args, checkpoint, device, memory_flags, observation_wrappers, at=offline_position) as run:
        action_space = run.envs.single_action_space
        data = robot_learning_setup(args, run.envs.single_observation_space, action_space)  # flags checked; offline
        learner = Learner(args, run.envs, device, data)  # networks, optimizers, temperature, replay and demos
        actor, grip, rb, demo = learner.actor, learner.grip, learner.rb, learner.demo
        person = Interventions(args, action_space)  # a person's takeovers: the actions the envs ran
        stateful = {**learner.stateful, "person": person}
        policy = greedy_policy(actor, grip, device)  # for evaluation
        counts, obs = run.resume(stateful, (0, 0, 0, 0), policy)  # env steps, critic, actor and update steps
        global_step, learner.critic_updates, learner.actor_updates, learner.update_steps = counts
        act = learner.act
        if args.compile:  # the same functions, compiled (on a GPU, captured too)
            functions = [learner.update_critic, learner.update_actor, act]
            learner.update_critic, learner.update_actor, act = compiled(functions, device, learner.optimizers)

        def counters():  # where the run stands: its env steps, then the learner's update counts
            return global_step, learner.critic_updates, learner.actor_updates, learner.update_steps

        metrics = learner.metrics
        offline_phase(run, learner.update, demo, metrics, counters, args)  # --offline-steps on the offline data alone
        with data_kept(run, counters, learner, args):  # an error from here on writes the person's data first
            while global_step + args.num_envs <= args.total_timesteps and not run.stop_signal:
                # COLLECT: random actions for learning_starts steps (DEVIATION(6)), then a ~ pi(.|s)
                actions = collect_actions(obs, actor, act, grip, global_step, args.learning_starts)
                next_obs, rewards, terminations, truncations, infos = run.envs.step(actions)
                check_rewards(rewards, actions, args.env_id, global_step)
                previous_step, global_step = global_step, global_step + args.num_envs
                dones = terminations | truncations

                # A PERSON: where one took over, the env ran their action; store it, as a demo too
                actions, intervened = person.actions(infos, actions, dones)
                penalties = np.array([p or 0.0 for p in step_info(infos, "discrete_penalty", dones)], np.float32)

                # STORE: bootstrap through truncations, never through terminations: s' is the true
                # final observation and `terminations` alone masks the target; no transition spans a
                # reset.
                final = final_dict_observations if isinstance(next_obs, dict) else final_observations
                real_next_obs = final(next_obs, infos)
                rb.add(obs, actions, rewards, real_next_obs, terminations, dones, penalties, intervened)
                add_demos(demo, intervened, obs, actions, rewards, real_next_obs, terminations, penalties)
                obs = next_obs

                # UPDATE: every env step brings one update step
                if global_step >= args.learning_starts:
                    for _ in range(args.num_envs):
                        learner.update(learner.replay)

                # LOG, EVALUATE, CHECKPOINT
                run.log(infos, metrics, previous_step, global_step)
                person.log(run.writer, dones, demo.size, global_step)
                run.after_step(previous_step, counters(), obs, policy)
        summary = run.finish(counters(), obs, policy, learner.model())
        if args.save_replay:
            save_replay(run, rb, args.save_replay, global_step)
    return {**summary, "critic_updates": learner.critic_updates, "actor_updates": learner.actor_updates}


# VALIDATION
# --------------------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for this script's out-of-range or contradictory flags, each flag's own
    range before the bounds flags set one another, so that each message names the flag to change."""
    replay_dir = os.path.dirname(os.path.abspath(args.save_replay or "."))
    size = args.image_size or PIXELS

    def given(*keys) -> list:  # the flags of these fields that are not at their defaults
        return [f"--{key.replace('_', '-')}" for key in keys if getattr(args, key) != getattr(Args, key)]

    split, actor = given("learner_address", "network_timeout"), given("control_hz", "actor_id", "outbox_size")
    gripper = given("gripper_epsilon", "discrete_q_lr")
    check(
        [
            (not args.policy_lr > 0, f"--policy-lr must be positive, not {args.policy_lr}"),
            (not args.q_lr > 0, f"--q-lr must be positive, not {args.q_lr}"),
            (
                args.discrete_q_lr is not None and not args.discrete_q_lr > 0,
                f"--discrete-q-lr must be positive, not {args.discrete_q_lr}",
            ),
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
            (not 16 <= size <= 512, f"--image-size must lie in [16, 512] pixels, not {size}"),  # 99M weights a head
            (
                args.frame_stack < 1,
                f"--frame-stack must be at least 1 (1: the newest frame alone), not {args.frame_stack}",
            ),
            (
                args.frame_stack > 1 and not args.from_pixels,
                "--frame-stack stacks the frames of --from-pixels: add --from-pixels, or set --frame-stack 1",
            ),
            (
                3 * args.frame_stack >= size,  # fewer channels than columns: `channels_first` tells them apart
                f"--frame-stack must be at most {(size - 1) // 3} with {size}-pixel frames (its 3 x k channels must "
                f"be fewer than a frame's width), not {args.frame_stack}",
            ),
            (not 0 <= (args.offline_ratio or 0) <= 1, f"--offline-ratio must lie in [0, 1], not {args.offline_ratio}"),
            (args.offline_steps < 0, f"--offline-steps must be non-negative, not {args.offline_steps}"),
            (
                args.num_discrete_actions < 0 or args.num_discrete_actions == 1,
                "--num-discrete-actions must be 0 (off) or at least 2: a gripper of one command has nothing to choose",
            ),
            (not 0 <= args.gripper_epsilon <= 1, f"--gripper-epsilon must lie in [0, 1], not {args.gripper_epsilon}"),
            (args.demo_buffer_size < 2, "--demo-buffer-size must be at least 2: a row's s' image is the next row's s"),
            (
                args.save_replay and (os.path.isdir(args.save_replay) or not os.access(replay_dir, os.W_OK | os.X_OK)),
                f"--save-replay {args.save_replay} is a directory, or its directory is missing or read-only; "
                "pass a file name, such as replay.npz, in a writable directory",
            ),
            (
                args.buffer_size < max(args.batch_size, 2 * args.num_envs),
                f"--buffer-size ({args.buffer_size}) must be at least --batch-size ({args.batch_size}) and twice "
                f"--num-envs ({args.num_envs})",
            ),
            (
                args.learning_starts >= args.total_timesteps and not args.offline_steps,
                f"--learning-starts ({args.learning_starts}) must lie below --total-timesteps "
                f"({args.total_timesteps}), or no update runs",
            ),
            (
                args.batch_size > args.learning_starts and not args.offline_data,
                f"--batch-size ({args.batch_size}) must be at most --learning-starts ({args.learning_starts}) "
                "without --offline-data",
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
            (
                args.offline_steps and not args.offline_data,
                "--offline-steps needs --offline-data PATH, an .npz written by --save-replay",
            ),
            (
                args.offline_ratio == 0 and args.offline_data and not args.offline_steps,
                "--offline-ratio 0 draws nothing from --offline-data, and no --offline-steps train on it: raise the "
                "ratio, add --offline-steps, or drop --offline-data",
            ),
            (
                not re.fullmatch(r"(tcp://(\[[0-9a-fA-F:.]+\]|[^:/]+):(\d+|\*)|ipc://.+)", args.learner_address),
                f"--learner-address must read tcp://HOST:PORT (or ipc://PATH), not {args.learner_address}",
            ),
            (args.control_hz < 0, f"--control-hz must be non-negative (0: no limit), not {args.control_hz}"),
            (args.actor_id < 0, f"--actor-id must be non-negative, not {args.actor_id}"),
            (args.outbox_size < 1, f"--outbox-size must be at least 1, not {args.outbox_size}"),
            (not args.network_timeout > 0, f"--network-timeout must be positive, not {args.network_timeout}"),
            (
                args.role == "local" and split + actor,
                f"{', '.join(split + actor)}: for a learner and its actors apart, not --role local: add --role "
                "learner, actor or both, or drop them",
            ),
            (
                args.role == "learner" and actor,
                f"{', '.join(actor)}: an actor's, unused by --role learner: give them to the actors",
            ),
            (
                gripper and not args.num_discrete_actions,
                f"{', '.join(gripper)}: the gripper's, unused without --num-discrete-actions: add it, or drop them",
            ),
            (
                args.role == "actor" and bool(args.offline_data or args.offline_steps or args.save_replay),
                "--offline-data, --offline-steps and --save-replay are the learner's: give them to --role learner",
            ),
            (
                args.role == "both" and args.outbox_size < args.checkpoint_freq,
                "--role both: --outbox-size must be at least --checkpoint-freq (the actor keeps a checkpoint's rows)",
            ),
            (
                args.save_replay
                and args.offline_data
                and os.path.realpath(args.save_replay) == os.path.realpath(args.offline_data),  # links too
                "--save-replay would overwrite the --offline-data file; pass another file name",
            ),
            (
                args.save_replay and os.path.exists(args.save_replay) and not args.resume,  # a resume's own file
                f"--save-replay {args.save_replay} exists (a replay saved before, a person's takeovers perhaps): "
                "pass another file name, or remove it",
            ),
        ]
    )


def check_spaces(env_id: str, obs_space, action_space) -> None:
    """Raise ConfigError unless observations are a 1-D Box or a Dict of vectors and uint8 images;
    actions a Box."""
    box = isinstance(action_space, gym.spaces.Box)  # the bounds are read only from a Box
    spaces = obs_space.spaces if isinstance(obs_space, gym.spaces.Dict) else {}
    bad = [
        key
        for key, space in spaces.items()
        if not isinstance(space, gym.spaces.Box) or (space.dtype == np.uint8) != (len(space.shape) == 3)
    ]
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
                not (spaces or isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1),
                f"{env_id} has {obs_space} observations; "
                "this script needs a 1-D Box (see gymnasium.wrappers.FlattenObservation) or a Dict",
            ),
            (
                bad,
                f"{env_id}'s observation keys {bad} are neither vector Boxes "
                "nor 3-d uint8 images (H, W, C) or (C, H, W)",
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


def robot_learning_setup(args, obs_space, action_space) -> dict | None:
    """The image and gripper flags checked against the env; --offline-data's arrays, checked in full
    (RLPD, HIL-SERL)."""
    image_flags = {
        "--image-pooling spatial": args.image_pooling != "flatten",
        "--freeze-image-encoder": args.freeze_image_encoder,
        "--image-encoder-weights": args.image_encoder_weights,
    }
    given = next((flag for flag, value in image_flags.items() if value), None)  # the first image flag set
    image_flags.update({"--image-size": args.image_size, "--no-augment": not args.augment})
    image_flags.update({"--no-shared-encoder": not args.shared_encoder})
    unused = next((flag for flag, value in image_flags.items() if value), None)  # with no image, each is
    spaces, act_dim = getattr(obs_space, "spaces", {}), action_space.shape[0]
    sides = {key: x.shape[1:] if channels_first(x.shape) else x.shape[:2] for key, x in spaces.items() if is_image(x)}
    small = [key for key, side in sides.items() if min(side) < 16]  # the encoders' convolutions need 16
    check(
        [
            (
                small,
                f"{args.env_id}'s images {small} are under 16 pixels a side, too small for the image "
                "encoders: add --image-size 16 (or more)",
            ),
            (
                args.num_discrete_actions and act_dim < 2,
                f"--num-discrete-actions: {args.env_id} has one action "
                "dimension; the gripper is the last of at least two",
            ),
            (
                unused and not any(map(is_image, spaces.values())),
                f"{unused} needs images: add --from-pixels, or use an env with image observations",
            ),
            (
                given and not args.shared_encoder,
                f"{given} needs --shared-encoder (HIL-SERL's: the actor reads the critics' image features)",
            ),
        ]
    )
    for channels in sorted(
        {x.shape[0] if channels_first(x.shape) else x.shape[-1] for x in spaces.values() if is_image(x)}
    ):
        check_encoder_weights(args.image_encoder_weights, channels)
    if not args.offline_data or args.resume:  # a resumed run's demo buffer is its checkpoint's: the file may be gone
        return None
    try:
        with np.load(args.offline_data) as f:
            data = dict(f)
    except Exception as e:  # missing, truncated, or no .npz at all
        why = "no such file" if isinstance(e, FileNotFoundError) else f"not a readable .npz ({type(e).__name__}: {e})"
        if os.path.isfile(args.offline_data) and os.access(args.offline_data, os.R_OK):
            why = why if zipped(args.offline_data) else "not an .npz (numpy's zip of .npy arrays)"
        raise ConfigError(f"--offline-data {args.offline_data}: {why}; pass a file written by --save-replay") from None
    n, fields = len(np.atleast_1d(data.get("actions", ()))), {"actions": (act_dim,), "rewards": (), "terminations": ()}
    fields.update(
        {
            f"{name}/{key}" if spaces else name: space.shape
            for name in ("obs", "next_obs")
            for key, space in (spaces or {None: obs_space}).items()
        }
    )
    optional = {"discrete_penalties": (), "interventions": ()}  # absent: 0 and False
    fields.update({key: shape for key, shape in optional.items() if key in data})
    bad = [f"it lacks the array {key}" for key in fields if key not in data]
    bad += [f"it holds an array {key} that these observations lack" for key in sorted({*data} - {*fields})]
    bad += [f"{key} of shape {data[key].shape}" for key in {*data} & {*fields} if data[key].shape != (n, *fields[key])]
    bad += [
        f"{key} of dtype {data[key].dtype}"
        for key in {*data} & {*fields}  # numbers; images, and only images, uint8
        if (data[key].dtype == np.uint8) != (len(fields[key]) == 3) or data[key].dtype.kind not in "biuf"
    ]
    shapes = {key: ", ".join(["N", *map(str, shape)]) for key, shape in fields.items()}  # (N, ...) as text
    check(
        [
            (
                bad or not n,
                f"--offline-data {args.offline_data} does not fit {args.env_id}: {', '.join(bad) or 'no transitions'}"
                f"; it needs these arrays: {', '.join(f'{key} ({shape})' for key, shape in shapes.items())}",
            ),
            (
                n > args.demo_buffer_size,
                f"--offline-data {args.offline_data} holds {n:,} transitions, more than --demo-buffer-size "
                f"{args.demo_buffer_size:,}: raise it",
            ),
        ]
    )
    levels, actions = gripper_levels(action_space, args.num_discrete_actions), data["actions"]
    rows = {key: ~np.isfinite(x).reshape(n, -1).all(1) for key, x in data.items() if x.dtype != np.uint8}
    rows["actions"] |= ~within(action_space, actions)
    rows["actions"] |= (len(levels) > 0) & ~np.isin(actions[:, -1], levels)  # the gripper's: one of its K commands
    for key in {"terminations", "interventions"} & {*data}:  # flags
        rows[key] |= ~np.isin(data[key], (0, 1))
    grip = (
        f", the last one of the {len(levels)} gripper commands {levels} (save with the same K)" if len(levels) else ""
    )
    check(
        [
            (
                bad.any(),
                f"--offline-data {args.offline_data}: {key} row {bad.argmax():,} holds {data[key][bad.argmax()]}"
                f"; values must be finite, actions within {args.env_id}'s bounds{grip}, terminations and "
                "interventions 0 or 1",
            )
            for key, bad in rows.items()
        ]
    )
    return data


# OFFLINE DATA, SAVED REPLAYS AND OBSERVATIONS
# --------------------------------------------------------------------------------------------------
def check_intervention_flags(env_id: str, flags: list) -> None:
    """Raise ConfigError unless each info["is_intervention"] given is a bool."""
    bad = [flag for flag in flags if flag is not None and not isinstance(flag, (bool, np.bool_))]
    check([(bad, f"{env_id}'s info['is_intervention'] is {bad[:1]}, no bool: the env must set True or False")])


def within(space, actions: np.ndarray) -> np.ndarray:
    """Whether each action (..., |A|) lies within the Box `space`'s bounds, give or take float
    rounding (of tanh(u) * scale + bias, say); NaN does not."""
    slack = 1e-5 * (space.high - space.low)
    return ((actions >= space.low - slack) & (actions <= space.high + slack)).all(-1)


def check_teleop_action(env_id: str, space, action: np.ndarray) -> None:
    """Raise ConfigError unless `action`, an info["teleop_action"], is an action of `space`."""
    inside = action.shape == space.shape and within(space, action)
    check(
        [
            (
                not inside,
                f"{env_id}'s info['teleop_action'] {action.tolist()} is no action of its {space}: "
                "on an intervention the env must report the action it ran",
            )
        ]
    )


def zipped(path: str) -> bool:
    """Whether the file at path starts as a zip does: an .npz is a zip of .npy files."""
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def check_encoder_weights(weights: str | None, channels: int) -> None:
    """Raise ConfigError unless `weights` holds a ResNet-10 for `channels`-channel images."""
    if not weights:
        return
    try:
        state = torch.load(weights, "cpu", weights_only=True)
    except OSError as e:
        raise ConfigError(f"--image-encoder-weights {weights}: {e.strerror.lower()}") from None
    except Exception:  # a file of text, say: no pickle torch.save wrote
        raise ConfigError(
            f"--image-encoder-weights {weights} is not a torch state dict (no file torch.save wrote); pass a "
            "ResNet-10's, made as the page shows"
        ) from None
    kind = type(state).__name__
    check([(not isinstance(state, dict), f"--image-encoder-weights {weights} holds a {kind}, not a state dict")])
    try:
        ResNet10(channels).load_state_dict(resnet10_names(state))
    except Exception as e:  # another network's, or of other shapes
        raise ConfigError(
            f"--image-encoder-weights {weights}: no ResNet-10 for {channels}-channel images ("
            f"{type(e).__name__}: {' '.join(str(e).split())[:160]}); see the page for making one"
        ) from None


def demo_buffer(args, data: dict | None, obs_space, act_dim: int, device, encoder) -> ReplayBuffer:
    """The demo buffer, of --demo-buffer-size transitions: --offline-data's (`robot_learning_setup`
    checked them), then each one a person took over (`add_demos`)."""
    rb = replay_buffer(args, args.demo_buffer_size, obs_space, act_dim, device, encoder, num_envs=1)
    if data is None:
        return rb
    n, spaces = len(data["actions"]), getattr(obs_space, "spaces", {})
    obs, next_obs = (
        {key: data[f"{name}/{key}"] for key in spaces} if spaces else data[name] for name in ("obs", "next_obs")
    )
    chained = np.ones(n - 1, dtype=bool)  # transition i + 1 starts at i's s': the frame is stored once
    for key in getattr(rb, "images", ()):
        chained &= (next_obs[key][:-1] == obs[key][1:]).reshape(n - 1, -1).all(1)
    extras = [data.get(key, np.zeros(n)) for key in ("discrete_penalties", "interventions")]
    rb.add(obs, data["actions"], data["rewards"], next_obs, data["terminations"], np.append(~chained, True), *extras)
    return rb


def offline_phase(run, update, offline, metrics: dict, counters, args) -> None:
    """--offline-steps: updates on the offline data alone (not in HIL-SERL's or LeRobot's code),
    logged at steps 1 - N, ..., 0."""
    run.last_log = time.time(), counters()[3] - args.offline_steps  # the step of the first SPS count
    while counters()[3] < args.offline_steps and not run.stop_signal:
        update(offline)
        run.log({}, metrics, counters()[3] - 1 - args.offline_steps, counters()[3] - args.offline_steps)
    metrics.clear()
    run.last_log = time.time(), counters()[0]


def offline_position(args, counters: tuple) -> str:
    """Where a run stands, for its stop and resume lines: in the offline phase, its offline update;
    after it, its env step."""
    if counters[0] == 0 and counters[3] < args.offline_steps:
        return f"in the offline phase after offline update {counters[3]:,} of {args.offline_steps:,}"
    return f"at step {counters[0]:,}"


@contextlib.contextmanager
def data_kept(run, counters, learner, args):
    """A person's data outlive an error that ends a run after its first step: `keep_data` writes
    them, where the step stands, before the error's line."""
    try:
        yield
    except Exception:
        if counters()[0] > 0:
            run.counters = None  # Run's own checkpoint after an error is this one
            keep_data(run, counters(), learner, args)
        raise


def keep_data(run, counters: tuple, learner, args) -> None:
    """The checkpoint (the replay and the demo buffer in it) and the command to go on; where the NaN
    guard refuses the networks, the two buffers as .npz for --offline-data; and --save-replay."""
    lines = []
    try:
        run.stop(counters, None, "ended by an error")  # no observation: the resumed run starts new episodes
    except ConfigError:  # diverged networks: the data are kept, as files --offline-data reads
        for name, buffer in (("replay.npz", learner.rb), ("demos.npz", learner.demo)):
            if buffer.size:
                path = saved_anyway(run, replay_arrays(buffer), name, counters[0])
                lines.append(f"{name[:-4]} ({buffer.size:,} transitions) written to {path}")
        lines.append("start again with lower learning rates and --offline-data, the demos first")
    if args.save_replay:
        saved_anyway(run, replay_arrays(learner.rb), args.save_replay, counters[0])
        lines.append(f"replay buffer saved to {args.save_replay}")
    if lines:
        print("\n" + "\n".join(lines), flush=True)


def save_replay(run, rb: ReplayBuffer, path: str, global_step: int) -> None:
    """--save-replay's .npz at the run's end, durably, whole or not at all; an empty replay (a run
    stopped before its first step) writes nothing, so that a file already there is kept."""
    if not rb.size:
        print(f"the replay is empty: {path} is not written")
        return
    arrays = replay_arrays(rb)
    run.save(lambda f: np.savez(f, **arrays), path, global_step, "other files are kept")
    print(f"replay buffer saved to {path}")


def saved_anyway(run, arrays: dict, name: str, global_step: int) -> str:
    """`arrays` as an .npz, durably by run.save, whatever the networks hold (the NaN guard is
    theirs)."""
    guard, run.stateful = run.stateful, {}
    try:
        return run.save(lambda f: np.savez(f, **arrays), name, global_step, "nothing else is written")
    finally:
        run.stateful = guard


def replay_arrays(rb: ReplayBuffer) -> dict:
    """--save-replay's arrays: obs, actions, rewards, next_obs, terminations, discrete_penalties and
    interventions (a Dict's observations as obs/<key>), oldest first."""
    images = isinstance(rb, ImageReplayBuffer)
    idx = (torch.arange(rb.stale() if images else 0, rb.size) + (rb.pos if rb.size == rb.capacity else 0)) % rb.capacity
    columns = rb.storage[idx.to(rb.device)].cpu().split(rb.widths, -1)
    obs, actions, rewards, next_obs, terminations, penalties, interventions = columns
    data = {"actions": actions, "rewards": rewards[:, 0], "terminations": terminations[:, 0]}
    data.update(discrete_penalties=penalties[:, 0], interventions=interventions[:, 0].bool())
    for name, flat, nxt in (("obs", obs, False), ("next_obs", next_obs, True)):
        data.update(
            {
                f"{name}/{k}": v.reshape(len(idx), *rb.spaces[k].shape)
                for k, v in rb.observations(flat, idx, nxt, rb.images).items()
            }
            if images
            else {name: flat}
        )
    return {key: value.numpy() for key, value in data.items()}


def observation_wrappers(args, make):
    """`make()`'s env (with --from-pixels, `pixel_observations`'), a nested Dict's observations
    flattened to one level, their keys joined by "/" ({"pixels": {"front": x}} to {"pixels/front":
    x}), with --image-size its own images resized, and its actions clipped into their Box
    (`actions_in_bounds`)."""
    env = pixel_observations(args, make) if args.from_pixels else make()
    spaces = flat_spaces(env.observation_space)
    if spaces.keys() != getattr(env.observation_space, "spaces", {}).keys():
        env = gym.wrappers.TransformObservation(env, flatten_observation, gym.spaces.Dict(spaces))
    resize = [key for key, space in spaces.items() if is_image(space) and args.image_size and not args.from_pixels]
    if resize:
        resized_spaces = {
            key: resized_space(space, args.image_size) if key in resize else space for key, space in spaces.items()
        }
        resize_images = functools.partial(resized, keys=resize, size=args.image_size)
        env = gym.wrappers.TransformObservation(env, resize_images, gym.spaces.Dict(resized_spaces))
    return actions_in_bounds(args, lambda: env)


def actions_in_bounds(args, make):
    """`make()`'s env, each action clipped into its Box: bias + scale * tanh(u) can miss a bound by
    a rounding (gymnasium's ClipAction would unbound the space)."""
    env = make()
    box = env.action_space
    if not isinstance(box, gym.spaces.Box):  # check_spaces refuses it after the trial env
        return env
    clip = functools.partial(np.clip, a_min=box.low, a_max=box.high, dtype=box.dtype)  # float16's too
    return gym.wrappers.TransformAction(env, clip, box)


def flat_spaces(space, prefix: str = "") -> dict:
    """{"a/b": leaf space} of a nested Dict space; {} for any other space."""
    if not isinstance(space, gym.spaces.Dict):
        return {prefix[:-1]: space} if prefix else {}
    return {
        key: leaf for name, sub in space.spaces.items() for key, leaf in flat_spaces(sub, f"{prefix}{name}/").items()
    }


def flatten_observation(obs: dict, prefix: str = "") -> dict:
    """A nested Dict observation as {"a/b": leaf}, as `flat_spaces` names them."""
    flat = {}
    for name, x in obs.items():
        flat.update(flatten_observation(x, f"{prefix}{name}/") if isinstance(x, dict) else {f"{prefix}{name}": x})
    return flat


def is_image(space) -> bool:
    """A 3-d uint8 Box: an image, (H, W, C) or (C, H, W)."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def resized_space(space, size: int):
    """An image space of `size` x `size` pixels, its channels where they were."""
    shape = (space.shape[0], size, size) if channels_first(space.shape) else (size, size, space.shape[-1])
    return gym.spaces.Box(0, 255, shape, np.uint8)


def resized(obs: dict, keys: list, size: int) -> dict:
    """--image-size: the images `keys` resized to `size` x `size` (bilinear, antialiased)."""
    obs = dict(obs)
    for key in keys:
        x = torch.from_numpy(np.ascontiguousarray(obs[key]))
        first = channels_first(x.shape)
        x = (x if first else x.permute(2, 0, 1))[None].float()
        x = F.interpolate(x, (size, size), mode="bilinear", antialias=True)[0].round().clamp(0, 255).to(torch.uint8)
        obs[key] = (x if first else x.permute(1, 2, 0)).numpy()
    return obs


def pixel_observations(args, make):
    """--from-pixels: {"pixels": `make()`'s frame of --image-size pixels, "state": its observation},
    or the last --frame-stack frames."""
    size = args.image_size or PIXELS
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering; read when mujoco is first imported
    __import__("torch._dynamo")  # CUDA wheels' triton segfaults when first loaded after MuJoCo's EGL context
    try:  # gym.make's keywords go to the env's constructor
        env = make(render_mode="rgb_array", width=size, height=size)
        env.unwrapped.render()  # MuJoCo aims the camera at its first frame's geoms: those of gym.make's state
    except Exception as e:  # a keyword the env's constructor lacks, a package it renders with, or the renderer
        keyword = re.search(r"unexpected keyword argument '(render_mode|width|height)'", str(e))
        problem = (
            f"cannot render {size} x {size} frames ({type(e).__name__}: {e}); lower --image-size, or set "
            "MUJOCO_GL=egl on a headless machine"
        )
        if isinstance(e, gym.error.DependencyNotInstalled):
            problem = f"renders with a package that is missing: {e}"
        if keyword and keyword[1] == "render_mode":
            problem = "does not render: its constructor takes no render_mode"
        elif keyword:
            problem = (
                "takes no frame size: its constructor has no width and height, which --from-pixels passes; use "
                "an env that renders frames of a given size, as MuJoCo's do"
            )
        raise ConfigError(f"--from-pixels: {args.env_id} {problem}") from None
    space = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
    env = gym.wrappers.TransformObservation(
        env, functools.partial(pixels_and_state, env), gym.spaces.Dict(pixels=space, state=env.observation_space)
    )
    if args.frame_stack > 1:  # the last k frames, oldest first, on the channel axis
        space, state = gym.spaces.Box(0, 255, (*space.shape[:2], 3 * args.frame_stack), np.uint8), env.observation_space
        env = gym.wrappers.TransformObservation(
            gym.wrappers.FrameStackObservation(env, args.frame_stack),
            stacked_channels,
            gym.spaces.Dict(pixels=space, state=state["state"]),
        )
    return env


def pixels_and_state(env, obs) -> dict:
    """--from-pixels' observation: `env`'s frame beside its own, its GL context made current first
    (gymnasium switches only between one env's viewers, and another env's closed renderer would
    leave none current)."""
    if viewer := getattr(getattr(env.unwrapped, "mujoco_renderer", None), "viewer", None):
        viewer.make_context_current()
    return {"pixels": env.render(), "state": obs}


def stacked_channels(obs: dict) -> dict:
    """--frame-stack's observation: FrameStackObservation's k frames (k, H, W, 3) as one (H, W, 3
    k), the newest state."""
    return {"pixels": np.concatenate(obs["pixels"], axis=-1), "state": obs["state"][-1]}


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


# ==================================================================================================
# THE ACTOR AND THE LEARNER APART (--role actor, learner or both): actors step their envs at the
# control rate and send each transition; a learner trains on them and sends back the policy's
# parameters. A reader of the algorithm may stop above this banner.
# ==================================================================================================
RESEND = 2.0  # seconds after which an actor sends again what the learner has not answered
PUSH_EVERY = 1.0  # seconds between parameter pushes to an actor (LeRobot's default: 4; its docs advise 1 to 2)
HEARTBEAT = 0.5  # seconds after which an actor with nothing to send asks for news (parameters, acknowledgements)
MAX_ROWS = 256  # rows in one message from an actor
POLL_MS = 50  # how long a learner that is not updating yet waits for a message


RESUMABLE += ["learner_address", "network_timeout", "control_hz"]  # a resumed learner or actor may move, or pace anew


def split(args, checkpoint, device) -> dict:
    """--role learner, actor or both, over pyzmq, imported here only."""
    try:
        zmq = importlib.import_module("zmq")
    except ImportError:
        raise ConfigError(f"--role {args.role} needs pyzmq: pip install pyzmq (in the hil extra)") from None
    if checkpoint is None:  # a run directory of each process's own, though they start in one second
        args = replace(args, exp_name=f"{args.exp_name}-{args.role}{args.actor_id if args.role == 'actor' else ''}")
    return (act_for_learner if args.role == "actor" else serve)(args, checkpoint, device, zmq)


def pack(header: dict, arrays: dict | None = None, blob: bytes | None = None) -> list:
    """A message: a JSON header naming each array's dtype and shape, the arrays' raw bytes a frame
    each, and an optional last frame of bytes (the parameters)."""
    arrays = {key: np.ascontiguousarray(x) for key, x in (arrays or {}).items()}
    header = {**header, "arrays": [[key, x.dtype.str, list(x.shape)] for key, x in arrays.items()]}
    return [json.dumps(header).encode(), *arrays.values(), *([blob] if blob is not None else [])]


def unpack(frames: list) -> tuple:
    """pack's (header, arrays, blob or None), read without unpickling anything: each array numeric,
    of the dtype and shape its header names. Raises ValueError (or KeyError, TypeError) else."""
    header = json.loads(frames[0])
    specs = header["arrays"]
    arrays = {}
    for (key, dtype, shape), frame in zip(specs, frames[1:]):
        dtype = np.dtype(dtype)
        if dtype.kind not in "biuf":
            raise ValueError(f"array {key} of dtype {dtype}")
        arrays[key] = np.frombuffer(frame, dtype).reshape(shape).copy()  # writable: torch takes it with no warning
    return header, arrays, frames[len(specs) + 1] if len(frames) > len(specs) + 1 else None


def row_shapes(obs_space, action_space) -> dict:
    """The shape of each array of a row an actor sends, a Dict's observations as obs/<key>."""
    spaces = getattr(obs_space, "spaces", None) or {None: obs_space}
    shapes = {"actions": action_space.shape, "rewards": (), "terminations": (), "penalties": ()}
    shapes.update(interventions=(), version=(), episode_return=(), episode_length=(), intervention_rate=())
    for name in ("obs", "next_obs"):
        shapes.update({name if key is None else f"{name}/{key}": space.shape for key, space in spaces.items()})
    return shapes


def policy_state(actor, qf, grip) -> dict:
    """What an actor needs to act: the actor's, the critics' encoder's (the actor reads it with
    --shared-encoder) and the gripper's critic's state dicts."""
    state = {"actor": actor.state_dict(), "encoder": qf.encoder.state_dict()}
    return {**state, "dq": grip.dq.state_dict()} if grip else state


def policy_parameters(actor, qf, grip) -> bytes:
    """policy_state's tensors by torch.save, on the CPU."""
    buffer = io.BytesIO()
    state = policy_state(actor, qf, grip)
    torch.save({key: {k: v.cpu() for k, v in part.items()} for key, part in state.items()}, buffer)
    return buffer.getvalue()


def policy_shapes(actor, qf, grip) -> dict:
    """policy_state's tensor shapes, for a hello: an actor of other networks is refused at once."""
    return {f"{key}/{k}": list(v.shape) for key, part in policy_state(actor, qf, grip).items() for k, v in part.items()}


def load_policy_parameters(blob: bytes, actor, qf, grip) -> None:
    """policy_parameters' bytes into the networks, by torch.load(weights_only=True): tensors only,
    nothing unpickled. Raises ConfigError where the learner's networks are not this actor's."""
    try:
        state = torch.load(io.BytesIO(blob), map_location=actor.action_scale.device, weights_only=True)
        actor.load_state_dict(state["actor"])
        qf.encoder.load_state_dict(state["encoder"])
        grip.dq.load_state_dict(state["dq"]) if grip else None
    except Exception as e:
        raise ConfigError(
            f"the learner's networks do not fit this actor's ({type(e).__name__}); give the actor the learner's "
            "network flags (--from-pixels, --image-*, --num-discrete-actions, --shared-encoder, ...)"
        ) from None


# THE LEARNER'S SIDE
# --------------------------------------------------------------------------------------------------
class Actors:
    """The learner's record of its actors. Each row an actor sends carries its actor's id and
    sequence number; `expected[id]` is the next one the learner takes (all before it are in the
    replay), `saved[id]` the first its last checkpoint lacks. `origins` names each replay row's
    actor and number."""

    def __init__(self, args, envs, capacity: int, networks: dict):
        self.args, self.networks = args, networks  # networks: policy_shapes, which each actor's must match
        self.spaces = [repr(envs.single_observation_space), repr(envs.single_action_space)]
        self.shapes = row_shapes(envs.single_observation_space, envs.single_action_space)
        self.dict_obs = isinstance(envs.single_observation_space, gym.spaces.Dict)
        self.expected, self.saved, self.received = {}, {}, {}
        self.peers, self.seen, self.pushed = {}, {}, {}  # of each id: its socket's routing id, last message, push
        self.told = set()  # the actors that sent their last rows
        self.origins = np.zeros((capacity, 2), dtype=np.int64)
        self.filled = 0  # the replay rows written: a checkpoint holds their origins alone
        self.blob = (-1, b"")  # the parameters' version and bytes, made once a version
        self.last_return = None

    def state_dict(self) -> dict:
        return {"expected": dict(self.expected), "origins": torch.from_numpy(self.origins[: self.filled].copy())}

    def load_state_dict(self, state: dict) -> None:
        self.expected, self.saved = dict(state["expected"]), dict(state["expected"])
        self.filled = len(state["origins"])
        self.origins[: self.filled] = state["origins"].numpy()

    def checkpointed(self) -> None:
        """A checkpoint was written: it holds every row received so far."""
        self.saved = dict(self.expected)

    def answer(self, socket, peer: bytes, actor: int, learner, global_step: int, header: dict) -> None:
        """An acknowledgement of the message `header`: the next row expected and the first the
        checkpoint lacks (with --checkpoint-freq 0, as no checkpoint is promised, the next
        expected); the parameters too where the actor has none (version -1), or older ones and the
        last push is PUSH_EVERY ago; whether the run is done, and whether the message was the
        actor's last."""
        version = int(header.get("version", -1))
        now, current = time.monotonic(), learner.actor_updates
        since = now - self.pushed.get(actor, -math.inf)
        push = version < 0 or version < current and since >= PUSH_EVERY
        if push and self.blob[0] != current:
            self.blob = current, policy_parameters(learner.actor, learner.qf, learner.grip)
        if push:
            self.pushed[actor] = now
        expected = self.expected.get(actor, 0)
        saved = self.saved.get(actor, 0) if self.args.checkpoint_freq else expected
        ack = dict(kind="ack", expected=expected, saved=saved, version=current, step=global_step)
        ack.update(done=global_step >= self.args.total_timesteps, last=bool(header.get("last")))
        self.send(socket, peer, pack(ack, blob=self.blob[1] if push else None))

    @staticmethod
    def send(socket, peer: bytes, message: list) -> None:
        with contextlib.suppress(Exception):  # never block: a message to a gone peer is dropped
            socket.send_multipart([peer, *message], flags=1)  # 1: zmq.NOBLOCK

    def refuse(self, socket, peer: bytes, reason: str) -> int:
        print(f"\nrefused an actor: {reason}", flush=True)
        self.send(socket, peer, pack({"kind": "refused", "reason": reason}))
        return 0

    def receive(self, socket, learner, writer, global_step: int) -> int:
        """One message from an actor: a hello (its spaces checked against the learner's env's), rows
        (`store`) or a heartbeat; answered. Returns the rows stored."""
        peer, *frames = socket.recv_multipart()
        try:
            header, arrays, _ = unpack(frames)
            actor, kind = int(header["actor"]), header["kind"]
        except Exception as e:  # not a message of this script's actors: dropped
            print(f"\na message that is no actor's was dropped ({type(e).__name__})", flush=True)
            return 0
        if kind == "hello":
            if header["spaces"] != self.spaces:
                theirs, mine = "; ".join(map(str, header["spaces"])), "; ".join(self.spaces)
                return self.refuse(socket, peer, f"actor {actor}'s spaces {theirs} are not the learner's {mine}")
            if header.get("networks") != self.networks:
                return self.refuse(
                    socket,
                    peer,
                    f"actor {actor}'s networks are not the learner's: give it the learner's network flags "
                    "(--from-pixels, --image-*, --num-discrete-actions, --shared-encoder, ...)",
                )
            size, every = header.get("outbox", 0), self.args.checkpoint_freq
            if size < every:  # its outbox would fill before a checkpoint held its rows
                reason = f"actor {actor}'s --outbox-size {size:,} is below the learner's --checkpoint-freq {every:,}"
                return self.refuse(socket, peer, f"{reason}: raise it to {every:,} or more")
            if self.peers.get(actor) != peer:  # not a hello sent again, unanswered for RESEND seconds
                print(f"\nactor {actor} joined at row {self.expected.get(actor, 0):,}", flush=True)
            self.peers[actor] = peer  # a replacement takes its id over
        elif self.peers.get(actor) != peer:  # replaced: refused; unknown since this learner started: greet
            if actor in self.peers:
                return self.refuse(socket, peer, f"actor {actor} was replaced by another with its id")
            self.send(socket, peer, pack({"kind": "hello"}))
            return 0
        self.seen[actor] = time.monotonic()
        n = self.store(actor, header, arrays, learner, writer, global_step) if kind == "rows" else 0
        self.answer(socket, peer, actor, learner, global_step + n, header)
        if header.get("last"):  # the actor ends: no rows come after these
            self.told.add(actor)
        return n

    def store(self, actor: int, header: dict, arrays: dict, learner, writer, global_step: int) -> int:
        """The rows of a message from the next expected number on, into the replay and (a person's)
        the demo buffer; their episodes and the actor's rates logged."""
        expected, first = self.expected.get(actor, 0), int(header["first"])
        if header.get("lost") and first > expected:  # the actor no longer holds the rows between
            print(f"\nactor {actor}: rows {expected:,} to {first - 1:,} are lost", flush=True)
            expected = first
        n = len(arrays.get("rewards", ()))
        bad = [key for key, shape in self.shapes.items() if key not in arrays or arrays[key].shape != (n, *shape)]
        if bad or first > expected or first + n <= expected:
            print(f"\nactor {actor}: rows {first:,}+{n} dropped" + (f", arrays {bad} malformed" if bad else ""))
            return 0
        take = {key: x[expected - first :] for key, x in arrays.items()}
        n = len(take["rewards"])
        obs, next_obs = (
            {key: take[f"{name}/{key}"] for key in learner.rb.spaces} if self.dict_obs else take[name]
            for name in ("obs", "next_obs")
        )
        columns = [take[key] for key in ("actions", "rewards")]
        intervened = take["interventions"].astype(bool)
        extras = take["terminations"], np.ones(n, dtype=bool), take["penalties"], intervened
        idx = learner.rb.add(obs, *columns, next_obs, *extras)  # each row its own s and s': actors interleave
        add_demos(learner.demo, intervened, obs, *columns, next_obs, take["terminations"], take["penalties"])
        self.origins[idx.numpy()] = np.stack([np.full(n, actor), expected + np.arange(n)], 1)
        self.filled = max(self.filled, int(idx.max()) + 1)
        self.expected[actor] = expected + n
        self.received[actor] = self.received.get(actor, 0) + n
        step = global_step + n
        writer.add_scalar("charts/policy_lag", float(np.mean(learner.actor_updates - take["version"])), step)
        writer.add_scalar(f"actors/{actor}/transitions", self.received[actor], step)
        for key in ("SPS", "overruns"):
            writer.add_scalar(f"actors/{actor}/{key}", float(header[key]), step)
        for j in np.flatnonzero(np.isfinite(take["episode_return"])):  # an episode ended at row j
            ended = global_step + j + 1  # that row's step
            self.last_return = float(take["episode_return"][j])  # for the learner's progress line
            writer.add_scalar("charts/episodic_return", self.last_return, ended)
            writer.add_scalar("charts/episodic_length", take["episode_length"][j], ended)
            writer.add_scalar("charts/intervention_rate", take["intervention_rate"][j], ended)
            writer.add_scalar("charts/demo_transitions", learner.demo.size, step)
        return n

    def silent(self) -> None:
        """Actors not heard from for --network-timeout count as gone; one that comes back says
        hello."""
        for actor, when in list(self.seen.items()):
            if time.monotonic() - when > self.args.network_timeout:
                print(f"\nactor {actor} silent for {self.args.network_timeout:g} s: counted gone", flush=True)
                self.peers.pop(actor, None)
                del self.seen[actor]


def serve(args, checkpoint, device, zmq) -> dict:
    """--role learner: binds --learner-address, stores what actors send and, once learning_starts
    rows arrived, updates flat out, an update step between messages; checkpoints count rows. --role
    both: the same, with an actor as its child process (`actor_child`), which must not end first."""
    memory_flags = "--batch-size (with images, also --image-size)"
    with contextlib.ExitStack() as stack:
        context = zmq.Context()
        stack.callback(context.destroy, linger=0)
        socket = context.socket(zmq.ROUTER)
        try:
            socket.bind(args.learner_address)
        except zmq.ZMQError as e:
            raise ConfigError(
                f"--learner-address {args.learner_address}: {zmq.strerror(e.errno)} (a second learner there?); "
                "pass another, such as tcp://127.0.0.1:5556"
            ) from None
        run = stack.enter_context(
            Run(args, checkpoint, device, memory_flags, observation_wrappers, at=offline_position)
        )
        obs_space, action_space = run.envs.single_observation_space, run.envs.single_action_space
        data = robot_learning_setup(args, obs_space, action_space)
        learner = Learner(args, run.envs, device, data, num_envs=1)  # each row its own frames: actors interleave
        actors = Actors(args, run.envs, args.buffer_size, policy_shapes(learner.actor, learner.qf, learner.grip))
        policy = greedy_policy(learner.actor, learner.grip, device)
        counts, _ = run.resume({**learner.stateful, "actors": actors}, (0, 0, 0, 0), policy)
        global_step, learner.critic_updates, learner.actor_updates, learner.update_steps = counts
        if args.compile:
            functions = [learner.update_critic, learner.update_actor]
            learner.update_critic, learner.update_actor = compiled(functions, device, learner.optimizers)

        def counters():  # where the run stands: its env steps, then the learner's update counts
            return global_step, learner.critic_updates, learner.actor_updates, learner.update_steps

        offline_phase(run, learner.update, learner.demo, learner.metrics, counters, args)
        address = socket.getsockopt_string(zmq.LAST_ENDPOINT)  # the port chosen where --learner-address has *
        child = None
        if args.role == "both":
            child = stack.enter_context(actor_child(args, address, lambda: global_step >= args.total_timesteps))
        where = f"learner at {address}, waiting for actors"
        print(where + (f"; its actor is process {child.pid}" if child else ""), flush=True)
        updates = learner.update_steps, time.monotonic()
        with data_kept(run, counters, learner, args):
            while global_step < args.total_timesteps and not run.stop_signal:
                previous_step, learning = global_step, global_step >= args.learning_starts
                if socket.poll(0 if learning else POLL_MS):
                    while socket.poll(0):
                        global_step += actors.receive(socket, learner, run.writer, global_step)
                        run.last_return = actors.last_return
                if learning:
                    learner.update(learner.replay)
                actors.silent()
                if child is not None and child.exitcode is not None:
                    raise ConfigError(f"--role both: its actor ended (exit code {child.exitcode}) before the run's end")
                run.log({}, learner.metrics, previous_step, global_step)
                if crossed(previous_step, global_step, args.log_freq):
                    rate = (learner.update_steps - updates[0]) / max(time.monotonic() - updates[1], 1e-6)
                    run.writer.add_scalar("charts/updates_per_second", rate, global_step)
                    utd = learner.critic_updates / max(global_step - args.learning_starts, 1)
                    run.writer.add_scalar("charts/utd_ratio", utd, global_step)
                    updates = learner.update_steps, time.monotonic()
                run.after_step(previous_step, counters(), None, policy)
                if crossed(previous_step, global_step, args.checkpoint_freq):
                    actors.checkpointed()
            until = time.monotonic() + args.network_timeout
            while {*actors.seen} - actors.told and time.monotonic() < until and not run.stop_signal:
                if socket.poll(100):  # until each actor is told that the run is done; rows that come are kept
                    global_step += actors.receive(socket, learner, run.writer, global_step)
        summary = run.finish(counters(), None, policy, learner.model())
        if args.save_replay:
            save_replay(run, learner.rb, args.save_replay, global_step)
    return {**summary, "critic_updates": learner.critic_updates, "actor_updates": learner.actor_updates}


# THE ACTOR'S SIDE
# --------------------------------------------------------------------------------------------------
class Outbox:
    """An actor's rows, numbered on from the learner's count for its id, kept until the learner's
    checkpoint holds them (at most --outbox-size; the actor's checkpoint holds them too); sent
    without blocking, one message at a time, from the first the learner lacks, again when unanswered
    for RESEND seconds."""

    def __init__(self, args, socket, zmq, spaces: list, networks: dict, load):
        self.args, self.socket, self.zmq, self.spaces, self.load = args, socket, zmq, spaces, load
        self.networks = networks  # policy_shapes, for the learner to check
        self.rows = []  # [(number, {key: array of one row})], oldest first
        self.next = self.expected = self.saved = self.version = self.step = self.overruns = self.takeovers = 0
        self.sent, self.in_flight, self.answered = -math.inf, False, time.monotonic()
        self.done, self.sps = False, 0.0
        self.closed = False  # the learner acknowledged this actor's last rows

    def send(self, header: dict, arrays: dict | None = None) -> bool:
        header = {**header, "actor": self.args.actor_id, "version": self.version}
        try:
            self.socket.send_multipart(pack(header, arrays), flags=self.zmq.NOBLOCK)
        except self.zmq.Again:  # no learner connected, or its queue full: sent again later
            return False
        self.sent, self.in_flight = time.monotonic(), True
        return True

    def greet(self) -> None:
        """A hello: this actor's spaces and outbox size, for the learner to check."""
        self.send({"kind": "hello", "spaces": self.spaces, "networks": self.networks, "outbox": self.args.outbox_size})

    def hello(self, stop_signal: list) -> None:
        """Greet the learner with this actor's spaces and take its count and parameters; a deadline
        of --network-timeout, then one line; a signal ends the actor at once, nothing written."""
        deadline = time.monotonic() + self.args.network_timeout
        print(f"actor {self.args.actor_id}: greeting the learner at {self.args.learner_address}", flush=True)
        while time.monotonic() < deadline:
            if stop_signal:
                raise SystemExit(128 + stop_signal[0])
            if time.monotonic() - self.sent > RESEND:
                self.greet()
            if self.socket.poll(100) and self.receive() == "ack":
                self.next = self.expected
                return
        raise ConfigError(
            f"no learner answered at {self.args.learner_address} within --network-timeout "
            f"{self.args.network_timeout:g} s: start one with --role learner (one in its --offline-steps answers "
            "after them), or check --learner-address (from another machine, an SSH tunnel to the learner's)"
        )

    def add(self, arrays: dict) -> None:
        """The envs' step: a row per sub-env, each numbered, with the parameters' version that
        acted."""
        for i in range(len(arrays["rewards"])):
            self.rows.append((self.next, {**{key: x[i] for key, x in arrays.items()}, "version": self.version}))
            self.next += 1

    def receive(self) -> str:
        """An answer: an acknowledgement drops the rows the learner's checkpoint holds and loads its
        parameters (at once, mid-episode too); a refusal ends this actor in one line."""
        header, _, blob = unpack(self.socket.recv_multipart())
        self.answered, self.in_flight = time.monotonic(), False
        if header["kind"] == "refused":
            raise ConfigError(f"the learner refused this actor: {header['reason']}")
        if header["kind"] == "hello":  # a restarted learner: greet it again
            self.greet()
            return "hello"
        self.expected, self.saved = header["expected"], header["saved"]  # counts: received, checkpointed
        self.step, self.done = header["step"], header["done"]
        self.closed = header["last"] and self.expected >= self.next
        self.rows = [(number, row) for number, row in self.rows if number >= self.saved]
        if blob is not None:
            self.load(blob)
            self.version = header["version"]
        return "ack"

    def exchange(self) -> None:
        """Take the learner's answers; unless a message is in flight, send the rows from the first
        it lacks, or after HEARTBEAT seconds of nothing to send, a heartbeat."""
        while self.socket.poll(0):
            self.receive()
        since = time.monotonic() - self.sent
        if self.in_flight and since < RESEND:
            return
        pending = [(number, row) for number, row in self.rows if number >= self.expected][:MAX_ROWS]
        ending = self.done or self.next >= self.args.total_timesteps  # the learner's end, or its own
        last = ending and (not pending or pending[-1][0] + 1 == self.next)  # no rows after these
        if not pending:
            self.send({"kind": "beat", "last": last}) if since > HEARTBEAT or last else None
            return
        arrays = {key: np.stack([row[key] for _, row in pending]) for key in pending[0][1]}
        first = pending[0][0]
        header = dict(kind="rows", first=first, lost=first > self.expected, SPS=self.sps, overruns=self.overruns)
        self.send({**header, "last": last}, arrays)

    def full(self) -> bool:
        return len(self.rows) >= self.args.outbox_size

    def state_dict(self) -> dict:
        return {"rows": self.rows, "next": self.next, "takeovers": self.takeovers}

    def load_state_dict(self, state: dict) -> None:
        """A resumed actor's: the rows the learner's checkpoint still lacks, sent again (a learner
        that kept them takes none twice), and new rows numbered on after them."""
        self.rows = [(number, row) for number, row in state["rows"] if number >= self.saved]
        self.next = max(self.next, state["next"])
        self.takeovers = state["takeovers"]


def paced(policy, hz: float):
    """`policy`, called at most `hz` times a second (0: no limit): an actor's evaluation steps a
    robot at its control rate, as its training does."""
    period = 1.0 / hz if hz else 0.0
    last = -math.inf

    def policy_at_rate(obs):
        nonlocal last
        time.sleep(max(0.0, last + period - time.monotonic()))
        last = time.monotonic()
        return policy(obs)

    return policy_at_rate


def act_for_learner(args, checkpoint, device, zmq) -> dict:
    """--role actor: steps the envs at --control-hz on a deadline schedule (a step late by over a
    tenth of a period is an overrun, and the schedule restarts from it: no catching up), sends each
    row, and takes new parameters between steps; one torch thread."""
    torch.set_num_threads(1)  # a second process's threads would take the cores the learner trains on
    with contextlib.ExitStack() as stack:
        context = zmq.Context()
        stack.callback(context.destroy, linger=0)
        socket = context.socket(zmq.DEALER)
        for option, value in ((zmq.LINGER, 0), (zmq.IMMEDIATE, 1), (zmq.SNDHWM, 4)):
            socket.setsockopt(option, value)  # IMMEDIATE: no queue for a learner not connected
        try:
            socket.connect(args.learner_address)
        except zmq.ZMQError as e:
            raise ConfigError(f"--learner-address {args.learner_address}: {e}") from None
        run = stack.enter_context(Run(args, checkpoint, device, "--image-size", observation_wrappers))
        envs = run.envs
        robot_learning_setup(args, envs.single_observation_space, envs.single_action_space)  # the flags checked
        actor, qf, _, grip = networks(args, envs, device)
        load = functools.partial(load_policy_parameters, actor=actor, qf=qf, grip=grip)
        spaces = [repr(envs.single_observation_space), repr(envs.single_action_space)]
        outbox = Outbox(args, socket, zmq, spaces, policy_shapes(actor, qf, grip), load)
        outbox.hello(run.stop_signal)
        person = Interventions(args, envs.single_action_space)
        policy = paced(greedy_policy(actor, grip, device), args.control_hz)  # evaluation on a robot at its rate
        # a new actor's steps go on from the learner's count of its rows; its rows kept on a stop
        (global_step, *_), obs = run.resume({"outbox": outbox}, (outbox.next, 0, 0, 0), policy)
        act = torch.no_grad()(lambda x: actor.get_action(x)[0])
        period = 1.0 / args.control_hz if args.control_hz else 0.0
        starts, paused = [], False
        gc.freeze()  # what setup made is never collected: fewer pauses in the control loop
        deadline = time.monotonic()
        while outbox.next < args.total_timesteps and not outbox.done and not run.stop_signal:
            outbox.exchange()
            if outbox.done:  # no step after the rows it just sent as its last
                break
            if outbox.full():  # paused until the learner's checkpoint holds more rows; a deadline
                if not paused:
                    print(
                        f"\noutbox full ({len(outbox.rows):,} rows the learner's checkpoint lacks): paused", flush=True
                    )
                paused = True
                silent = time.monotonic() - outbox.answered
                message = f"the learner at {args.learner_address} has not answered for {silent:.0f} s, the outbox full"
                check([(silent > args.network_timeout, message)])
                socket.poll(100)
                deadline = time.monotonic()
                continue
            paused = False
            starts.append(time.monotonic())
            actions = collect_actions(obs, actor, act, grip, outbox.step, args.learning_starts)
            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            check_rewards(rewards, actions, args.env_id, global_step)
            dones = terminations | truncations
            actions, intervened = person.actions(infos, actions, dones)
            penalties = np.array([p or 0.0 for p in step_info(infos, "discrete_penalty", dones)], np.float32)
            final = final_dict_observations if isinstance(next_obs, dict) else final_observations
            real_next_obs = final(next_obs, infos)
            rows = dict(actions=actions, rewards=rewards, terminations=terminations, penalties=penalties)
            rows.update(interventions=intervened)
            for name, o in (("obs", obs), ("next_obs", real_next_obs)):
                rows.update({f"{name}/{k}": x for k, x in o.items()} if isinstance(o, dict) else {name: o})
            episodes = np.full((3, args.num_envs), np.nan, np.float32)  # where an episode ended: r, l, rate
            for i in np.flatnonzero(infos.get("final_info", {}).get("_episode", [])):
                episode = infos["final_info"]["episode"]
                episodes[:, i] = episode["r"][i], episode["l"][i], person.steps[1, i] / person.steps[0, i]
            rows.update(episode_return=episodes[0], episode_length=episodes[1], intervention_rate=episodes[2])
            outbox.add(rows)  # an episode's statistics travel with its last row: sent again, kept, never lost
            outbox.takeovers += int(intervened.sum())
            previous_step, global_step = global_step, global_step + args.num_envs
            run.counters = (global_step, 0, 0, 0)  # an error's checkpoint: the outbox's rows
            run.log(infos, {}, previous_step, global_step)
            person.log(run.writer, dones, outbox.takeovers, global_step)
            obs = next_obs
            deadline += period
            while (left := deadline - time.monotonic()) > 0:  # the rest of the period: the learner's answers
                if socket.poll(left * 1000):
                    outbox.receive()
            if period and -left > period / 10:
                outbox.overruns += 1
                deadline = time.monotonic()
            if crossed(previous_step, global_step, args.log_freq) and len(starts) > 1:
                recent = starts[-100:]
                outbox.sps = (len(recent) - 1) / (recent[-1] - recent[0])
                for key, value in (("SPS", outbox.sps), ("overruns", outbox.overruns), ("version", outbox.version)):
                    run.writer.add_scalar(f"charts/{key}", value, global_step)
        gc.unfreeze()
        until = time.monotonic() + args.network_timeout
        while not outbox.closed and time.monotonic() < until and not run.stop_signal:
            outbox.exchange()  # the rows stepped after the last message too, marked as the last
            socket.poll(100)
        unsent = outbox.next - outbox.expected
        message = f"the learner at {args.learner_address} did not acknowledge the last {unsent:,} rows"
        check([(unsent and not run.stop_signal, f"{message} within --network-timeout {args.network_timeout:g} s")])
        periods = np.diff(starts)
        rate = len(periods) / max(periods.sum(), 1e-9)
        p99 = float(np.percentile(periods, 99)) if len(periods) else 0.0
        print(
            f"\nactor {args.actor_id}: {len(starts):,} steps at {rate:.2f} env steps/s, p99 period "
            f"{1000 * p99:.1f} ms, {outbox.overruns} overruns",
            flush=True,
        )
        summary = run.finish((global_step, 0, 0, 0), obs, policy, {})
    return {**summary, "rate": rate, "p99_period": p99, "overruns": outbox.overruns, "rows": outbox.next}


# ONE MACHINE (--role both): A LEARNER AND ITS ACTOR, A CHILD PROCESS
# --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def actor_child(args, address: str, finished):
    """--role both's actor: `args` as --role actor at the learner's `address`, in a child process
    (spawned: a fresh interpreter). At the learner's end, where `finished()`, it has
    --network-timeout to end as the last acknowledgement tells it; else, or after that, it is
    killed, losing only the steps the learner had not received, as any actor killed does."""
    child_args = replace(args, role="actor", learner_address=address, resume=None, resume_anyway=False)
    child_args = replace(child_args, offline_data=None, offline_steps=0, save_replay=None)  # the learner's
    process = torch.multiprocessing.get_context("spawn").Process(target=child_main, args=(child_args,))
    process.start()
    try:
        yield process
    finally:
        process.join(args.network_timeout if finished() else 0)
        process.kill()  # nothing where it ended
        process.join()


def child_main(args) -> None:
    """The child's `cli`: main(args), bad input in one line and exit code 2. In a process group of
    its own, so that a terminal's Ctrl-C stops the learner alone, which then ends it; it ends at
    once where the learner dies."""
    os.setpgrp()
    threading.Thread(target=end_with_parent, daemon=True).start()
    try:
        main(args)
    except ConfigError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        raise SystemExit(2) from None


def end_with_parent() -> None:
    torch.multiprocessing.parent_process().join()  # returns once the learner's process is gone (kill -9 too)
    print("\nthe learner is gone: its actor ends", flush=True)
    os._exit(1)


if __name__ == "__main__":
    cli()
