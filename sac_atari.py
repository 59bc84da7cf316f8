"""Soft Actor-Critic for discrete actions (SAC-discrete): Atari from pixels, and flat-observation Discrete envs.

Papers:
    Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings", arXiv:1910.07207
    Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (automatic alpha), arXiv:1812.05905
    Mnih et al. 2015, "Human-level control through deep reinforcement learning" (NatureCNN, Atari preprocessing)

Example:
    python sac_atari.py --env-id BreakoutNoFrameskip-v4 --seed 1

Deviations from the papers (each marked `# DEVIATION(n)` in the code):
    1. The actor loss and the temperature loss sum over actions and average over the batch, the expectations of
       arXiv:1910.07207 eq. 10 and 11. CleanRL averages over actions too, which divides both by |A|; Adam is invariant
       to that factor apart from its epsilon.
    2. The target entropy is 0.89 * log|A| (CleanRL, more stable past 100k steps); the paper uses 0.98 * log|A|.
    3. Updates run every `update_frequency` env steps and the target critics are copied every
       `target_network_frequency` env steps (CleanRL's schedule); the paper updates every step with Polyak averaging.
    4. The critic loss is the plain mean squared error summed over the two critics, without the 1/2 (as CleanRL).
    5. Training starts with `learning_starts` env steps of uniformly random actions (as CleanRL).
    6. The replay buffer stores each frame once and rebuilds the frame stacks when it samples; the sampled stacks are
       byte-identical. CleanRL's SB3 buffer stores both 4-frame stacks of every transition: 8 frames where we store 1.
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
    compile: bool = False
    """apply `torch.compile` to the update function (about 2 percent faster on a 2-core CPU after 5-30 s compiling)"""
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
    eval_freq: int = 100_000
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
    env_id: str = "BreakoutNoFrameskip-v4"
    """an Atari id (`*NoFrameskip-v4` or `ALE/*-v5`), or any env with a Discrete action space and 1-D observations"""
    total_timesteps: int = 5_000_000
    """environment steps in total, summed over all `num_envs` environments (CleanRL)"""
    num_envs: int = 1
    """number of environments stepped in parallel (SyncVectorEnv)"""
    buffer_size: int = 1_000_000
    """replay buffer capacity in transitions (CleanRL)"""
    checkpoint_buffer: bool = True
    """store the replay buffer in checkpoints (up to 7 GB at 1M Atari frames); without it a resumed run refills the
    buffer with `learning_starts` steps of its policy before updates continue"""
    gamma: float = 0.99
    """gamma: discount factor (arXiv:1910.07207, Table 1)"""
    tau: float = 1.0
    """tau: target network update coefficient; 1.0 copies the critics (CleanRL)"""
    batch_size: int = 64
    """minibatch size (arXiv:1910.07207, Table 1)"""
    learning_starts: int = 20_000
    """env steps of uniformly random actions before updates start (arXiv:1910.07207, Table 1; CleanRL)"""
    policy_lr: float = 3e-4
    """learning rate of the actor's Adam (arXiv:1910.07207, Table 1)"""
    q_lr: float = 3e-4
    """learning rate of the critics' and of log alpha's Adam (arXiv:1910.07207, Table 1)"""
    adam_eps: float = 1e-4
    """epsilon of all three Adam optimizers (CleanRL: more stable than 1e-8 on Atari)"""
    update_frequency: int = 4
    """one critic, actor and alpha update every this many env steps (arXiv:1910.07207, Table 1; CleanRL)"""
    target_network_frequency: int = 8_000
    """update the target critics every this many env steps (arXiv:1910.07207, Table 1; CleanRL)"""
    alpha: float = 0.2
    """alpha: entropy temperature when it is fixed (--no-autotune)"""
    autotune: bool = True
    """tune alpha automatically to reach the target entropy (arXiv:1910.07207, eq. 11)"""
    target_entropy_scale: float = 0.89
    """the target entropy is this times log|A|, the uniform policy's entropy (CleanRL; the paper: 0.98)"""


HIDDEN = 256  # units per hidden layer of the MLP encoder for flat observations
CNN_FEATURES = 512  # NatureCNN's last hidden layer (Mnih et al. 2015)
FRAME_STACK, FRAME_SIZE, NOOP_MAX, FRAME_SKIP = 4, 84, 30, 4  # Atari preprocessing (Mnih et al. 2015; seed 000)
EVAL_SEED_OFFSET = 1_000_000  # evaluation episode k is reset with seed + EVAL_SEED_OFFSET + k
PROGRESS_SECONDS = 0.5, 30.0  # progress refresh interval on a terminal, and between plain lines otherwise


class ConfigError(Exception):
    """A bad flag, env or checkpoint: the CLI prints the message on one line and exits with code 2."""


# ---------------------------------------------------------------------------------------------------------------------
# PURE MATH
# ---------------------------------------------------------------------------------------------------------------------
def discrete_soft_q_target(rewards, terminations, next_probs, next_log_probs, next_q_min, alpha, gamma: float):
    """Soft Bellman target with the expectation over a' taken exactly under the policy.

    Shapes: rewards, terminations (B,); next_probs, next_log_probs, next_q_min (B, |A|), next_q_min = min_i Q'_i(s', .).
    y = r + gamma * (1 - terminated) * sum_a' pi(a'|s') * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))   [arXiv:1910.07207 eq. 9, 10]
    A truncation is stored with terminated = 0, so the target bootstraps from the true final observation s'.
    """
    next_v = (next_probs * (next_q_min - alpha * next_log_probs)).sum(dim=1)
    return rewards + gamma * (1.0 - terminations) * next_v


def discrete_actor_loss(probs, log_probs, q_min, alpha):
    """J_pi = E_s[sum_a pi(a|s) * (alpha * log pi(a|s) - min_i Q_i(s, a))]   [arXiv:1910.07207 eq. 12; DEVIATION(1)].

    Shapes: probs, log_probs, q_min (B, |A|). Returns a scalar.
    """
    return (probs * (alpha * log_probs - q_min)).sum(dim=1).mean()


def discrete_alpha_loss(log_alpha, probs, log_probs, target_entropy: float):
    """J(alpha) = E_s[sum_a pi(a|s) * (-alpha * (log pi(a|s) + H-bar))]   [arXiv:1910.07207 eq. 11; DEVIATION(1)].

    probs and log_probs (B, |A|) enter detached: only log_alpha receives a gradient.
    """
    return (probs * (-log_alpha.exp() * (log_probs + target_entropy))).sum(dim=1).mean()


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
def layer_init(layer: nn.Module) -> nn.Module:
    """He (Kaiming normal) weights and zero biases (CleanRL's sac_atari.py; He et al. 2015)."""
    nn.init.kaiming_normal_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def encoder(obs_shape) -> nn.Sequential:
    """NatureCNN for (stack, 84, 84) frames scaled by `network_input`; a 256-256 MLP for 1-D obs."""
    if len(obs_shape) == 3:
        return nn.Sequential(
            layer_init(nn.Conv2d(obs_shape[0], 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, CNN_FEATURES)), nn.ReLU(),
        )
    return nn.Sequential(layer_init(nn.Linear(obs_shape[0], HIDDEN)), nn.ReLU(),
                         layer_init(nn.Linear(HIDDEN, HIDDEN)), nn.ReLU())


def network_input(obs: torch.Tensor) -> torch.Tensor:
    """What the networks compute on: uint8 frames (B, stack, 84, 84) scaled to [0, 1] as float32 in channels-last
    layout, in one pass (the CPU's convolutions run faster on it; README, Performance); anything else as float32, so
    its own output passes through unchanged. Frames are scaled here and nowhere else.
    """
    if obs.dtype != torch.uint8:
        return obs.float()
    out = torch.empty(obs.shape, device=obs.device, memory_format=torch.channels_last)
    return torch.mul(obs, 1.0 / 255.0, out=out)


class PerAction(nn.Module):
    """An encoder and a linear layer with one output per action: (B, *obs_shape) -> (B, |A|).

    Takes raw observations (CleanRL's interface) or `network_input`'s output: the update scales each batch once and
    hands it to several networks. Convolution weights are kept channels-last, the layout `network_input` makes.
    """

    def __init__(self, envs):
        super().__init__()
        self.encoder = encoder(envs.single_observation_space.shape)
        self.head = layer_init(nn.Linear(self.encoder[-2].out_features, int(envs.single_action_space.n)))
        self.to(memory_format=torch.channels_last)

    def forward(self, obs):
        return self.head(self.encoder(network_input(obs)))


class SoftQNetwork(PerAction):
    """Q(s, .): one soft Q value per action, (B, |A|)."""


class Actor(PerAction):
    """Categorical policy with CleanRL's interface: Actor(envs), forward(obs) -> logits (B, |A|), get_action."""

    def get_action(self, obs):
        """Returns (action (B,), log pi(.|s) (B, |A|), pi(.|s) (B, |A|)); log_softmax, never log(softmax)."""
        logits = self(obs)
        log_probs = F.log_softmax(logits, dim=1)
        action = torch.distributions.Categorical(logits=logits).sample()
        return action, log_probs, log_probs.exp()


# ---------------------------------------------------------------------------------------------------------------------
# REPLAY BUFFER
# ---------------------------------------------------------------------------------------------------------------------
class ReplayBuffer:
    """Circular storage that keeps every frame once and rebuilds frame stacks when it samples (DEVIATION(6)).

    Each sub-env writes its own stream of slots. A slot holds one frame, the newest of an observation; a slot whose
    observation started a transition also holds its action, reward and termination, and its successor slot holds
    s'. An episode end writes two slots: the final observation (no transition leaves it) and the reset observation,
    which starts an episode. The stack of slot k is slots k-stack+1..k, where slots before the episode's start are
    replaced by its first slot: the padding of gymnasium's FrameStackObservation. Flat observations use stack=1.
    Storage stays on the CPU; `sample` moves the minibatch to `device`.
    """

    def __init__(self, capacity: int, num_envs: int, obs_space: gym.spaces.Box, device):
        self.stack = obs_space.shape[0] if len(obs_space.shape) == 3 else 1
        frame_shape = obs_space.shape[1:] if self.stack > 1 else obs_space.shape
        dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        self.slots, self.num_envs, self.device = -(-capacity // num_envs), num_envs, device  # ceil(capacity / envs)
        shape = (num_envs, self.slots)
        # torch.empty: memory pages are committed as frames are written (torch.zeros would commit all 7 GB at once);
        # a slot is read only once written, as `valid`, `first` and `size` ensure
        self.frames = torch.empty(shape + tuple(frame_shape), dtype=dtype)
        self.actions = torch.zeros(shape, dtype=torch.long)
        self.rewards = torch.zeros(shape)
        self.terminations = torch.zeros(shape)
        self.first = torch.zeros(shape, dtype=torch.bool)  # the slot starts an episode
        self.valid = torch.zeros(shape, dtype=torch.bool)  # a transition leaves the slot and its s' is stored
        self.pos = np.zeros(num_envs, dtype=np.int64)
        self.size = np.zeros(num_envs, dtype=np.int64)
        self.transitions = 0  # stored since the buffer was created or restored

    def fields(self):
        return self.frames, self.actions, self.rewards, self.terminations, self.first, self.valid

    def _newest(self, obs):
        return torch.as_tensor(obs[-1] if self.stack > 1 else obs, dtype=self.frames.dtype)

    def _write(self, env: int, obs, first: bool):
        p = self.pos[env]
        self.frames[env, p], self.first[env, p], self.valid[env, p] = self._newest(obs), first, False
        self.pos[env], self.size[env] = (p + 1) % self.slots, min(self.size[env] + 1, self.slots)

    def start(self, obs):
        """Begin an episode in every sub-env's stream with the reset observations obs (num_envs, *obs_shape)."""
        for env in range(self.num_envs):
            self._write(env, obs[env], first=True)

    def add(self, actions, rewards, real_next_obs, terminations, dones, next_obs):
        """Complete the transition leaving each stream's newest slot and store s'; where `dones`, also store the reset
        observation next_obs as the start of a new episode. Arrays are (num_envs, ...)."""
        for env in range(self.num_envs):
            p = (self.pos[env] - 1) % self.slots
            self.actions[env, p], self.rewards[env, p] = int(actions[env]), float(rewards[env])
            self.terminations[env, p], self.valid[env, p] = float(terminations[env]), True
            self._write(env, real_next_obs[env], first=False)
            if dones[env]:
                self._write(env, next_obs[env], first=True)
        self.transitions += self.num_envs

    def stack_slots(self, env, slot):
        """Slot indices (B, stack) of the stacks ending at `slot` (B,), padded with the episode's first slot."""
        idx = [slot]
        for _ in range(self.stack - 1):
            newest = idx[0]
            idx.insert(0, torch.where(self.first[env, newest], newest, (newest - 1) % self.slots))
        return torch.stack(idx, dim=1)

    def observations(self, env, slot):
        if self.stack == 1:
            return self.frames[env, slot]
        return self.frames[env[:, None], self.stack_slots(env, slot)]

    def sample(self, batch_size: int):
        """(obs, actions, rewards, next_obs, terminations) of `batch_size` transitions drawn uniformly among the stored
        ones, by rejection: slots with no transition, and those whose stack reaches overwritten slots, are redrawn."""
        envs, slots, found = [], [], 0
        wrapped = torch.as_tensor(self.size == self.slots)
        pos = torch.as_tensor(self.pos)
        while found < batch_size:
            env = torch.randint(0, self.num_envs, (2 * batch_size,))
            slot = torch.randint(0, int(self.size.max()), (2 * batch_size,))
            stale = wrapped[env] & ((slot - pos[env]) % self.slots < self.stack - 1)
            keep = self.valid[env, slot] & ~stale
            envs.append(env[keep]), slots.append(slot[keep])
            found += int(keep.sum())
        env, slot = torch.cat(envs)[:batch_size], torch.cat(slots)[:batch_size]
        batch = (self.observations(env, slot), self.actions[env, slot], self.rewards[env, slot],
                 self.observations(env, (slot + 1) % self.slots), self.terminations[env, slot])
        return tuple(x.to(self.device, non_blocking=True) for x in batch)

    def state_dict(self):
        used = int(self.size.max())
        return {"pos": self.pos.copy(), "size": self.size.copy(), "transitions": self.transitions,
                "fields": [f[:, :used].clone() for f in self.fields()]}

    def load_state_dict(self, state):
        self.pos, self.size, self.transitions = state["pos"].copy(), state["size"].copy(), state["transitions"]
        used = int(self.size.max())
        for storage, saved in zip(self.fields(), state["fields"]):
            storage[:, :used] = saved


# ---------------------------------------------------------------------------------------------------------------------
# LOSSES
# ---------------------------------------------------------------------------------------------------------------------
def compute_loss_q(actor, qf1, qf2, qf1_target, qf2_target, batch, alpha, gamma):
    """J_Q = sum_i E[(Q_i(s, a) - y)^2], y from `discrete_soft_q_target`   [arXiv:1910.07207 eq. 9; DEVIATION(4)]."""
    obs, actions, rewards, next_obs, terminations = batch
    with torch.no_grad():
        _, next_log_probs, next_probs = actor.get_action(next_obs)
        next_q_min = torch.min(qf1_target(next_obs), qf2_target(next_obs))
        y = discrete_soft_q_target(rewards, terminations, next_probs, next_log_probs, next_q_min, alpha, gamma)
    q1 = qf1(obs).gather(1, actions[:, None]).squeeze(1)
    q2 = qf2(obs).gather(1, actions[:, None]).squeeze(1)
    qf1_loss, qf2_loss = F.mse_loss(q1, y), F.mse_loss(q2, y)
    metrics = {"qf1_values": q1.detach().mean(), "qf2_values": q2.detach().mean(), "qf1_loss": qf1_loss.detach(),
               "qf2_loss": qf2_loss.detach(), "qf_loss": (qf1_loss.detach() + qf2_loss.detach()) / 2}
    return qf1_loss + qf2_loss, metrics


def compute_loss_pi(actor, qf1, qf2, obs, alpha):
    """The actor loss of `discrete_actor_loss`, with the critics' Q values held fixed. Returns (loss, probs, log_probs),
    the last two detached for the temperature loss."""
    _, log_probs, probs = actor.get_action(obs)
    with torch.no_grad():
        q_min = torch.min(qf1(obs), qf2(obs))
    return discrete_actor_loss(probs, log_probs, q_min, alpha), probs.detach(), log_probs.detach()


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
        (not args.adam_eps > 0, "--adam-eps must be positive"),
        (not 0 < args.tau <= 1, "--tau must lie in (0, 1]"),
        (not 0 < args.gamma <= 1, "--gamma must lie in (0, 1]"),
        (not args.alpha >= 0, "--alpha must be non-negative"),
        (not 0 <= args.target_entropy_scale <= 1,
         "--target-entropy-scale must lie in [0, 1]: the target is a fraction of the uniform policy's entropy"),
        (args.update_frequency < 1, "--update-frequency must be at least 1"),
        (args.target_network_frequency < 1, "--target-network-frequency must be at least 1"),
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
    if isinstance(space, gym.spaces.Box):
        raise ConfigError(f"{env_id} has a continuous (Box) action space: use sac_continuous_action.py for it")
    if not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"{env_id} has a {type(space).__name__} action space; this script needs a Discrete one")
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
    """Observations as the env gives them, on the device (the networks scale them)."""
    return torch.as_tensor(obs, device=device)


@torch.no_grad()
def evaluate(actor: Actor, env_id: str, episodes: int, seed: int, device="cpu", video_dir: str | None = None):
    """Returns of `episodes` real episodes (whole Atari games, unclipped) with the greedy action argmax_a pi(a|s);
    episode k is reset with seed + k. Draws nothing from torch's RNG, so evaluating does not change the training run.
    """
    env = make_env(env_id, video_dir)()
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        while True:
            action = actor(as_tensor(obs[None], device)).argmax(dim=1)
            obs, _, terminated, truncated, info = env.step(int(action[0]))
            if "episode" in info:  # the real game ended: RecordEpisodeStatistics sits below EpisodicLife
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

    if checkpoint:
        sub_envs, exact_resume = env_restore(checkpoint["envs"])
        envs = vector_env([lambda env=env: env for env in sub_envs])
    else:
        envs = vector_env([make_env(args.env_id) for _ in range(args.num_envs)])
    num_actions = int(envs.single_action_space.n)

    actor = Actor(envs).to(device)
    qf1, qf2 = SoftQNetwork(envs).to(device), SoftQNetwork(envs).to(device)
    qf1_target, qf2_target = SoftQNetwork(envs).to(device), SoftQNetwork(envs).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    qf1_target.requires_grad_(False)
    qf2_target.requires_grad_(False)
    fused = {"fused": True} if device.type in ("cpu", "cuda") else {}  # one Adam kernel for all tensors
    q_optimizer = torch.optim.Adam([*qf1.parameters(), *qf2.parameters()], lr=args.q_lr, eps=args.adam_eps, **fused)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr, eps=args.adam_eps, **fused)
    # H-bar = scale * log|A|, a fraction of the uniform policy's entropy   [arXiv:1910.07207 Sec. 4; DEVIATION(2)]
    target_entropy = args.target_entropy_scale * float(np.log(num_actions))
    log_alpha = torch.zeros(1, device=device, requires_grad=True)
    a_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr, eps=args.adam_eps, **fused)
    if not args.autotune:
        log_alpha.data.fill_(float(np.log(args.alpha)) if args.alpha > 0 else -float("inf"))
    rb = ReplayBuffer(args.buffer_size, args.num_envs, envs.single_observation_space, device)

    # UPDATE FUNCTION: takes a batch, steps the optimizers, returns detached metrics (no host sync)
    def update(batch):
        obs, actions, rewards, next_obs, terminations = batch
        batch = network_input(obs), actions, rewards, network_input(next_obs), terminations  # once, not per network
        alpha = log_alpha.exp().detach()
        qf_loss, metrics = compute_loss_q(actor, qf1, qf2, qf1_target, qf2_target, batch, alpha, args.gamma)
        q_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        q_optimizer.step()
        actor_loss, probs, log_probs = compute_loss_pi(actor, qf1, qf2, batch[0], alpha)
        actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_optimizer.step()
        metrics.update(actor_loss=actor_loss.detach(), alpha=alpha[0], entropy=-(probs * log_probs).sum(1).mean())
        if args.autotune:
            alpha_loss = discrete_alpha_loss(log_alpha, probs, log_probs, target_entropy)
            a_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            a_optimizer.step()
            metrics["alpha_loss"] = alpha_loss.detach()
        return metrics

    @torch.no_grad()
    def update_targets():
        # theta' <- tau * theta + (1 - tau) * theta'; tau = 1 copies   [DEVIATION(3)]
        for target, source in ((qf1_target, qf1), (qf2_target, qf2)):
            for target_param, param in zip(target.parameters(), source.parameters()):
                target_param.lerp_(param, args.tau)

    if args.compile:
        update = torch.compile(update)

    global_step = updates = 0
    last_return = None
    stateful = {"actor": actor, "qf1": qf1, "qf2": qf2, "qf1_target": qf1_target, "qf2_target": qf2_target,
                "q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer, "a_optimizer": a_optimizer}
    if checkpoint:
        for key, module in stateful.items():
            module.load_state_dict(checkpoint[key])
        if checkpoint["rb"] is not None:
            rb.load_state_dict(checkpoint["rb"])
        log_alpha.data.copy_(checkpoint["log_alpha"])
        global_step, updates = checkpoint["counters"]
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
        if checkpoint["rb"] is None or not exact_resume:
            rb.start(obs)  # a fresh stream starts here: the stack history before it is not in the buffer
        print(f"resumed {run_dir} at step {global_step:,}")
    else:
        obs, _ = envs.reset(seed=args.seed)
        rb.start(obs)

    def save_checkpoint():
        state = {key: module.state_dict() for key, module in stateful.items()}
        state.update(args=asdict(args), run_name=run_name, log_alpha=log_alpha.detach().cpu(), obs=obs,
                     counters=(global_step, updates), last_return=last_return, envs=env_snapshot(envs),
                     rb=rb.state_dict() if args.checkpoint_buffer else None,
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
    metrics = None
    eval_return = None

    def run_evaluation():
        video_dir = f"{run_dir}/videos/step_{global_step}" if args.capture_video else None  # one folder per evaluation
        mean_return = evaluate(actor, args.env_id, args.eval_episodes, args.seed + EVAL_SEED_OFFSET, device,
                               video_dir).mean()
        writer.add_scalar("eval/episodic_return", mean_return, global_step)
        return mean_return

    try:
        while global_step < total_steps and not stop_signal:
            # COLLECT: random actions for the first learning_starts steps (DEVIATION(5)), then a ~ pi(.|s)
            if global_step < args.learning_starts:
                actions = torch.randint(0, num_actions, (args.num_envs,), device=device).cpu().numpy()
            else:
                with torch.no_grad():
                    actions, _, _ = actor.get_action(as_tensor(obs, device))
                actions = actions.cpu().numpy()
            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            previous_step, global_step = global_step, global_step + args.num_envs

            # under EpisodicLife a life loss ends a training episode; `episode` only comes with the real game's end
            if "final_info" in infos and "_episode" in infos["final_info"]:
                episode = infos["final_info"]["episode"]
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    last_return = float(episode["r"][i])
                    writer.add_scalar("charts/episodic_return", last_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(episode["l"][i]), global_step)

            # STORE: bootstrap through truncations, never through terminations: s' is the true final observation and
            # `terminations` alone masks the target. SAME_STEP autoreset means no stored transition spans a reset.
            rb.add(actions, rewards, final_observations(next_obs, infos), terminations, terminations | truncations,
                   next_obs)
            obs = next_obs

            # UPDATE: one critic, actor and alpha update every update_frequency env steps (DEVIATION(3)); a resumed
            # run without its buffer waits until the buffer again holds learning_starts transitions
            if global_step >= args.learning_starts and rb.transitions >= args.learning_starts:
                train_start = train_start or (time.time(), global_step)
                for _ in range(global_step // args.update_frequency - previous_step // args.update_frequency):
                    metrics = update(rb.sample(args.batch_size))
                    updates += 1
                if crossed(previous_step, global_step, args.target_network_frequency):
                    update_targets()

            # LOG
            if crossed(previous_step, global_step, args.log_freq) and metrics is not None:
                for key, value in metrics.items():
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
                model = {"actor": actor.state_dict(), "qf1": qf1.state_dict(), "qf2": qf2.state_dict(),
                         "log_alpha": log_alpha.detach().cpu(), "args": asdict(args)}
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
    return {"run_dir": run_dir, "global_step": global_step, "critic_updates": updates, "actor_updates": updates,
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
