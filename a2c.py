"""Advantage Actor-Critic (A2C): synchronous A3C with n-step returns or GAE, for Discrete or Box actions, from flat
observations (MLP) or Atari frames (NatureCNN).

Papers:
    Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (A3C; A2C is its synchronous form), arXiv:1602.01783
    Schulman et al. 2015, "High-Dimensional Continuous Control Using Generalized Advantage Estimation", arXiv:1506.02438

Example:
    python a2c.py --env-id CartPole-v1 --advantage gae --seed 1

Deviations from the papers (each marked `# DEVIATION(n)` in the code):
    1. Synchronous: `num_envs` envs step in lockstep and one update uses all their rollouts (OpenAI baselines' A2C),
       instead of A3C's asynchronous actor-learners with Hogwild updates.
    2. A truncated episode bootstraps: its last reward gets gamma * V(final observation) added, and the step counts
       as an episode end. The A3C paper's envs had no time limits.
    3. GAE advantages are standardized over the rollout (seed 003; `--norm-adv`), which the GAE paper does not do.
    4. The gradient norm is clipped to `max_grad_norm` (0.5, baselines) and RMSprop's statistics are not shared across
       workers (there is one learner).
"""

import contextlib
import io
import os
import pickle
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
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
    eval_freq: int = 50_000
    """evaluate the policy without exploration noise every this many env steps, and at the end; 0: only at the end"""
    eval_episodes: int = 10
    """episodes per evaluation"""
    checkpoint_freq: int = 0
    """write runs/<run_name>/checkpoint.pt every this many env steps (0: only on SIGINT/SIGTERM)"""
    resume: str | None = None
    """continue the run saved in this checkpoint.pt; the run's saved configuration is used and other flags ignored"""

    # --- algorithm ---
    env_id: str = "CartPole-v1"
    """any gymnasium env with a Discrete or Box action space and 1-D observations, or an Atari id"""
    total_timesteps: int = 500_000
    """environment steps in total, summed over all `num_envs` environments"""
    num_envs: int = 8
    """number of environments stepped in parallel (SB3 zoo; 16 for Atari, as OpenAI baselines)"""
    vector_env: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async: for slow envs; resume is then inexact)"""
    num_steps: int = 5
    """t_max: env steps per env in each rollout (A3C paper, Sec. 8; baselines)"""
    advantage: Literal["nstep", "gae"] = "nstep"
    """n-step returns (A3C paper, Algorithm S3) or generalized advantage estimation (arXiv:1506.02438)"""
    gamma: float = 0.99
    """gamma: discount factor (A3C paper)"""
    gae_lambda: float = 0.95
    """lambda of GAE (--advantage gae; SB3 zoo, seed 003)"""
    norm_adv: bool = True
    """standardize the advantages of --advantage gae over each rollout (seed 003); n-step advantages are left as they are"""
    vf_coef: float = 0.5
    """coefficient of the value loss (baselines)"""
    ent_coef: float = 0.01
    """beta: coefficient of the entropy bonus (A3C paper, Sec. 8)"""
    max_grad_norm: float = 0.5
    """clip the global gradient norm to this value (baselines)"""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """RMSprop (A3C paper, baselines) or Adam"""
    learning_rate: float = 7e-4
    """learning rate (baselines)"""
    rms_alpha: float = 0.99
    """RMSprop's smoothing constant (baselines)"""
    rms_eps: float = 1e-5
    """epsilon of RMSprop and of Adam (baselines)"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over the run (A3C paper)"""
    shared_network: bool = False
    """one trunk with a policy head and a value head (baselines' Atari model); otherwise separate networks"""
    log_interval: int = 100
    """log the losses, averaged over this many updates, every this many updates (SB3's A2C logs every 100)"""


HIDDEN = 64  # units per hidden layer of the MLPs (SB3's A2C)
CNN_FEATURES = 512  # NatureCNN's last hidden layer (Mnih et al. 2015)
FRAME_STACK, FRAME_SIZE, NOOP_MAX, FRAME_SKIP = 4, 84, 30, 4  # Atari preprocessing (Mnih et al. 2015; seed 000)
HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))
EVAL_SEED_OFFSET = 1_000_000  # evaluation episode k is reset with seed + EVAL_SEED_OFFSET + k
PROGRESS_SECONDS = 0.5, 30.0  # progress refresh interval on a terminal, and between plain lines otherwise


class ConfigError(Exception):
    """A bad flag, env or checkpoint: the CLI prints the message on one line and exits with code 2."""


# ---------------------------------------------------------------------------------------------------------------------
# PURE MATH
# ---------------------------------------------------------------------------------------------------------------------
def nstep_returns(rewards, dones, last_values, gamma: float):
    """n-step returns, computed backwards through the rollout.

    Shapes: rewards, dones (T, N); last_values (N,), V(s_T). dones[t] = 1: the episode ended at step t.
    R[T-1] = r[T-1] + gamma * (1 - d[T-1]) * V(s_T);  R[t] = r[t] + gamma * (1 - d[t]) * R[t+1]   [arXiv:1602.01783 Alg. S3]
    """
    discounts = gamma * (1.0 - dones)
    returns = torch.empty_like(rewards)
    future = last_values
    for t in reversed(range(len(rewards))):
        future = returns[t] = rewards[t] + discounts[t] * future
    return returns


def gae_advantages(rewards, values, dones, last_values, gamma: float, gae_lambda: float):
    """Generalized advantage estimates, computed backwards through the rollout.

    Shapes: rewards, values, dones (T, N); last_values (N,). V[T] = last_values.
    delta[t] = r[t] + gamma * (1 - d[t]) * V[t+1] - V[t];  A[t] = delta[t] + gamma * lambda * (1 - d[t]) * A[t+1]
    [arXiv:1506.02438 eq. 16]
    """
    discounts = gamma * (1.0 - dones)
    deltas = rewards + discounts * torch.cat((values[1:], last_values.unsqueeze(0))) - values
    advantages = torch.empty_like(rewards)
    future = torch.zeros_like(last_values)
    for t in reversed(range(len(rewards))):
        future = advantages[t] = deltas[t] + gae_lambda * discounts[t] * future
    return advantages


def bootstrap_truncations(rewards, truncations, final_values, gamma: float):
    """r + gamma * V(final obs) at truncated steps, r elsewhere (DEVIATION(2)); the step then counts as an episode end.

    Shapes: rewards, truncations (N,); final_values (N,), V of each env's final observation (any value where not
    truncated). A termination gets nothing: its episode has no future.
    """
    return rewards + gamma * truncations * final_values


def explained_variance(predictions, targets):
    """1 - Var[targets - predictions] / Var[targets]; nan when the targets do not vary."""
    var = targets.var()
    return float("nan") if var == 0 else float(1 - (targets - predictions).var() / var)


# ---------------------------------------------------------------------------------------------------------------------
# ENVIRONMENTS
# ---------------------------------------------------------------------------------------------------------------------
def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def make_env(env_id: str, video_dir: str | None = None):
    """A thunk building one env that records per-episode statistics (`infos["episode"]`).

    Atari ids get the wrappers of seed 000, in its order: NoopReset(30), MaxAndSkip(4), EpisodicLife, FireReset (where
    the game has FIRE), WarpFrame (84x84 grayscale), ClipReward, FrameStack(4). RecordEpisodeStatistics sits below them,
    so `episode` holds the real game's unclipped return and its length in frames. `ALE/*-v5` ids are made with
    frameskip=1 (MaxAndSkip skips) and keep their sticky actions (repeat_action_probability 0.25); `*NoFrameskip-v4` ids
    have neither. Both end an episode at 108,000 frames. Seeding happens at the first reset.
    With video_dir, the first real episode is recorded there (needs moviepy).
    """

    def thunk():
        kwargs = {"render_mode": "rgb_array"} if video_dir else {}
        if is_atari(env_id):
            import ale_py
            from stable_baselines3.common import atari_wrappers as w

            gym.register_envs(ale_py)
            env = gym.make(env_id, **kwargs, **({"frameskip": 1} if env_id.startswith("ALE/") else {}))
        else:
            env = gym.make(env_id, **kwargs)
        if video_dir:
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda k: k == 0, disable_logger=True)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        if is_atari(env_id):
            env = w.NoopResetEnv(env, noop_max=NOOP_MAX)
            env = w.MaxAndSkipEnv(env, skip=FRAME_SKIP)
            env = w.EpisodicLifeEnv(env)
            if "FIRE" in env.unwrapped.get_action_meanings():
                env = w.FireResetEnv(env)
            env = w.WarpFrame(env, width=FRAME_SIZE, height=FRAME_SIZE)
            env = DropChannel(env)
            env = w.ClipRewardEnv(env)
            env = gym.wrappers.FrameStackObservation(env, FRAME_STACK)  # pads a new episode with its first frame
        return env

    return thunk


class DropChannel(gym.ObservationWrapper):
    """WarpFrame's (84, 84, 1) frames as (84, 84), so that FrameStack makes (4, 84, 84) (a picklable wrapper)."""

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[..., 0], space.high[..., 0], dtype=space.dtype)

    def observation(self, observation):
        return observation[..., 0]


def final_observations(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The true s_{t+1} of every sub-env, shape (num_envs, *obs_shape).

    Under SAME_STEP autoreset an ended sub-env's `next_obs` row is already its reset observation; the final
    observation of the ended episode is in infos["final_obs"] (mask infos["_final_obs"]).
    """
    real_next_obs = next_obs.copy()
    if "_final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs


def env_snapshot(envs) -> bytes:
    """Pickle the sub-envs with their simulator state and RNG, for an exact resume.

    MuJoCo and ALE envs pickle through EzPickle, which rebuilds them from their constructor arguments; their np_random
    and simulator state (MjData, or the ALE state with its RNG) are stored beside them and put back by `env_restore`.
    Async envs live in subprocesses: nothing is stored, and a resumed run starts new episodes.
    """
    if not hasattr(envs, "envs"):
        return pickle.dumps(None)
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
    saved = pickle.loads(snapshot)
    if saved is None:
        return None, False
    sub_envs, extras, exact = saved
    for env, (np_random, state) in zip(sub_envs, extras):
        env.unwrapped.np_random = np_random
        if hasattr(env.unwrapped, "ale"):
            env.unwrapped.ale.restoreState(state)
        elif state is not None:
            import mujoco

            mujoco.mj_copyData(env.unwrapped.data, env.unwrapped.model, state)
    return sub_envs, exact


def vector_env(thunks, mode: str = "sync"):
    """SAME_STEP autoreset: a step that ends an episode returns the reset observation and infos["final_obs"]."""
    cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
    return cls(thunks, autoreset_mode=AutoresetMode.SAME_STEP)


# ---------------------------------------------------------------------------------------------------------------------
# NETWORKS
# ---------------------------------------------------------------------------------------------------------------------
def layer_init(layer: nn.Module, gain: float = np.sqrt(2)) -> nn.Module:
    """Orthogonal weights with this gain and zero biases (baselines' A2C and SB3)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def trunk(obs_shape) -> nn.Sequential:
    """NatureCNN for (stack, 84, 84) uint8 frames, scaled to [0, 1] here and nowhere else; a 64-64 tanh MLP for 1-D obs."""
    if len(obs_shape) == 3:
        return nn.Sequential(
            Scale(1.0 / 255.0),
            layer_init(nn.Conv2d(obs_shape[0], 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, CNN_FEATURES)), nn.ReLU(),
        )
    return nn.Sequential(layer_init(nn.Linear(obs_shape[0], HIDDEN)), nn.Tanh(),
                         layer_init(nn.Linear(HIDDEN, HIDDEN)), nn.Tanh())


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x.float() * self.factor


class Agent(nn.Module):
    """Policy pi(a|s) and value V(s): one shared trunk with two heads, or separate actor and critic networks.

    Discrete actions: Categorical(logits). Box actions: Normal(mean(s), exp(log_std)) with a state-independent log_std;
    the env receives the sample clipped to the bounds, the log-probability is of the unclipped sample.
    The log-probabilities, entropies and samples are written out instead of built from torch.distributions, whose
    argument checks cost more than the whole network on CartPole; the tests compare them with torch.distributions.
    """

    def __init__(self, envs, shared: bool):
        super().__init__()
        obs_shape, space = envs.single_observation_space.shape, envs.single_action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.actor_trunk = trunk(obs_shape)
        self.critic_trunk = self.actor_trunk if shared else trunk(obs_shape)
        features = self.actor_trunk[-2].out_features
        outputs = int(space.n) if self.discrete else int(np.prod(space.shape))
        self.actor_head = layer_init(nn.Linear(features, outputs), gain=0.01)
        self.critic_head = layer_init(nn.Linear(features, 1), gain=1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(outputs))

    def value(self, obs):
        return self.critic_head(self.critic_trunk(obs)).squeeze(-1)

    def forward(self, obs):
        """(policy statistics (B, A): the logits, or the Gaussian's mean; V(s) (B,)), one pass through a shared trunk."""
        features = self.actor_trunk(obs)
        critic_features = features if self.critic_trunk is self.actor_trunk else self.critic_trunk(obs)
        return self.actor_head(features), self.critic_head(critic_features).squeeze(-1)

    def log_prob_entropy(self, stats, actions):
        """(log pi(a|s) (B,), H[pi(.|s)] (B,)) from forward's statistics.

        Categorical: log softmax(logits)[a], H = -sum_a p log p.
        Normal: log pi(a|s) = sum_i -(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log(2 pi) / 2,
                H = sum_i 1/2 + log(2 pi) / 2 + log sigma_i.
        """
        if self.discrete:
            log_probs = stats.log_softmax(-1)
            return log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)
        z = (actions - stats) * torch.exp(-self.log_std)
        log_prob = (-0.5 * z.pow(2) - self.log_std - HALF_LOG_2PI).sum(-1)
        return log_prob, (0.5 + HALF_LOG_2PI + self.log_std).sum().expand(len(stats))

    def evaluate_actions(self, obs, actions):
        """(log pi(a|s) (B,), entropy (B,), V(s) (B,)) for a batch of actions already taken."""
        stats, values = self(obs)
        return *self.log_prob_entropy(stats, actions), values

    @torch.no_grad()
    def act(self, obs):
        """(a ~ pi(.|s) (B,) or (B, A), V(s) (B,)) for the rollout. A Box action is the unclipped Gaussian sample.

        Categorical by the Gumbel-max trick: argmax_a (logits_a + g_a), g_a = -log(-log u_a), u_a ~ U[0, 1).
        """
        stats, values = self(obs)
        if self.discrete:
            return (stats - torch.rand_like(stats).log_().neg_().log_()).argmax(-1), values
        return stats + self.log_std.exp() * torch.randn_like(stats), values

    @torch.no_grad()
    def greedy_action(self, obs):
        """argmax_a pi(a|s) for Discrete actions, the mean for Box actions."""
        stats = self.actor_head(self.actor_trunk(obs))
        return stats.argmax(-1) if self.discrete else stats


def flatten_parameters(module: nn.Module) -> nn.Parameter:
    """Make every parameter of `module` a view into one flat parameter, and every gradient a view into its gradient.

    The optimizer and the gradient clipping then each run a handful of kernels on one tensor instead of a handful per
    layer: on CartPole's 12 small tensors that is most of an update's cost. Backward accumulates into the existing
    `.grad` views in place, so clear them with `flat.grad.zero_()`, never by setting them to None. Call it after
    `.to(device)`, which would make new tensors.
    """
    params = list(module.parameters())
    flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]))
    flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        p.data = flat.data[offset: offset + p.numel()].view_as(p)
        p.grad = flat.grad[offset: offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat


# ---------------------------------------------------------------------------------------------------------------------
# LOSS
# ---------------------------------------------------------------------------------------------------------------------
def compute_loss(agent, obs, actions, advantages, value_targets, vf_coef: float, ent_coef: float):
    """L = -E[log pi(a|s) * A] + vf_coef * E[(V(s) - V_target)^2] - ent_coef * E[H(pi(.|s))]   [arXiv:1602.01783 Sec. 4]

    advantages and value_targets enter detached. Returns (loss, metrics).
    """
    log_prob, entropy, values = agent.evaluate_actions(obs, actions)
    policy_loss = -(log_prob * advantages).mean()
    value_loss = (values - value_targets).pow(2).mean()
    entropy = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    return loss, {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(), "entropy": entropy.detach()}


# ---------------------------------------------------------------------------------------------------------------------
# CHECKS, EVALUATION, PROGRESS
# ---------------------------------------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for out-of-range or contradictory flags, before anything is written."""
    batch = args.num_envs * args.num_steps
    problems = [
        (args.num_envs < 1, "--num-envs must be at least 1"),
        (args.num_steps < 1, "--num-steps must be at least 1"),
        (args.total_timesteps < batch,
         f"--total-timesteps {args.total_timesteps} is less than one rollout (--num-envs x --num-steps = {batch}): "
         "raise it or shorten the rollout"),
        (not args.learning_rate > 0, "--learning-rate must be positive"),
        (not 0 < args.gamma <= 1, "--gamma must lie in (0, 1]"),
        (not 0 <= args.gae_lambda <= 1, "--gae-lambda must lie in [0, 1]"),
        (not args.vf_coef >= 0, "--vf-coef must be non-negative"),
        (not args.ent_coef >= 0, "--ent-coef must be non-negative"),
        (not args.max_grad_norm > 0, "--max-grad-norm must be positive"),
        (not 0 <= args.rms_alpha < 1, "--rms-alpha must lie in [0, 1)"),
        (not args.rms_eps > 0, "--rms-eps must be positive"),
        (args.eval_freq < 0, "--eval-freq must be non-negative (0: evaluate only at the end)"),
        (args.eval_episodes < 1, "--eval-episodes must be at least 1"),
        (args.checkpoint_freq < 0, "--checkpoint-freq must be non-negative (0: only on SIGINT/SIGTERM)"),
        (args.log_interval < 1, "--log-interval must be at least 1"),
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


def check_env(env_id: str, render: bool = False) -> None:
    """Raise ConfigError unless env_id makes an env with a Discrete or bounded Box action space and either Atari frames
    or 1-D Box observations, and, with render=True, one that renders frames for --capture-video."""
    try:
        env = make_env(env_id)()
    except ImportError as e:
        raise ConfigError(f"{env_id} needs the Atari extra ({e}): pip install -r requirements/requirements-atari.txt"
                          ) from None
    except gym.error.DependencyNotInstalled as e:
        raise ConfigError(f"{env_id} needs an extra dependency ({e})") from None
    except gym.error.Error as e:
        raise ConfigError(f"unknown env id {env_id!r} ({e}); list ids with "
                          "`python -c 'import gymnasium; gymnasium.pprint_registry()'`") from None
    space, obs_space = env.action_space, env.observation_space
    env.close()
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1 or not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ConfigError(f"{env_id} has a {space} action space; this script needs a 1-D Box with finite bounds")
    elif not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"{env_id} has a {type(space).__name__} action space; this script needs Discrete or Box")
    if not (isinstance(obs_space, gym.spaces.Box) and (len(obs_space.shape) == 1 or is_atari(env_id))):
        raise ConfigError(f"{env_id} has {obs_space} observations; this script needs Atari frames or a 1-D Box: "
                          "flatten them in your env (gymnasium.wrappers.FlattenObservation) before registering it")
    if render:
        try:
            env = gym.make(env_id, render_mode="rgb_array")
            env.reset(seed=0)
            env.render()
            env.close()
        except Exception as e:  # a missing renderer (pygame) would otherwise fail at the first evaluation
            raise ConfigError(f"--capture-video: {env_id} cannot render ({type(e).__name__}: {e}); install its "
                              "renderer or drop --capture-video") from None


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


def as_tensor(obs: np.ndarray, device) -> torch.Tensor:
    """Atari frames stay uint8 (the network scales them); other observations become float32."""
    return torch.as_tensor(obs, dtype=torch.uint8 if obs.dtype == np.uint8 else torch.float32, device=device)


@torch.no_grad()
def evaluate(agent: Agent, env_id: str, episodes: int, seed: int, device="cpu", video_dir: str | None = None):
    """Returns of `episodes` real episodes (whole Atari games, unclipped) with the greedy action (argmax, or the mean
    clipped to the bounds); episode k is reset with seed + k. Draws nothing from torch's RNG."""
    env = make_env(env_id, video_dir)()
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        while True:
            action = agent.greedy_action(as_tensor(obs, device).unsqueeze(0))[0].cpu().numpy()
            if not agent.discrete:
                action = np.clip(action, env.action_space.low, env.action_space.high)
            obs, _, terminated, truncated, info = env.step(action)
            if "episode" in info:  # the real episode ended: RecordEpisodeStatistics sits below EpisodicLife
                returns.append(float(info["episode"]["r"]))
                break
            if terminated or truncated:  # a life lost under EpisodicLife: the game goes on
                obs, _ = env.reset()
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

    if checkpoint:
        run_name, run_dir = checkpoint["run_name"], os.path.dirname(os.path.abspath(args.resume))
    else:
        run_name = f"{args.env_id.replace('/', '-')}__{args.exp_name}__{args.seed}__{int(time.time())}"
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

    sub_envs, exact_resume = env_restore(checkpoint["envs"]) if checkpoint else (None, False)
    if sub_envs is not None:
        envs = vector_env([lambda env=env: env for env in sub_envs], args.vector_env)
    else:
        envs = vector_env([make_env(args.env_id) for _ in range(args.num_envs)], args.vector_env)
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space

    agent = Agent(envs, args.shared_network).to(device)
    flat_params = flatten_parameters(agent)
    if args.optimizer == "rmsprop":
        optimizer = torch.optim.RMSprop([flat_params], lr=args.learning_rate, alpha=args.rms_alpha, eps=args.rms_eps)
    else:
        optimizer = torch.optim.Adam([flat_params], lr=args.learning_rate, eps=args.rms_eps)
    low, high = (None, None) if agent.discrete else (action_space.low, action_space.high)

    # ROLLOUT STORAGE: (T, N) per quantity
    T, N = args.num_steps, args.num_envs
    obs_dtype = torch.uint8 if envs.single_observation_space.dtype == np.uint8 else torch.float32
    rollout_obs = torch.zeros((T, N, *obs_shape), dtype=obs_dtype, device=device)
    rollout_actions = torch.zeros((T, N) if agent.discrete else (T, N, *action_space.shape),
                                  dtype=torch.long if agent.discrete else torch.float32, device=device)
    rollout_rewards = np.zeros((T, N), dtype=np.float32)  # numpy until the rollout is complete: a row per step costs
    rollout_dones = np.zeros((T, N), dtype=np.float32)  # no torch op, the whole rollout then moves in one copy each
    rollout_values = torch.zeros((T, N), device=device)

    num_updates = args.total_timesteps // (T * N)
    loss_sums = torch.zeros(3, device=device)  # policy_loss, value_loss, entropy since the last log
    global_step = updates = 0
    last_return = None
    if checkpoint:
        agent.load_state_dict(checkpoint["agent"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        global_step, updates = checkpoint["counters"]
        last_return = checkpoint["last_return"]
        loss_sums = checkpoint["loss_sums"].to(device)
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

    def save_checkpoint():
        state = dict(agent=agent.state_dict(), optimizer=optimizer.state_dict(), args=asdict(args), run_name=run_name,
                     obs=obs, counters=(global_step, updates), last_return=last_return, loss_sums=loss_sums, envs=env_snapshot(envs),
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
    start_time = last_print = time.time()
    start_step = global_step
    eval_return = None

    def run_evaluation():
        video_dir = f"{run_dir}/videos/step_{global_step}" if args.capture_video else None  # one folder per evaluation
        mean_return = evaluate(agent, args.env_id, args.eval_episodes, args.seed + EVAL_SEED_OFFSET, device,
                               video_dir).mean()
        writer.add_scalar("eval/episodic_return", mean_return, global_step)
        return mean_return

    try:
        while updates < num_updates and not stop_signal:
            previous_step = global_step
            # COLLECT a rollout of T steps in each of the N envs, all stepped in lockstep (DEVIATION(1))
            for t in range(T):
                obs_t = as_tensor(obs, device)
                actions, rollout_values[t] = agent.act(obs_t)
                rollout_obs[t], rollout_actions[t] = obs_t, actions
                actions = actions.cpu().numpy()
                next_obs, rewards, terminations, truncations, infos = envs.step(
                    actions if agent.discrete else np.clip(actions, low, high))
                global_step += N

                if "final_info" in infos and "_episode" in infos["final_info"]:
                    episode = infos["final_info"]["episode"]
                    for i in np.flatnonzero(infos["final_info"]["_episode"]):
                        last_return = float(episode["r"][i])
                        writer.add_scalar("charts/episodic_return", last_return, global_step)
                        writer.add_scalar("charts/episodic_length", int(episode["l"][i]), global_step)

                # A truncation bootstraps: r += gamma * V(final obs), then the step ends the episode like a termination
                # (DEVIATION(2)). SAME_STEP autoreset: next_obs already starts the next episode, so nothing bootstraps
                # across a reset and no reset step enters the rollout.
                if truncations.any():
                    with torch.no_grad():
                        final_values = agent.value(as_tensor(final_observations(next_obs, infos), device)).cpu().numpy()
                    rewards = bootstrap_truncations(rewards, truncations, final_values, args.gamma)
                rollout_rewards[t] = rewards
                rollout_dones[t] = terminations | truncations
                obs = next_obs

            # ADVANTAGES, detached
            with torch.no_grad():
                last_values = agent.value(as_tensor(obs, device))
                rewards, dones = (torch.as_tensor(x, device=device) for x in (rollout_rewards, rollout_dones))
                if args.advantage == "nstep":
                    value_targets = nstep_returns(rewards, dones, last_values, args.gamma)
                    advantages = value_targets - rollout_values
                else:
                    advantages = gae_advantages(rewards, rollout_values, dones, last_values,
                                                args.gamma, args.gae_lambda)
                    value_targets = advantages + rollout_values
                    if args.norm_adv:  # DEVIATION(3)
                        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

            # UPDATE: one gradient step on the whole rollout
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - updates / num_updates)
            loss, metrics = compute_loss(agent, rollout_obs.flatten(0, 1), rollout_actions.flatten(0, 1),
                                         advantages.flatten(), value_targets.flatten(), args.vf_coef, args.ent_coef)
            flat_params.grad.zero_()
            loss.backward()
            nn.utils.clip_grad_norm_(flat_params, args.max_grad_norm)  # DEVIATION(4)
            optimizer.step()
            updates += 1

            # LOG the losses averaged over the last `log_interval` updates: summed on the device, read once per window
            loss_sums += torch.stack(tuple(metrics.values()))
            if updates % args.log_interval == 0 or updates == num_updates:
                window = (updates - 1) % args.log_interval + 1
                for key, value in zip(metrics, (loss_sums / window).tolist()):
                    writer.add_scalar(f"losses/{key}", value, global_step)
                loss_sums.zero_()
                writer.add_scalar("losses/explained_variance",
                                  explained_variance(rollout_values.flatten(), value_targets.flatten()), global_step)
                writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
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
                done = updates / num_updates
                line = (f"step {global_step:,}/{num_updates * T * N:,} ({100 * done:.1f}%)  SPS {sps:.0f}"
                        f"  last return {'-' if last_return is None else f'{last_return:.2f}'}")
                if tty:
                    bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
                    print(f"\r[{bar}] {line}", end="", flush=True)
                else:
                    print(line, flush=True)

        train_sps = (global_step - start_step) / (time.time() - start_time)
        if tty:
            print()
        if stop_signal:
            path = save_checkpoint()
            print(f"stopped by signal {stop_signal[0]} at step {global_step:,}; checkpoint written to {path}; "
                  f"continue with --resume {path}")
        else:
            if eval_return is None or not crossed(global_step - T * N, global_step, args.eval_freq):
                eval_return = run_evaluation()
            print(f"step {global_step:,}: final eval/episodic_return {eval_return:.2f}")
            if args.save_model:
                torch.save({"agent": agent.state_dict(), "args": asdict(args)}, f"{run_dir}/model.pt")
                print(f"model saved to {run_dir}/model.pt")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        envs.close()
        writer.close()
        if args.track:
            wandb.finish()

    print(f"training SPS: {train_sps:.1f}")
    return {"run_dir": run_dir, "global_step": global_step, "updates": updates, "eval_return": eval_return,
            "train_sps": train_sps, "stopped_by": stop_signal[0] if stop_signal else None}


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
