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
    3. GAE advantages are standardized over the rollout (SB3; `--norm-adv`), which the GAE paper
       does not do.
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
import traceback
import warnings
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
    """GAE's trade-off of bias (0) against variance (1), with --advantage gae (lambda; SB3 zoo)"""
    norm_adv: bool = True
    """standardize the advantages of --advantage gae over each rollout (SB3); n-step advantages are
    left as they are"""
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
    args, checkpoint, device = setup(args, observation_wrappers)
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
            update = torch.compile(update)
        low, high = (0, space.n - 1) if agent.discrete else (space.low, space.high)  # np.clip leaves Discrete as it is

        # ROLLOUT STORAGE: (T, N) per quantity; rewards and dones in numpy until the rollout is
        # complete (one copy each)
        frames = torch.uint8 if envs.single_observation_space.dtype == np.uint8 else None  # Atari's, kept as uint8
        rollout_obs = torch.zeros((T, N, *envs.single_observation_space.shape), device=device, dtype=frames)
        rollout_actions = torch.zeros((T, N, *space.shape), device=device, dtype=torch.long if agent.discrete else None)
        rollout_rewards, rollout_dones = np.zeros((T, N), dtype=np.float32), np.zeros((T, N), dtype=np.float32)
        rollout_values = torch.zeros((T, N), device=device)
        num_updates = args.total_timesteps // (T * N)
        (global_step, updates), obs = run.resume(dict(agent=agent, optimizer=optimizer), (0, 0))

        def policy(obs):  # greedy: the most probable action, or the Gaussian's mean clipped to the bounds
            stats = agent(torch.as_tensor(obs, device=device))[0]
            return np.clip((stats.argmax(-1) if agent.discrete else stats).cpu().numpy(), low, high)

        while updates < num_updates and not run.stop_signal:
            previous_step = global_step
            with torch.no_grad():  # COLLECT T steps in each of the N envs, stepped in lockstep (DEVIATION(1)); no graph
                for t in range(T):
                    rollout_obs[t] = torch.as_tensor(obs, device=device)
                    rollout_actions[t], rollout_values[t] = agent.act(rollout_obs[t])
                    actions = np.clip(rollout_actions[t].cpu().numpy(), low, high)  # a Box action: for the env only
                    obs, rewards, terminations, truncations, infos = envs.step(actions)  # SAME_STEP: no reset steps
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
                    if args.norm_adv and advantages.numel() > 1:  # DEVIATION(3); one advantage has no std (SB3)
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


# VALIDATION AND ATARI OBSERVATIONS
# ------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for this script's out-of-range or contradictory flags."""
    check(
        [
            (
                args.total_timesteps < args.num_envs * args.num_steps,
                f"--total-timesteps {args.total_timesteps} is less than one rollout "
                f"(--num-envs x --num-steps = {args.num_envs * args.num_steps}): raise it or shorten it",
            ),
            *(
                (not getattr(args, name) > 0, f"--{name.replace('_', '-')} must be positive")
                for name in ("num_steps", "learning_rate", "max_grad_norm", "optimizer_eps")
            ),
            (not (args.vf_coef >= 0 and args.ent_coef >= 0), "--vf-coef and --ent-coef must be non-negative"),
            (
                not (0 < args.gamma <= 1 and 0 <= args.gae_lambda <= 1),
                "--gamma must be in (0, 1], --gae-lambda in [0, 1]",
            ),
            (not 0 <= args.rms_alpha < 1, "--rms-alpha must lie in [0, 1)"),
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
