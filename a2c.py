"""Advantage Actor-Critic (A2C): synchronous A3C with n-step returns or GAE; Discrete or Box
actions; MLP or NatureCNN.

Papers:
    Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (A3C; A2C is its
        synchronous form), arXiv:1602.01783
    Schulman et al. 2015, "High-Dimensional Continuous Control Using Generalized Advantage
        Estimation", arXiv:1506.02438

Example:
    python a2c.py --env-id CartPole-v1 --advantage gae --seed 1

Deviations from the papers (each marked `# DEVIATION(n)` in the code):
    1. Synchronous (OpenAI baselines' A2C): `num_envs` envs step in lockstep and one update uses all
       their rollouts.
    2. A truncated episode's last reward gets gamma * V(final observation) added (the A3C paper had
       no time limits).
    3. GAE advantages are standardized over the rollout (SLM Lab's A2C, as in Foundations of Deep
       RL's Code 6.4, and SB3's PPO; `--norm-adv`), which the GAE paper does not do.
    4. The gradient norm is clipped to `max_grad_norm` (0.5, baselines); one learner, so no shared
       RMSprop statistics.
    5. The Gaussian's log std is one learned vector, the same in every state (baselines, SB3); A3C's
       network outputs a variance per state through a softplus.
    6. Actor and critic are two networks unless --shared-network (SB3's MLP policy); A3C shares all
       layers but the outputs.
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
    """environment to train on: any with Discrete or Box actions and 1-D observations, or an Atari
    id"""
    total_timesteps: int = 500_000
    """environment steps to train for, counted over all --num-envs environments; rounded down to
    whole rollouts"""
    num_envs: int = 8
    """number of environments stepped in lockstep in one process (SB3 zoo; OpenAI baselines uses 16
    for Atari)"""
    eval_freq: int = 50_000
    """evaluate the policy without exploration noise every this many env steps, and at the end (0:
    only at the end)"""
    log_freq: int = 4_000
    """write the latest update's losses to TensorBoard every this many env steps (SB3: 100
    updates)"""
    num_steps: int = 5
    """env steps per environment in each rollout, which makes one update (t_max; A3C paper, Sec. 8;
    baselines)"""
    advantage: Literal["nstep", "gae"] = "nstep"
    """how advantages are estimated: nstep returns (A3C paper, Algorithm S3) or gae (GAE paper,
    arXiv:1506.02438)"""
    gamma: float = 0.99
    """discount factor of future rewards (gamma; A3C paper)"""
    gae_lambda: float = 0.95
    """GAE's trade-off of bias (0) against variance (1), with --advantage gae (lambda; SB3's PPO
    default)"""
    norm_adv: bool = True
    """standardize the advantages of --advantage gae over each rollout (SLM Lab's A2C, SB3's PPO);
    n-step advantages are left as they are"""
    vf_coef: float = 0.5
    """weight of the value loss in the total loss (baselines)"""
    ent_coef: float = 0.01
    """weight of the entropy bonus, which keeps the policy exploring (beta; A3C paper, Sec. 8)"""
    max_grad_norm: float = 0.5
    """scale the gradient down when its global norm exceeds this value (baselines)"""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """which optimizer: rmsprop (A3C paper, baselines) or adam"""
    learning_rate: float = 7e-4
    """learning rate of the optimizer (baselines)"""
    rms_alpha: float = 0.99
    """RMSprop's decay of its running mean of squared gradients (baselines)"""
    optimizer_eps: float = 1e-5
    """epsilon of RMSprop or Adam, the constant added to the step's denominator (baselines)"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over the run (A3C paper)"""
    shared_network: bool = False
    """one network body with a policy head and a value head (baselines' Atari model); if not, two
    networks"""


HIDDEN = 64  # units per hidden layer of the MLPs (SB3's A2C)
HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


# PURE MATH
# --------------------------------------------------------------------------------------------------
def discounted_sums(x, discounts, last):
    """y (T, N) backwards from y[T] = last (N,): y[t] = x[t] + discounts[t] * y[t+1], for n-step
    returns and GAE."""
    y = torch.empty_like(x)
    for t in reversed(range(len(x))):
        last = y[t] = x[t] + discounts[t] * last
    return y


def nstep_returns(rewards, dones, last_values, gamma: float):
    """n-step returns (T, N): R[t] = r[t] + gamma * (1 - d[t]) * R[t+1] from R[T] = V(s_T)   [A3C
    paper, Alg. S3]"""
    return discounted_sums(rewards, gamma * (1.0 - dones), last_values)


def gae_advantages(rewards, values, dones, last_values, gamma: float, gae_lambda: float):
    """GAE (T, N) from rewards, values, dones (T, N) and V[T] = last_values (N,)   [GAE paper, eq.
    16]: delta[t] = r[t] + gamma * (1 - d[t]) * V[t+1] - V[t];  A[t] = delta[t] + gamma * lambda *
    (1 - d[t]) * A[t+1]"""
    discounts = gamma * (1.0 - dones)
    deltas = rewards + discounts * torch.cat((values[1:], last_values.unsqueeze(0))) - values
    return discounted_sums(deltas, gae_lambda * discounts, torch.zeros_like(last_values))


def bootstrap_truncations(rewards, truncations, final_values, gamma: float):
    """r + gamma * V(final obs) at truncated steps, r elsewhere (N,) (DEVIATION(2)); a termination
    has no future."""
    return rewards + gamma * truncations * final_values


def explained_variance(predictions, targets):
    """1 - Var[targets - predictions] / Var[targets], a 0-d tensor; nan when the targets do not
    vary."""
    return torch.where(targets.var() == 0, torch.nan, 1 - (targets - predictions).var() / targets.var())


# NETWORKS
# --------------------------------------------------------------------------------------------------
def layer_init(layer: nn.Module, gain: float = np.sqrt(2)) -> nn.Module:
    """Orthogonal weights with this gain and zero biases (baselines' A2C and SB3)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def trunk(obs_shape) -> nn.Sequential:
    """NatureCNN (Mnih et al. 2015) for (stack, 84, 84) frames; a 64-64 tanh MLP for 1-D
    observations."""
    if len(obs_shape) == 3:
        return nn.Sequential(
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
    return nn.Sequential(
        layer_init(nn.Linear(obs_shape[0], HIDDEN)), nn.Tanh(), layer_init(nn.Linear(HIDDEN, HIDDEN)), nn.Tanh()
    )


class Agent(nn.Module):
    """pi(a|s), V(s): a shared trunk or two networks; Categorical(logits) or Normal(mean(s),
    exp(log_std)), by hand."""

    def __init__(self, envs, shared: bool):
        super().__init__()
        obs_shape, space = envs.single_observation_space.shape, envs.single_action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.actor_trunk = trunk(obs_shape)
        self.critic_trunk = self.actor_trunk if shared else trunk(obs_shape)  # DEVIATION(6) unless shared
        features, outputs = self.actor_trunk[-2].out_features, int(space.n) if self.discrete else space.shape[0]
        self.actor_head = layer_init(nn.Linear(features, outputs), gain=0.01)
        self.critic_head = layer_init(nn.Linear(features, 1), gain=1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(outputs))  # state-independent: DEVIATION(5)

    def forward(self, obs):
        """(policy statistics (B, A): the logits, or the Gaussian's mean; V(s) (B,)), one pass
        through a shared trunk."""
        obs = obs.float() * (1.0 / 255.0) if obs.dtype == torch.uint8 else obs.float()  # frames to [0, 1] here only
        features = self.actor_trunk(obs)
        critic_features = features if self.critic_trunk is self.actor_trunk else self.critic_trunk(obs)
        return self.actor_head(features), self.critic_head(critic_features).squeeze(-1)

    def log_prob_entropy(self, stats, actions):
        """(log pi(a|s), H) (B,) from forward's stats. Categorical: log softmax(logits)[a], H =
        -sum_a p log p. Normal: sum_i -(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log(2 pi)/2, H
        = sum_i 1/2 + log(2 pi)/2 + log sigma_i."""
        if self.discrete:
            log_probs = stats.log_softmax(-1)
            return log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)
        z = (actions - stats) * torch.exp(-self.log_std)
        log_prob = (-0.5 * z.pow(2) - self.log_std - HALF_LOG_2PI).sum(-1)
        return log_prob, (0.5 + HALF_LOG_2PI + self.log_std).sum().expand(len(stats))

    @torch.no_grad()
    def act(self, obs):
        """(a ~ pi, V): an unclipped Gaussian sample, or Gumbel-max argmax_a logits_a - log(-log
        u_a), u_a ~ U[0, 1)."""
        stats, values = self(obs)
        if self.discrete:
            return (stats - torch.rand_like(stats).log_().neg_().log_()).argmax(-1), values
        return stats + self.log_std.exp() * torch.randn_like(stats), values


# LOSSES AND UPDATES
# --------------------------------------------------------------------------------------------------
def compute_loss(agent, obs, actions, advantages, value_targets, vf_coef: float, ent_coef: float):
    """(loss, detached metrics), advantages and value_targets detached:
    L = -E[log pi(a|s) * A] + vf_coef * E[(V(s) - V_target)^2] - ent_coef * E[H(pi(.|s))]
    [arXiv:1602.01783 Sec. 4]"""
    stats, values = agent(obs)
    log_prob, entropy = agent.log_prob_entropy(stats, actions)
    policy_loss, value_loss = -(log_prob * advantages).mean(), (values - value_targets).pow(2).mean()
    entropy = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    return loss, {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy.detach()}


def a2c_updates(agent, optimizer, args):
    """update(obs, actions, advantages, value_targets): one gradient step of `optimizer` on
    `compute_loss` over a whole rollout, the gradient norm clipped first; returns detached metrics
    (no host sync)."""
    params = list(agent.parameters())

    def update(obs, actions, advantages, value_targets):
        loss, metrics = compute_loss(agent, obs, actions, advantages, value_targets, args.vf_coef, args.ent_coef)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.get_total_norm([torch.cat([p.grad.flatten() for p in params])])  # ||g||, DEVIATION(4)
        nn.utils.clip_grads_with_norm_(params, args.max_grad_norm, grad_norm)  # g *= min(1, max_grad_norm / ||g||)
        optimizer.step()
        return metrics

    return update


# MAIN
# --------------------------------------------------------------------------------------------------
def main(args: Args) -> dict:
    """Train; returns a summary. Raises ConfigError, before writing anything, on bad flags, envs or
    checkpoints."""
    args, checkpoint, device = setup(args, check_args, check_spaces, observation_wrappers)
    with Run(args, checkpoint, device, "--num-envs or --num-steps", observation_wrappers) as run:
        envs, T, N, space = run.envs, args.num_steps, args.num_envs, run.envs.single_action_space
        agent = Agent(envs, args.shared_network).to(device)
        params = list(agent.parameters())
        # the learning rate a tensor on the device: --anneal-lr changes it in place, and compiled
        # code reads the new value with no recompile
        lr = torch.tensor(args.learning_rate, device=device)
        optimizer = (
            torch.optim.RMSprop(params, lr=lr, alpha=args.rms_alpha, eps=args.optimizer_eps)
            if args.optimizer == "rmsprop"
            else torch.optim.Adam(params, lr=lr, eps=args.optimizer_eps)
        )
        update = a2c_updates(agent, optimizer, args)
        if args.compile:  # the same function, compiled
            update = compiled(update)
        low, high = (0, space.n - 1) if agent.discrete else (space.low, space.high)  # np.clip leaves Discrete as it is

        # ROLLOUT STORAGE: (T, N) per quantity; rewards and dones in numpy until the rollout is
        # complete (one copy each)
        frames = torch.uint8 if envs.single_observation_space.dtype == np.uint8 else None  # Atari's, kept as uint8
        rollout_obs = torch.zeros((T, N, *envs.single_observation_space.shape), device=device, dtype=frames)
        rollout_actions = torch.zeros((T, N, *space.shape), device=device, dtype=torch.long if agent.discrete else None)
        rollout_rewards, rollout_dones = np.zeros((T, N), dtype=np.float32), np.zeros((T, N), dtype=np.float32)
        rollout_values = torch.zeros((T, N), device=device)
        num_updates = args.total_timesteps // (T * N)

        def policy(obs):  # greedy: the most probable action, or the Gaussian's mean clipped to the bounds
            stats = agent(torch.as_tensor(obs, device=device))[0]
            return np.clip((stats.argmax(-1) if agent.discrete else stats).cpu().numpy(), low, high, dtype=space.dtype)

        (global_step, updates), obs = run.resume(dict(agent=agent, optimizer=optimizer), (0, 0), policy)

        while updates < num_updates and not run.stop_signal:
            previous_step = global_step
            with torch.no_grad():  # COLLECT T steps in each of the N envs, stepped in lockstep (DEVIATION(1)); no graph
                for t in range(T):
                    rollout_obs[t] = torch.as_tensor(obs, device=device)
                    rollout_actions[t], rollout_values[t] = agent.act(rollout_obs[t])
                    # a Box action clipped, in its dtype, for the env only: the rollout keeps it
                    actions = np.clip(rollout_actions[t].cpu().numpy(), low, high, dtype=space.dtype)
                    obs, rewards, terminations, truncations, infos = envs.step(actions)  # SAME_STEP: no reset steps
                    check_rewards(rewards, actions, args.env_id, global_step)
                    global_step += N
                    run.log(infos, None, global_step - N, global_step)
                    if truncations.any():  # bootstrap through truncations, never terminations (DEVIATION(2))
                        final_obs = torch.as_tensor(final_observations(obs, infos), device=device)
                        final_values = agent(final_obs)[1].cpu().numpy()
                        # a step the time limit truncates as the episode terminates is a termination
                        rewards = bootstrap_truncations(rewards, truncations & ~terminations, final_values, args.gamma)
                    rollout_rewards[t], rollout_dones[t] = rewards, terminations | truncations

                # ADVANTAGES from V(s_T)
                last_values = agent(torch.as_tensor(obs, device=device))[1]
                rewards, dones = (torch.as_tensor(x, device=device) for x in (rollout_rewards, rollout_dones))
                if args.advantage == "nstep":
                    value_targets = nstep_returns(rewards, dones, last_values, args.gamma)
                    advantages = value_targets - rollout_values
                else:
                    advantages = gae_advantages(
                        rewards, rollout_values, dones, last_values, args.gamma, args.gae_lambda
                    )
                    value_targets = advantages + rollout_values  # the lambda-return, V(s_t)'s target (SB3)
                    if args.norm_adv and advantages.numel() > 1:  # DEVIATION(3); one advantage has no std (SB3's PPO)
                        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

            # UPDATE: one gradient step on the whole rollout; --anneal-lr decays the learning rate
            # linearly to 0
            optimizer.param_groups[0]["lr"].fill_(
                args.learning_rate * (1 - updates / num_updates if args.anneal_lr else 1)
            )
            metrics = update(*(x.flatten(0, 1) for x in (rollout_obs, rollout_actions, advantages, value_targets)))
            updates += 1

            # LOG the latest update's losses and the explained variance of its rollout's values
            if crossed(previous_step, global_step, args.log_freq):
                run.log({}, metrics, previous_step, global_step)
                ev = explained_variance(rollout_values.flatten(), value_targets.flatten())
                run.writer.add_scalar("losses/explained_variance", float(ev), global_step)  # nan if flat: no divergence
                run.writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            run.after_step(previous_step, (global_step, updates), obs, policy)
        summary = run.finish((global_step, updates), obs, policy, {"agent": agent.state_dict()})
    return {**summary, "updates": updates}


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
                for name in ("num_steps", "learning_rate", "max_grad_norm", "optimizer_eps")
            ),
            (not args.vf_coef >= 0, f"--vf-coef must be non-negative, not {args.vf_coef}"),
            (not args.ent_coef >= 0, f"--ent-coef must be non-negative, not {args.ent_coef}"),
            (not 0 < args.gamma <= 1, f"--gamma must lie in (0, 1], not {args.gamma}"),
            (not 0 <= args.gae_lambda <= 1, f"--gae-lambda must lie in [0, 1], not {args.gae_lambda}"),
            (not 0 <= args.rms_alpha < 1, f"--rms-alpha must lie in [0, 1), not {args.rms_alpha}"),
            (
                args.total_timesteps < args.num_envs * args.num_steps,
                f"--total-timesteps ({args.total_timesteps}) must be at least one rollout, --num-envs x --num-steps "
                f"= {args.num_envs * args.num_steps}",
            ),
            (
                args.advantage == "nstep" and args.gae_lambda != Args.gae_lambda,
                "--gae-lambda is GAE's: add --advantage gae, or drop it",
            ),
            (
                args.advantage == "nstep" and args.norm_adv != Args.norm_adv,
                "--no-norm-adv: only GAE's advantages are normalized: add --advantage gae, or drop it",
            ),
            (
                args.optimizer == "adam" and args.rms_alpha != Args.rms_alpha,
                "--rms-alpha is RMSprop's: drop it, or use --optimizer rmsprop",
            ),
        ]
    )


def check_spaces(env_id: str, obs_space, action_space) -> None:
    """Raise ConfigError unless the actions are Discrete or a bounded 1-D Box, the observations 1-D
    or Atari frames."""
    bounded = isinstance(action_space, gym.spaces.Box) and np.isfinite([action_space.low, action_space.high]).all()
    check(
        [
            (
                not (isinstance(action_space, gym.spaces.Discrete) or bounded and len(action_space.shape) == 1),
                f"{env_id} has a {action_space} action space; "
                "this script needs Discrete or a 1-D Box with finite bounds",
            ),
            (
                isinstance(action_space, gym.spaces.Discrete) and action_space.start != 0,
                f"{env_id}'s Discrete actions start at {getattr(action_space, 'start', 0)}; this script's start at 0: "
                "shift them with a gymnasium.ActionWrapper",
            ),
            (
                not (
                    isinstance(obs_space, gym.spaces.Box)
                    and (len(obs_space.shape) == 1 or obs_space.shape[1:] == (84, 84))
                ),
                f"{env_id} has {obs_space} observations; this script needs Atari frames or a 1-D Box "
                "(FlattenObservation)",
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
