"""ACER: actor-critic with experience replay, for Discrete actions, from flat observations (MLP) or Atari frames
(NatureCNN): Retrace Q targets, truncated importance sampling with bias correction, and a trust region around an
exponential moving average of the network.

Paper:
    Wang et al. 2016, "Sample Efficient Actor-Critic with Experience Replay", arXiv:1611.01224 (Algorithms 1-2, Sec. 3)

Example:
    python acer.py --env-id CartPole-v1 --seed 1

The update, for a segment of T steps in each of N envs (on-policy, or replayed with its behaviour policy mu):
    V(s) = sum_a pi(a|s) Q(s, a)                                          Q and V from one network with two heads
    Q_ret(s_t, a_t) = r_t + gamma * [rho_bar_{t+1} (Q_ret(s_{t+1}, a_{t+1}) - Q(s_{t+1}, a_{t+1})) + V(s_{t+1})],
        rho_bar = min(1, pi(a|s) / mu(a|s))                                                         [eq. 5, lambda = 1]
    g = min(c, rho_t) grad log pi(a_t|s_t) (Q_ret - V(s_t))
        + E_{a~pi}[ relu(1 - c / rho_t(a)) grad log pi(a|s_t) (Q(s_t, a) - V(s_t)) ]                         [eq. 9]
    trust region on the logits z: g' = g - max(0, (k.g - delta) / ||k||^2) k, k = grad_z KL(pi_avg || pi)   [eq. 12]
    Q head: (Q_ret - Q(s_t, a_t)) grad Q(s_t, a_t);  theta_avg <- alpha theta_avg + (1 - alpha) theta

Deviations from the paper (each marked `# DEVIATION(n)` in the code):
    1. Synchronous: `num_envs` envs step in lockstep and one learner updates on all their segments (OpenAI baselines'
       ACER), instead of the paper's asynchronous actor-learner threads, each with its own replay memory.
    2. A truncated episode bootstraps: the reward of its last step gets gamma * V(final observation) added, V from the
       network at update time, and the step counts as an episode end. The paper's envs had no time limits.
    3. The Q loss is q_coef * (Q_ret - Q(s_t, a_t))^2 as issue #6 specifies; the paper gives only the gradient
       (Q_ret - Q) grad Q, and baselines halves the square, so q_coef 0.5 here weighs the Q head twice as much as there.
    4. Importance weights divide by max(mu, 1e-8), so that an action whose behaviour probability underflowed to zero
       gives a large weight instead of a division by zero.
    5. The global gradient norm is clipped to `max_grad_norm` (10, baselines).
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
    """write the trained network (and the average network) to runs/<run_name>/model.pt at the end"""
    eval_freq: int = 50_000
    """evaluate the policy without exploration noise every this many env steps, and at the end; 0: only at the end"""
    eval_episodes: int = 10
    """episodes per evaluation"""
    checkpoint_freq: int = 0
    """write runs/<run_name>/checkpoint.pt, with the replay buffer, every this many env steps (0: only on SIGINT/SIGTERM)"""
    resume: str | None = None
    """continue the run saved in this checkpoint.pt; the run's saved configuration is used and other flags ignored"""

    # --- algorithm ---
    env_id: str = "CartPole-v1"
    """any gymnasium env with a Discrete action space and 1-D observations, or an Atari id"""
    total_timesteps: int = 500_000
    """environment steps in total, summed over all `num_envs` environments"""
    num_envs: int = 8
    """number of environments stepped in parallel (SB2 zoo's CartPole; baselines uses 16 for Atari)"""
    vector_env: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async: for slow envs; resume is then inexact)"""
    num_steps: int = 20
    """T_max: env steps per env in each on-policy segment, and the length of a replayed segment (paper, baselines)"""
    replay_ratio: int = 4
    """off-policy updates on replayed segments after each on-policy update (paper, baselines)"""
    replay_ratio_poisson: bool = False
    """draw the number of replay updates from Poisson(replay_ratio) instead (baselines)"""
    replay_start: int = 10_000
    """transitions stored before replay starts (baselines)"""
    buffer_size: int = 50_000
    """replay buffer capacity in transitions, kept as whole segments of num_envs x num_steps (baselines)"""
    gamma: float = 0.99
    """gamma: discount factor (paper)"""
    truncation_c: float = 10.0
    """c: importance weights in the policy gradient are truncated at c, the rest goes to the bias correction (paper)"""
    q_coef: float = 0.5
    """coefficient of the Q-head loss (baselines)"""
    ent_coef: float = 0.01
    """beta: coefficient of the entropy bonus (baselines)"""
    avg_decay: float = 0.99
    """alpha: decay of the exponential moving average of the parameters, the average policy (paper)"""
    trust_region: bool = True
    """project the policy gradient onto the trust region around the average policy (paper, Sec. 3.3)"""
    max_kl: float = 1.0
    """delta: the trust region's bound on the linearised KL(pi_avg || pi) (paper, baselines)"""
    max_grad_norm: float = 10.0
    """clip the global gradient norm to this value (baselines)"""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """RMSprop, as the paper's Atari runs and baselines (their hyperparameters were tuned with it), or Adam"""
    learning_rate: float = 7e-4
    """learning rate (baselines)"""
    rms_alpha: float = 0.99
    """RMSprop's smoothing constant (baselines)"""
    rms_eps: float = 1e-5
    """epsilon of RMSprop and of Adam (baselines)"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over the run (baselines' default schedule)"""
    log_interval: int = 10
    """log the losses, averaged over this many on-policy iterations (with their replay updates), every this many"""


HIDDEN = 64  # units per hidden layer of the MLP (SB2 zoo's ACER MlpPolicy)
CNN_FEATURES = 512  # NatureCNN's last hidden layer (Mnih et al. 2015)
FRAME_STACK, FRAME_SIZE, NOOP_MAX, FRAME_SKIP = 4, 84, 30, 4  # Atari preprocessing (Mnih et al. 2015; seed 000)
MU_FLOOR = 1e-8  # DEVIATION(4): importance weights divide by max(mu, MU_FLOOR)
EVAL_SEED_OFFSET = 1_000_000  # evaluation episode k is reset with seed + EVAL_SEED_OFFSET + k
PROGRESS_SECONDS = 0.5, 30.0  # progress refresh interval on a terminal, and between plain lines otherwise


class ConfigError(Exception):
    """A bad flag, env or checkpoint: the CLI prints the message on one line and exits with code 2."""


# ---------------------------------------------------------------------------------------------------------------------
# PURE MATH
# ---------------------------------------------------------------------------------------------------------------------
def retrace_targets(rewards, dones, q_taken, values, rho_bar, last_values, gamma: float):
    """Retrace targets Q_ret(s_t, a_t), computed backwards through the segment.   [arXiv:1611.01224 eq. 5, Alg. 2]

    Shapes: rewards, dones, q_taken = Q(s_t, a_t), values = V(s_t), rho_bar = min(1, pi(a_t|s_t) / mu(a_t|s_t)) (T, N);
    last_values (N,), V(s_T). dones[t] = 1: the episode ended at step t (a truncation's bootstrap is in its reward).
        Q_ret <- V(s_T)
        for t = T-1 .. 0:   Q_ret <- r_t + gamma * (1 - d_t) * Q_ret;   q_ret[t] = Q_ret
                            Q_ret <- rho_bar_t * (Q_ret - Q(s_t, a_t)) + V(s_t)
    An episode end multiplies the carried Q_ret by 0, so the next episode's values never leak into this one.
    """
    q_ret = torch.empty_like(rewards)
    future = last_values
    for t in reversed(range(len(rewards))):
        future = q_ret[t] = rewards[t] + gamma * (1.0 - dones[t]) * future
        future = rho_bar[t] * (future - q_taken[t]) + values[t]
    return q_ret


def trust_region_project(g, k, delta: float):
    """g' = g - max(0, (k.g - delta) / ||k||^2) k, row by row: the gradient g of the objective with respect to the
    policy statistics, projected so that the linearised KL change k.g' stays within delta.   [arXiv:1611.01224 eq. 12]

    Shapes: g, k (B, A). Rows with k.g <= delta come back unchanged; the others satisfy k.g' = delta. A zero row of k
    (pi = pi_avg) leaves g unchanged.
    """
    excess = ((k * g).sum(-1, keepdim=True) - delta).clamp(min=0.0)
    return g - excess / (k * k).sum(-1, keepdim=True).clamp(min=1e-12) * k


def bootstrap_truncations(rewards, truncations, final_values, gamma: float):
    """r + gamma * V(final obs) at truncated steps, r elsewhere (DEVIATION(2)); the step then counts as an episode end.

    Any shapes that broadcast; final_values may hold anything where not truncated. A termination gets nothing.
    """
    return rewards + gamma * truncations * final_values


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
    """Orthogonal weights with this gain and zero biases (baselines and SB3)."""
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
    """One trunk with a policy head (logits of pi(.|s)) and a Q head (Q(s, a) for every action) [paper, Sec. 3].

    V(s) = sum_a pi(a|s) Q(s, a) is computed from the two heads, not learned by a head of its own.
    """

    def __init__(self, envs):
        super().__init__()
        obs_shape, num_actions = envs.single_observation_space.shape, int(envs.single_action_space.n)
        self.trunk = trunk(obs_shape)
        features = self.trunk[-2].out_features
        self.policy_head = layer_init(nn.Linear(features, num_actions), gain=0.01)
        self.q_head = layer_init(nn.Linear(features, num_actions), gain=1.0)

    def forward(self, obs):
        """(logits (B, A), Q(s, .) (B, A))."""
        features = self.trunk(obs)
        return self.policy_head(features), self.q_head(features)

    def logits(self, obs):
        return self.policy_head(self.trunk(obs))

    @torch.no_grad()
    def act(self, obs):
        """(a ~ pi(.|s) (B,), mu(.|s) = pi(.|s) (B, A)): the action and the behaviour policy that the buffer stores.

        Categorical by the Gumbel-max trick: argmax_a (logits_a + g_a), g_a = -log(-log u_a), u_a ~ U[0, 1).
        """
        logits = self.logits(obs)
        actions = (logits - torch.rand_like(logits).log_().neg_().log_()).argmax(-1)
        return actions, logits.softmax(-1)

    @torch.no_grad()
    def greedy_action(self, obs):
        """argmax_a pi(a|s)."""
        return self.logits(obs).argmax(-1)


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
# REPLAY OF WHOLE SEGMENTS
# ---------------------------------------------------------------------------------------------------------------------
class SegmentBuffer:
    """The last `buffer_size` transitions, kept as whole segments of T steps in each of N envs, as ACER replays them.

    A segment holds s_0..s_T (T + 1 rows: s_T bootstraps the last step), a_t, r_t, d_t (episode ended at step t:
    terminated or truncated), the truncation flags, and the behaviour policy mu(.|s_t). The final observation of an
    episode truncated at step t of env n is kept aside under (slot, t, n): truncations are rare, and V of it is taken
    with the network of the update that replays it (DEVIATION(2)).
    """

    def __init__(self, buffer_size: int, T: int, N: int, obs_space, num_actions: int, device):
        self.slots, self.T, self.N = buffer_size // (T * N), T, N
        obs_dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        self.obs = torch.zeros((self.slots, T + 1, N, *obs_space.shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros((self.slots, T, N), dtype=torch.long, device=device)
        self.rewards = torch.zeros((self.slots, T, N), device=device)
        self.dones = torch.zeros((self.slots, T, N), device=device)
        self.truncations = torch.zeros((self.slots, T, N), device=device)
        self.mu = torch.zeros((self.slots, T, N, num_actions), device=device)
        self.final_obs = {}  # (slot, t, n) -> final observation of an episode truncated there
        self.pos = self.size = 0

    @property
    def transitions(self) -> int:
        return self.size * self.T * self.N

    def add(self, segment: dict) -> None:
        """Store a segment (the tensors above and final_obs {(t, n): obs}), overwriting the oldest when full."""
        slot = self.pos
        for name in ("obs", "actions", "rewards", "dones", "truncations", "mu"):
            getattr(self, name)[slot] = segment[name]
        self.final_obs = {key: value for key, value in self.final_obs.items() if key[0] != slot}
        self.final_obs.update({(slot, *key): value for key, value in segment["final_obs"].items()})
        self.pos, self.size = (self.pos + 1) % self.slots, min(self.size + 1, self.slots)

    def sample(self) -> dict:
        """A uniformly drawn stored segment (torch's RNG), in `add`'s format."""
        slot = int(torch.randint(self.size, ()))
        segment = {name: getattr(self, name)[slot] for name in ("obs", "actions", "rewards", "dones", "truncations",
                                                                  "mu")}
        segment["final_obs"] = {key[1:]: value for key, value in self.final_obs.items() if key[0] == slot}
        return segment

    def state_dict(self) -> dict:
        return {name: getattr(self, name)[: self.size] for name in ("obs", "actions", "rewards", "dones",
                                                                   "truncations", "mu")} | {
            "final_obs": self.final_obs, "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        for name in ("obs", "actions", "rewards", "dones", "truncations", "mu"):
            getattr(self, name)[: state["size"]] = state[name]
        self.final_obs = {key: value.to(self.obs.device) for key, value in state["final_obs"].items()}
        self.pos, self.size = state["pos"], state["size"]


# ---------------------------------------------------------------------------------------------------------------------
# LOSS
# ---------------------------------------------------------------------------------------------------------------------
def acer_loss(agent: Agent, avg_agent: Agent, segment: dict, args: Args):
    """The ACER loss of one segment (on-policy, or replayed with its stored mu); returns (loss, metrics).

    Its gradient is the paper's: the policy part is -(z * g').sum(-1).mean() on the logits z, g' the trust-region
    projection of g = d(objective)/dz per sample, so that backward carries g' into the network [eq. 12]; the Q head gets
    q_coef * (Q_ret - Q(s_t, a_t))^2 (DEVIATION(3)).
    """
    T, N = segment["actions"].shape
    logits, q = agent(segment["obs"].flatten(0, 1))
    logits, q = logits.view(T + 1, N, -1), q.view(T + 1, N, -1)
    actions = segment["actions"].unsqueeze(-1)
    q_taken = q[:T].gather(-1, actions).squeeze(-1)  # Q(s_t, a_t), with the Q head's gradient
    with torch.no_grad():
        pi = logits.softmax(-1)
        values = (pi * q).sum(-1)  # V(s) = sum_a pi(a|s) Q(s, a), (T + 1, N)
        rewards = segment["rewards"]
        if segment["final_obs"]:  # DEVIATION(2): V(final obs) with the current network
            keys = list(segment["final_obs"])
            final_logits, final_q = agent(torch.stack([segment["final_obs"][key] for key in keys]))
            final_values = torch.zeros_like(rewards)
            final_values[tuple(zip(*keys))] = (final_logits.softmax(-1) * final_q).sum(-1)
            rewards = bootstrap_truncations(rewards, segment["truncations"], final_values, args.gamma)
        rho_all = pi[:T] / segment["mu"].clamp(min=MU_FLOOR)  # rho(a) = pi(a|s) / mu(a|s) for every a, DEVIATION(4)
        rho = rho_all.gather(-1, actions).squeeze(-1)
        q_ret = retrace_targets(rewards, segment["dones"], q_taken.detach(), values[:T], rho.clamp(max=1.0), values[T],
                                args.gamma)
        pi_avg = avg_agent.logits(segment["obs"][:T].flatten(0, 1)).view(T, N, -1).softmax(-1)

    # Policy objective per sample, as a function of the logits z (leaf copy: g = d objective / dz)        [eq. 9]
    z = logits[:T].detach().requires_grad_()
    log_pi = z.log_softmax(-1)
    advantage = q_ret - values[:T]
    truncated_term = rho.clamp(max=args.truncation_c) * log_pi.gather(-1, actions).squeeze(-1) * advantage
    bias_weights = (1.0 - args.truncation_c / rho_all).clamp(min=0.0) * pi[:T]  # relu(1 - c / rho(a)) pi(a|s)
    bias_correction = (bias_weights * log_pi * (q[:T].detach() - values[:T].unsqueeze(-1))).sum(-1)
    entropy = -(log_pi.exp() * log_pi).sum(-1)
    objective = truncated_term + bias_correction + args.ent_coef * entropy
    with torch.enable_grad():
        g = torch.autograd.grad(objective.sum(), z)[0]
    # k = d KL(pi_avg || pi) / dz = pi - pi_avg for softmax logits z                                        [eq. 12]
    k = pi[:T] - pi_avg
    if args.trust_region:
        g = trust_region_project(g.flatten(0, 1), k.flatten(0, 1), args.max_kl).view_as(g)
    policy_surrogate = -(logits[:T] * g).sum(-1).mean()

    q_loss = (q_ret - q_taken).pow(2).mean()  # DEVIATION(3)
    loss = policy_surrogate + args.q_coef * q_loss
    with torch.no_grad():
        avg_kl = (pi_avg * (pi_avg.clamp(min=1e-12).log() - pi[:T].clamp(min=1e-12).log())).sum(-1).mean()
        metrics = torch.stack((-(truncated_term + bias_correction).mean(), q_loss, entropy.mean(), avg_kl, rho.mean()))
    return loss, metrics


@torch.no_grad()
def update_average(avg_agent: nn.Module, agent: nn.Module, decay: float) -> None:
    """theta_avg <- alpha * theta_avg + (1 - alpha) * theta, in place, for every parameter  [arXiv:1611.01224 Sec. 3.3]"""
    for average, param in zip(avg_agent.parameters(), agent.parameters()):
        average.lerp_(param, 1.0 - decay)


METRICS = ("policy_loss", "q_loss", "entropy", "avg_policy_kl", "rho_mean")  # acer_loss's metrics, in order


# ---------------------------------------------------------------------------------------------------------------------
# CHECKS, EVALUATION, PROGRESS
# ---------------------------------------------------------------------------------------------------------------------
def check_args(args: Args) -> None:
    """Raise ConfigError for out-of-range or contradictory flags, before anything is written."""
    segment = args.num_envs * args.num_steps
    problems = [
        (args.num_envs < 1, "--num-envs must be at least 1"),
        (args.num_steps < 1, "--num-steps must be at least 1"),
        (args.total_timesteps < segment,
         f"--total-timesteps {args.total_timesteps} is less than one segment (--num-envs x --num-steps = {segment}): "
         "raise it or shorten the segment"),
        (args.buffer_size < segment,
         f"--buffer-size {args.buffer_size} holds no whole segment of --num-envs x --num-steps = {segment} "
         "transitions: raise it"),
        (args.replay_ratio < 0, "--replay-ratio must be non-negative (0: on-policy updates only)"),
        (args.replay_start < 0, "--replay-start must be non-negative"),
        (args.replay_ratio > 0 and args.replay_start > args.buffer_size,
         f"--replay-start {args.replay_start} exceeds --buffer-size {args.buffer_size}, so replay would never start: "
         "lower --replay-start or raise --buffer-size"),
        (not args.learning_rate > 0, "--learning-rate must be positive"),
        (not 0 < args.gamma <= 1, "--gamma must lie in (0, 1]"),
        (not args.truncation_c > 0, "--truncation-c must be positive"),
        (not args.q_coef >= 0, "--q-coef must be non-negative"),
        (not args.ent_coef >= 0, "--ent-coef must be non-negative"),
        (not 0 <= args.avg_decay < 1, "--avg-decay must lie in [0, 1)"),
        (not args.max_kl > 0, "--max-kl must be positive"),
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
    """Raise ConfigError unless env_id makes an env with a Discrete action space and either Atari frames or 1-D Box
    observations, and, with render=True, one that renders frames for --capture-video."""
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
    if not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"{env_id} has a {type(space).__name__} action space; ACER needs Discrete actions: use "
                          "sac_continuous_action.py or a2c.py for Box actions")
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
    """Returns of `episodes` real episodes (whole Atari games, unclipped) with the greedy action argmax_a pi(a|s);
    episode k is reset with seed + k. Draws nothing from torch's RNG."""
    env = make_env(env_id, video_dir)()
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        while True:
            action = agent.greedy_action(as_tensor(obs, device).unsqueeze(0))[0].cpu().numpy()
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
    obs_space = envs.single_observation_space

    agent = Agent(envs).to(device)
    avg_agent = Agent(envs).to(device).requires_grad_(False)  # theta_avg, the average policy's network
    avg_agent.load_state_dict(agent.state_dict())
    flat_params = flatten_parameters(agent)
    if args.optimizer == "rmsprop":
        optimizer = torch.optim.RMSprop([flat_params], lr=args.learning_rate, alpha=args.rms_alpha, eps=args.rms_eps)
    else:
        optimizer = torch.optim.Adam([flat_params], lr=args.learning_rate, eps=args.rms_eps)

    T, N = args.num_steps, args.num_envs
    num_actions = int(envs.single_action_space.n)
    buffer = SegmentBuffer(args.buffer_size, T, N, obs_space, num_actions, device)
    segment_obs = torch.zeros((T + 1, N, *obs_space.shape), dtype=buffer.obs.dtype, device=device)
    segment_actions = torch.zeros((T, N), dtype=torch.long, device=device)
    segment_mu = torch.zeros((T, N, num_actions), device=device)
    segment_rewards, segment_dones, segment_truncations = (np.zeros((T, N), dtype=np.float32) for _ in range(3))

    num_iterations = args.total_timesteps // (T * N)
    global_step = iterations = replay_updates = 0
    metric_sums = torch.zeros(len(METRICS) + 1, device=device)  # METRICS and the number of updates since the last log
    last_return = None
    if checkpoint:
        agent.load_state_dict(checkpoint["agent"])
        avg_agent.load_state_dict(checkpoint["avg_agent"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        buffer.load_state_dict(checkpoint["buffer"])
        global_step, iterations, replay_updates = checkpoint["counters"]
        last_return, metric_sums = checkpoint["last_return"], checkpoint["metric_sums"].to(device)
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
        state = dict(agent=agent.state_dict(), avg_agent=avg_agent.state_dict(), optimizer=optimizer.state_dict(),
                     buffer=buffer.state_dict(), args=asdict(args), run_name=run_name, obs=obs,
                     counters=(global_step, iterations, replay_updates), last_return=last_return,
                     metric_sums=metric_sums, envs=env_snapshot(envs),
                     rng={"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate(),
                          "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else []})
        path = f"{run_dir}/checkpoint.pt"
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # atomic: a reader sees the old checkpoint or the new one, never half of one
        return path

    def update(segment: dict) -> None:
        """One optimizer step on acer_loss, then theta_avg <- alpha theta_avg + (1 - alpha) theta   [paper, Alg. 2]."""
        loss, metrics = acer_loss(agent, avg_agent, segment, args)
        flat_params.grad.zero_()
        loss.backward()
        nn.utils.clip_grad_norm_(flat_params, args.max_grad_norm)  # DEVIATION(5)
        optimizer.step()
        update_average(avg_agent, agent, args.avg_decay)
        metric_sums[:-1] += metrics
        metric_sums[-1] += 1

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
        while iterations < num_iterations and not stop_signal:
            previous_step = global_step
            # COLLECT a segment of T steps in each of the N envs, all stepped in lockstep (DEVIATION(1)), with mu
            final_obs = {}
            for t in range(T):
                obs_t = as_tensor(obs, device)
                actions, mu = agent.act(obs_t)
                segment_obs[t], segment_actions[t], segment_mu[t] = obs_t, actions, mu
                next_obs, rewards, terminations, truncations, infos = envs.step(actions.cpu().numpy())
                global_step += N

                if "final_info" in infos and "_episode" in infos["final_info"]:
                    episode = infos["final_info"]["episode"]
                    for i in np.flatnonzero(infos["final_info"]["_episode"]):
                        last_return = float(episode["r"][i])
                        writer.add_scalar("charts/episodic_return", last_return, global_step)
                        writer.add_scalar("charts/episodic_length", int(episode["l"][i]), global_step)
                # SAME_STEP autoreset: next_obs already starts the next episode, so no reset step enters a segment;
                # a truncated episode's final observation is kept to bootstrap from (DEVIATION(2))
                for n in np.flatnonzero(truncations):
                    final_obs[(t, int(n))] = as_tensor(np.asarray(infos["final_obs"][n]), device)
                segment_rewards[t], segment_dones[t], segment_truncations[t] = (rewards, terminations | truncations,
                                                                                truncations)
                obs = next_obs
            segment_obs[T] = as_tensor(obs, device)
            segment = dict(obs=segment_obs, actions=segment_actions, mu=segment_mu, final_obs=final_obs,
                           **{name: torch.as_tensor(array, device=device) for name, array in
                              (("rewards", segment_rewards), ("dones", segment_dones),
                               ("truncations", segment_truncations))})
            buffer.add(segment)

            # UPDATE: on-policy on this segment, then `replay_ratio` updates on replayed segments   [paper, Alg. 1]
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - iterations / num_iterations)
            update(segment)
            iterations += 1
            if args.replay_ratio > 0 and buffer.transitions >= args.replay_start:
                n_replay = (int(torch.poisson(torch.tensor(float(args.replay_ratio)))) if args.replay_ratio_poisson
                            else args.replay_ratio)
                for _ in range(n_replay):
                    update(buffer.sample())
                replay_updates += n_replay

            # LOG the metrics averaged over every update (on-policy and replayed) of the last `log_interval` iterations
            if iterations % args.log_interval == 0 or iterations == num_iterations:
                sums = metric_sums.tolist()
                for key, value in zip(METRICS, sums[:-1]):
                    writer.add_scalar(f"losses/{key}", value / sums[-1], global_step)
                metric_sums.zero_()
                writer.add_scalar("charts/replay_transitions", buffer.transitions, global_step)
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
                done = iterations / num_iterations
                line = (f"step {global_step:,}/{num_iterations * T * N:,} ({100 * done:.1f}%)  SPS {sps:.0f}"
                        f"  replay updates {replay_updates:,}"
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
                torch.save({"agent": agent.state_dict(), "avg_agent": avg_agent.state_dict(), "args": asdict(args)},
                           f"{run_dir}/model.pt")
                print(f"model saved to {run_dir}/model.pt")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        envs.close()
        writer.close()
        if args.track:
            wandb.finish()

    print(f"training SPS: {train_sps:.1f}")
    return {"run_dir": run_dir, "global_step": global_step, "iterations": iterations, "replay_updates": replay_updates,
            "eval_return": eval_return, "train_sps": train_sps, "stopped_by": stop_signal[0] if stop_signal else None}


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
