"""Training-phase throughput of our scripts against Stable-Baselines3 on the same machine, with matched hyperparameters.

    python benchmark/speed.py --pairs sac td3 a2c --out speed.md    # the README's Performance table (about 10 min)
    python benchmark/speed.py --pairs acer sac_atari                 # no SB3 peer: absolute figures
    python benchmark/speed.py --pairs a2c --repeats 5 --steps 200000 --threads 1
    python benchmark/speed.py --pairs sac td3 --steps 12001 --interleave 500   # turns of 500 steps, 19 rounds
    python benchmark/speed.py --pairs td3 --steps 12001 --interleave 500 --before HEAD~1   # the tree against HEAD~1
    python benchmark/speed.py --pairs sac td3 --steps 12001 --interleave 500 --before HEAD --ours-flags=--compile \
        --before-flags=--no-compile                                   # compiled against eager, same code

Every run is a fresh process with torch, OpenMP and MKL pinned to `--threads` threads (by default 2 for SAC, TD3 and
SAC-discrete, 1 for A2C and ACER; the same on both sides of a pair). The runs alternate (ours, SB3, ours, SB3, ...) so
that a slow spell of the machine hits both sides; the ratio of each (ours, SB3) pair is reported as min / median / max.
Env steps per second are counted over the training phase: for A2C that is the whole run (it learns from the first
rollout); for SAC and TD3 it starts when updates start (LEARNING_STARTS random steps on both sides) and has env
stepping, action sampling, replay sampling, updates and logging in it; env construction is not. Peak memory is the
process's maximum resident set size. After the table: for SAC and TD3 the time of each part of an env step, the
matrix-product FLOPs of its updates (torch's FlopCounterMode) and the arithmetic floor they give at the measured
256x256x256 matmul rate; the same for A2C's and SAC-discrete's updates; for ACER a per-update breakdown. SAC-discrete
and ACER have no SB3 peer: their runs give absolute figures. Prints Markdown; --out saves it.

This machine's speed swings by tens of percent within minutes, so two runs of a pair can meet different spells.
--interleave TURN (SAC and TD3) starts ours and SB3 together as two processes that take turns of TURN env steps,
passing a byte down a pipe, and times each turn: each round (a turn of ours, then one of SB3's) gives a ratio from two
stretches of work seconds apart. --interleave-check puts SB3 on both sides; its ratio should come out near 1.
--before REV puts our script as it was at git revision REV in SB3's place: an A/B of a speed change on whole runs;
--before-flags gives that side flags of its own (compiled against eager).
"""

import argparse
import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LEARNING_STARTS = 2_000  # SAC and TD3 on both sides: random-action steps before the timed training phase

# name: (env id, our script, its flags, what SB3 runs). The hyperparameters match the script's defaults:
# A2C: 8 envs, n_steps 5, gamma 0.99, n-step returns (SB3: gae_lambda 1.0), no advantage normalization, vf 0.5,
# entropy 0.01, grad norm 0.5, RMSprop lr 7e-4 alpha 0.99 eps 1e-5, separate 64-64 tanh actor and critic.
# SAC: 256-256 ReLU actor and twin critics, batch 256, buffer 1M, tau 0.005, gamma 0.99, one critic update per env
# step and one actor and alpha update per env step on average, automatic alpha with target entropy -|A|, target
# update every step; one learning rate of 3e-4 (SB3's default) for everything.
# TD3: 256-256 ReLU actor and twin critics, batch 256, buffer 1M, tau 0.005, gamma 0.99, lr 3e-4, policy delay 2,
# target noise 0.2 clipped at 0.5, Gaussian exploration noise 0.1.
# ACER has no SB3 peer (SB3 dropped it): absolute figures and a per-update breakdown instead.
# Torch/OpenMP threads per process unless --threads is given, on both sides of a pair: SAC's and TD3's 256-unit matrix
# products run about 1.7 times faster on two threads than on one; A2C's and ACER's 64-unit ones are measured at one.
DEFAULT_THREADS = {"a2c": 1, "acer": 1, "sac": 2, "td3": 2, "sac_atari": 2}
OFF_POLICY_FLAGS = ["--eval-freq", "0", "--eval-episodes", "1", "--learning-starts", str(LEARNING_STARTS)]
PAIRS = {
    "sac": ("Hopper-v5", "sac_continuous_action.py", [*OFF_POLICY_FLAGS, "--q-lr", "3e-4"], "SAC"),
    "td3": ("Hopper-v5", "td3_continuous_action.py", OFF_POLICY_FLAGS, "TD3"),
    "a2c": ("CartPole-v1", "a2c.py", ["--num-envs", "8", "--num-steps", "5", "--eval-freq", "0", "--eval-episodes", "1"],
            "A2C"),
    "acer": ("CartPole-v1", "acer.py", ["--eval-freq", "0", "--eval-episodes", "1", "--replay-start", "1000"], None),
    "sac_atari": ("BreakoutNoFrameskip-v4", "sac_atari.py", [*OFF_POLICY_FLAGS, "--buffer-size", "100000"], None),
}
# env steps per run unless --steps is given: the off-policy scripts' training phase starts at LEARNING_STARTS
DEFAULT_STEPS = {"a2c": 100_000, "acer": 100_000, "sac": 5_000, "td3": 6_000, "sac_atari": 3_000}


def run_ours(pair: str, steps: int, seed: int, ours_flags: str = "", on_step=None, root: str = ROOT) -> float:
    """Our script's training-phase SPS, the script imported from `root`; `on_step(steps_done)`, if given, is called
    before each env step."""
    env_id, script, flags, _ = PAIRS[pair]
    sys.path.insert(0, root)
    module = __import__(script[: -len(".py")])
    if on_step is not None:
        make_vector_env = module.vector_env

        def vector_env(thunks):
            envs, steps_done = make_vector_env(thunks), [0]
            step = envs.step

            def counted_step(actions):
                on_step(steps_done[0])
                steps_done[0] += 1
                return step(actions)

            envs.step = counted_step
            return envs

        module.vector_env = vector_env
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            summary = module.cli(["--env-id", env_id, "--total-timesteps", str(steps), "--seed", str(seed), *flags,
                                  *shlex.split(ours_flags)])
    finally:
        if on_step is not None:
            module.vector_env = make_vector_env
    return summary["train_sps"]


def sb3_model(pair: str, seed: int):
    """SB3's peer of `pair`, with the hyperparameters of our script's defaults (see PAIRS)."""
    env_id, _, _, algo = PAIRS[pair]
    import numpy as np
    from stable_baselines3 import A2C, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    off_policy = dict(buffer_size=1_000_000, batch_size=256, tau=0.005, gamma=0.99, learning_rate=3e-4,
                      learning_starts=LEARNING_STARTS, train_freq=1, gradient_steps=1,
                      policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu")
    if algo == "A2C":
        env = make_vec_env(env_id, n_envs=8, seed=seed)
        return A2C("MlpPolicy", env, learning_rate=7e-4, n_steps=5, gamma=0.99, gae_lambda=1.0, ent_coef=0.01,
                   vf_coef=0.5, max_grad_norm=0.5, rms_prop_eps=1e-5, use_rms_prop=True, normalize_advantage=False,
                   seed=seed, device="cpu")
    if algo == "SAC":
        return SAC("MlpPolicy", env_id, ent_coef="auto", target_update_interval=1, **off_policy)
    model = TD3("MlpPolicy", env_id, policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5, **off_policy)
    # SB3 adds the noise to actions rescaled to [-1, 1], so 0.1 there is 0.1 * action_scale, as in our script
    act_dim = model.action_space.shape[0]
    model.action_noise = NormalActionNoise(np.zeros(act_dim), 0.1 * np.ones(act_dim))
    return model


def step_callback(on_step):
    """An SB3 callback that calls `on_step(env steps done)` after each env step."""
    from stable_baselines3.common.callbacks import BaseCallback

    class OnStep(BaseCallback):
        def _on_step(self) -> bool:
            on_step(self.num_timesteps)
            return True

    return OnStep()


def run_sb3(pair: str, steps: int, seed: int, on_step=None) -> float:
    """SB3's training-phase SPS (from LEARNING_STARTS on; A2C: the whole run)."""
    learning_starts, start = 0 if pair == "a2c" else LEARNING_STARTS, []

    def clock(steps_done):
        if not start and steps_done >= learning_starts:
            start.append((time.perf_counter(), steps_done))
        if on_step is not None:
            on_step(steps_done)

    model = sb3_model(pair, seed)
    model.learn(total_timesteps=steps, callback=step_callback(clock))
    return (model.num_timesteps - start[0][1]) / (time.perf_counter() - start[0][0])


class Baton:
    """Two processes take turns on the machine, `turn` env steps each (the first side, the second, the first, ...),
    passing a byte down a pipe each way: two processes, not two threads, because OpenMP slows down every thread team
    in a process that holds more of them than there are cores.

    Each side calls `tick(steps_done)` once per env step. At every multiple of `turn` it ends the side's turn (its
    seconds are recorded, keyed by the env step the turn started at), hands the machine over and blocks until it comes
    back. A side that ends sends "done" (or dies, closing its pipe); the other then runs on alone. The two never run at
    once, and the turns of a round, seconds apart, meet the same spell of the machine.
    """

    def __init__(self, turn: int, read_fd: int, write_fd: int):
        self.turn, self.read_fd, self.write_fd = turn, read_fd, write_fd
        self.other_done, self.started, self.turns = False, None, {}

    def wait(self) -> None:
        if not self.other_done and os.read(self.read_fd, 1) in (b"", b"d"):  # b"": the other side's pipe closed
            self.other_done = True
        self.started = time.perf_counter()

    def tick(self, steps_done: int) -> None:
        if steps_done == 0 or steps_done % self.turn:
            return
        self.turns[steps_done - self.turn] = time.perf_counter() - self.started
        if not self.other_done:
            os.write(self.write_fd, b"t")
            self.wait()

    def begin(self, first: bool) -> None:
        """Start the side's first turn: at once if it goes first, else when the other hands over."""
        if first:
            self.started = time.perf_counter()
        else:
            self.wait()

    def finish(self) -> None:
        if not self.other_done:
            os.write(self.write_fd, b"d")


def script_at(revision: str, script: str, folder: str) -> None:
    """Write `script` as it was at git `revision` into `folder`; exit with one line if git cannot show it."""
    shown = subprocess.run(["git", "show", f"{revision}:{script}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        sys.exit(f"error: git cannot show {script} at {revision!r}: {shown.stderr.strip().splitlines()[-1]}")
    with open(os.path.join(folder, script), "w") as f:
        f.write(shown.stdout)


def run_turns(side: str, pair: str, steps: int, seed: int, turn: int, fds: str, ours_flags: str = "",
              before: str = "") -> dict:
    """One side of an interleaved pair: the seconds of its turns in the training phase, keyed by the turn's first env
    step, leaving out the first training turn (warm-up). `fds` is "read fd,write fd,first": first=1 goes first.
    side "before" runs our script as it was at git revision `before`."""
    read_fd, write_fd, first = (int(x) for x in fds.split(","))
    baton = Baton(turn, read_fd, write_fd)
    baton.begin(first)
    try:
        if side == "before":
            with tempfile.TemporaryDirectory() as folder:
                script_at(before, PAIRS[pair][1], folder)
                run_ours(pair, steps, seed, ours_flags, on_step=baton.tick, root=folder)
        elif side == "ours":
            run_ours(pair, steps, seed, ours_flags, on_step=baton.tick)
        else:
            run_sb3(pair, steps, seed, on_step=baton.tick)
    finally:
        baton.finish()
    return {str(k): v for k, v in sorted(baton.turns.items()) if k >= LEARNING_STARTS + turn}


def acer_breakdown(repeats: int = 200) -> dict:
    """Median milliseconds of the parts of one ACER update on a CartPole segment of the defaults (T 20, 8 envs), and of
    one collection step (act + env step of 8 envs)."""
    import torch

    sys.path.insert(0, ROOT)
    import acer

    args = acer.Args()
    envs = acer.vector_env([acer.make_env("CartPole-v1") for _ in range(args.num_envs)])
    agent, avg_agent = acer.Agent(envs), acer.Agent(envs).requires_grad_(False)
    flat = acer.flatten_parameters(agent)
    optimizer = torch.optim.RMSprop([flat], lr=args.learning_rate, alpha=args.rms_alpha, eps=args.rms_eps)
    T, N = args.num_steps, args.num_envs
    segment = dict(obs=torch.randn(T + 1, N, 4), actions=torch.randint(0, 2, (T, N)), rewards=torch.ones(T, N),
                   dones=torch.zeros(T, N), truncations=torch.zeros(T, N), mu=torch.full((T, N, 2), 0.5), final_obs={})
    obs, _ = envs.reset(seed=0)
    times = {"collect step (act + 8 env steps)": [], "loss (forward, Retrace, trust region)": [], "backward": [],
             "clip + RMSprop + average": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        actions, _ = agent.act(acer.as_tensor(obs, "cpu"))
        obs = envs.step(actions.numpy())[0]
        t1 = time.perf_counter()
        loss, _ = acer.acer_loss(agent, avg_agent, segment, args)
        t2 = time.perf_counter()
        flat.grad.zero_()
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(flat, args.max_grad_norm)
        optimizer.step()
        acer.update_average(avg_agent, agent, args.avg_decay)
        t4 = time.perf_counter()
        for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[key].append(value * 1000)
    envs.close()
    return {key: statistics.median(values) for key, values in times.items()}


def matmul_gflops(size: int = 256, repeats: int = 2000) -> float:
    """The measured float32 matrix-product rate: a (size x size) @ (size x size) product, best of 5 timed blocks."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(200):
        a @ b
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats // 5):
            a @ b
        best = min(best, (time.perf_counter() - start) / (repeats // 5))
    return 2 * size ** 3 / best / 1e9


def median_ms(parts: dict, repeats: int) -> dict:
    """Median milliseconds of each function in `parts` ({name: function}), the functions called in order, `repeats`
    rounds. They pass values along through their closures."""
    times = {name: [] for name in parts}
    for _ in range(repeats):
        for name, part in parts.items():
            start = time.perf_counter()
            part()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def off_policy_steps(m, sac: bool, envs) -> dict:
    """SAC's or TD3's update steps as the script's `main` builds them with its defaults, on fresh networks (module `m`,
    the script imported; `envs` gives the spaces): {'act', 'critic', 'actor', 'target'}, the middle two taking a batch.
    Learning rates are all 3e-4 (SAC's critic default is 1e-3; speed.py runs it at 3e-4 to match SB3)."""
    import torch

    args = m.Args()
    act_dim = envs.single_action_space.shape[0]
    actor, qf, qf_target = m.Actor(envs), m.QEnsemble(envs), m.QEnsemble(envs).requires_grad_(False)
    actor_flat, qf_flat = m.flatten_parameters(actor), m.flatten_parameters(qf)
    targets = [(m.flatten_parameters(qf_target, grad=False), qf_flat)]
    actor_optimizer = torch.optim.Adam([actor_flat], lr=3e-4, fused=True)
    q_optimizer = torch.optim.Adam([qf_flat], lr=3e-4, fused=True)
    if sac:
        log_alpha = torch.zeros(1, requires_grad=True)
        actor_optimizer.add_param_group({"params": [log_alpha], "lr": 3e-4})  # as the script: one step for both

        def act(x):
            return actor.sample(x)[0]

        def critic_loss(batch):
            return m.compute_loss_q(actor, qf, qf_target, batch, log_alpha.exp().detach(), args.gamma, True, 2)[0]

        def actor_loss(batch):
            loss, log_prob = m.compute_loss_pi(actor, qf, batch[0], log_alpha.exp().detach())
            log_alpha.grad = None
            return loss + m.compute_loss_alpha(log_alpha, log_prob, -float(act_dim))
    else:
        actor_target = m.Actor(envs).requires_grad_(False)
        targets.append((m.flatten_parameters(actor_target, grad=False), actor_flat))

        def act(x):
            return torch.clamp(actor(x) + 0.1 * torch.randn(1, act_dim), -1, 1)

        def critic_loss(batch):
            return m.compute_loss_q(actor_target, qf, qf_target, batch, args.gamma, args.policy_noise,
                                    args.noise_clip)[0]

        def actor_loss(batch):
            return m.compute_loss_pi(actor, qf, batch[0])

    def step(loss_fn, flat, optimizer):
        def run(batch):
            loss = loss_fn(batch)
            flat.grad.zero_()
            loss.backward()
            optimizer.step()
        return run

    @torch.no_grad()
    def target():
        for target_flat, online_flat in targets:
            target_flat.lerp_(online_flat, args.tau)

    return {"act": act, "critic": step(critic_loss, qf_flat, q_optimizer),
            "actor": step(actor_loss, actor_flat, actor_optimizer), "target": target}


def off_policy_breakdown(pair: str, repeats: int = 300) -> dict:
    """Median milliseconds of the parts of one env step of the training phase (SAC or TD3, Hopper-v5, the script's
    defaults), the matmul FLOPs of the updates one env step brings (counted by torch's FlopCounterMode, forward and
    backward), and the floor those FLOPs give at the measured matrix-product rate."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    env_id, script, _, _ = PAIRS[pair]
    sys.path.insert(0, ROOT)
    m = __import__(script[: -len(".py")])
    args = m.Args(env_id=env_id)
    envs = m.vector_env([m.make_env(env_id)])
    obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    steps = off_policy_steps(m, pair == "sac", envs)
    # SAC: policy_frequency actor updates every policy_frequency steps; TD3: one every policy_frequency steps
    actor_updates_per_step = 1.0 if pair == "sac" else 1.0 / args.policy_frequency
    rb = m.ReplayBuffer(10_000, obs_dim, act_dim, "cpu")
    obs, _ = envs.reset(seed=0)
    for _ in range(1_000):
        actions = np.random.uniform(-1, 1, (1, act_dim)).astype(np.float32)
        next_obs, rewards, terminations, _, infos = envs.step(actions)
        rb.add(obs, actions, rewards, m.final_observations(next_obs, infos), terminations)
        obs = next_obs

    def collect():
        nonlocal obs
        with torch.no_grad():
            actions = steps["act"](torch.as_tensor(obs, dtype=torch.float32)).numpy()
        next_obs, rewards, terminations, _, infos = envs.step(actions)
        rb.add(obs, actions, rewards, m.final_observations(next_obs, infos), terminations)
        obs = next_obs

    batch = {}
    parts = median_ms({"act + env step + store": collect,
                       "sample": lambda: batch.update(b=rb.sample(args.batch_size)),
                       "critic update": lambda: steps["critic"](batch["b"]),
                       "actor update": lambda: steps["actor"](batch["b"]),
                       "target update": steps["target"]}, repeats)
    envs.close()
    parts["actor update"] *= actor_updates_per_step  # per env step
    parts["target update"] *= 1.0 if pair == "sac" else 1.0 / args.policy_frequency
    flops = {}
    for name in ("critic", "actor"):
        with FlopCounterMode(display=False) as counter:
            steps[name](rb.sample(args.batch_size))
        flops[name] = counter.get_total_flops()
    gflop = (flops["critic"] + actor_updates_per_step * flops["actor"]) / 1e9
    rate = matmul_gflops()
    update_ms = parts["sample"] + parts["critic update"] + parts["actor update"] + parts["target update"]
    return {"parts": parts, "gflop": gflop, "gflops": rate, "floor_ms": gflop / rate * 1000, "update_ms": update_ms}


def a2c_breakdown(repeats: int = 500) -> dict:
    """Median milliseconds of one A2C iteration's parts with the defaults on CartPole-v1 (8 envs, 5 steps): a collection
    step (act + 8 env steps) and the update (loss, backward, clipping, RMSprop on 40 transitions), with the update's
    matmul FLOPs and the floor they give at the measured matrix-product rate."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, ROOT)
    import a2c

    args = a2c.Args()
    envs = a2c.vector_env([a2c.make_env("CartPole-v1") for _ in range(args.num_envs)])
    agent = a2c.Agent(envs, args.shared_network)
    flat = a2c.flatten_parameters(agent)
    optimizer = torch.optim.RMSprop([flat], lr=args.learning_rate, alpha=args.rms_alpha, eps=args.rms_eps)
    n = args.num_envs * args.num_steps
    obs_batch, actions = torch.randn(n, 4), torch.randint(0, 2, (n,))
    advantages, targets = torch.randn(n), torch.randn(n)
    obs, _ = envs.reset(seed=0)

    def update():
        loss, _ = a2c.compute_loss(agent, obs_batch, actions, advantages, targets, args.vf_coef, args.ent_coef)
        flat.grad.zero_()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(flat, args.max_grad_norm)
        optimizer.step()

    def collect():
        nonlocal obs
        sampled, _ = agent.act(torch.as_tensor(obs, dtype=torch.float32))
        obs = envs.step(sampled.numpy())[0]

    parts = median_ms({"collect step (act + 8 env steps)": collect, "update (loss, backward, clip, RMSprop)": update},
                      repeats)
    envs.close()
    with FlopCounterMode(display=False) as counter:
        update()
    gflop, rate = counter.get_total_flops() / 1e9, matmul_gflops()
    return {"parts": parts, "gflop": gflop, "gflops": rate, "floor_ms": gflop / rate * 1000}


def sac_atari_breakdown(repeats: int = 20) -> dict:
    """Median milliseconds of one SAC-discrete update on Breakout with the defaults (batch 64, NatureCNN actor and twin
    critics), split into sampling, the critic step and the actor and alpha step, and of a collection step (act, env
    step, store); with the update's matmul and convolution FLOPs and the floor they give at the measured matmul rate."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, ROOT)
    import sac_atari as m

    args = m.Args(env_id=PAIRS["sac_atari"][0])
    envs = m.vector_env([m.make_env(args.env_id)])
    actor, qf1, qf2 = m.Actor(envs), m.SoftQNetwork(envs), m.SoftQNetwork(envs)
    qf1_target, qf2_target = m.SoftQNetwork(envs).requires_grad_(False), m.SoftQNetwork(envs).requires_grad_(False)
    q_optimizer = torch.optim.Adam([*qf1.parameters(), *qf2.parameters()], lr=args.q_lr, eps=args.adam_eps, fused=True)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr, eps=args.adam_eps, fused=True)
    log_alpha = torch.zeros(1, requires_grad=True)
    a_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr, eps=args.adam_eps, fused=True)
    target_entropy = args.target_entropy_scale * float(np.log(envs.single_action_space.n))
    rb = m.ReplayBuffer(10_000, 1, envs.single_observation_space, "cpu")
    obs, _ = envs.reset(seed=0)
    rb.start(obs)

    def collect():
        nonlocal obs
        with torch.no_grad():
            actions = actor.get_action(m.as_tensor(obs, "cpu"))[0].numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(actions, rewards, m.final_observations(next_obs, infos), terminations, terminations | truncations,
               next_obs)
        obs = next_obs

    def critic_step(batch):
        loss, _ = m.compute_loss_q(actor, qf1, qf2, qf1_target, qf2_target, batch, log_alpha.exp().detach(),
                                   args.gamma)
        q_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        q_optimizer.step()

    def actor_step(batch):
        loss, probs, log_probs = m.compute_loss_pi(actor, qf1, qf2, batch[0], log_alpha.exp().detach())
        actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        actor_optimizer.step()
        alpha_loss = m.discrete_alpha_loss(log_alpha, probs, log_probs, target_entropy)
        a_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        a_optimizer.step()

    for _ in range(500):
        collect()
    def sample():
        obs, actions, rewards, next_obs, terminations = rb.sample(args.batch_size)
        return m.network_input(obs), actions, rewards, m.network_input(next_obs), terminations

    batch = {}
    parts = median_ms({"collect step (act + env step + store)": collect,
                       "sample (and scale the frames)": lambda: batch.update(b=sample()),
                       "critic update": lambda: critic_step(batch["b"]),
                       "actor and alpha update": lambda: actor_step(batch["b"])}, repeats)
    envs.close()
    with FlopCounterMode(display=False) as counter:
        batch = sample()
        critic_step(batch)
        actor_step(batch)
    gflop, rate = counter.get_total_flops() / 1e9, matmul_gflops()
    return {"parts": parts, "gflop": gflop, "gflops": rate, "floor_ms": gflop / rate * 1000,
            "update_ms": sum(parts[k] for k in ("sample (and scale the frames)", "critic update",
                                                "actor and alpha update")),
            "update_frequency": args.update_frequency}


def child(args) -> None:
    import torch

    side, pair, steps, seed, threads, ours_flags = (args.child, args.pairs[0], args.steps, args.seed, args.threads,
                                                    args.ours_flags)
    torch.set_num_threads(threads)
    if side == "turns":
        print("RESULT " + json.dumps(run_turns(args.side, pair, steps, seed, args.interleave, args.baton, ours_flags,
                                               args.before)))
        return
    if side == "breakdown":
        breakdown = {"acer": acer_breakdown, "a2c": a2c_breakdown, "sac_atari": sac_atari_breakdown}.get(
            pair, lambda: off_policy_breakdown(pair))
        print("RESULT " + json.dumps(breakdown()))
        return
    sps = run_ours(pair, steps, seed, ours_flags) if side == "ours" else run_sb3(pair, steps, seed)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"sps": sps, "peak_mb": peak_mb}))


def child_process(side: str, pair: str, steps: int, seed: int, threads: int, ours_flags: str, *extra: str, **popen):
    """Start this file as a child (`--child side`) with torch, OpenMP and MKL pinned to `threads` threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, os.path.abspath(__file__), "--child", side, "--pairs", pair, "--steps", str(steps),
           "--seed", str(seed), "--threads", str(threads), f"--ours-flags={ours_flags}", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def child_result(process, what: str) -> dict:
    """Wait for a child and return its RESULT line's JSON; exit with its stderr's end if it failed."""
    out, err = process.communicate()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not lines:
        sys.exit(f"error: {what} failed (exit {process.returncode}):\n{err[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def measure(side: str, pair: str, steps: int, seed: int, threads: int, ours_flags: str = "") -> dict:
    return child_result(child_process(side, pair, steps, seed, threads, ours_flags), f"{side} {pair}")


def measure_interleaved(pair: str, steps: int, seed: int, threads: int, ours_flags: str, turn: int,
                        check: bool, ours_first: bool, before: str = "", before_flags: str | None = None) -> tuple:
    """Ours and SB3 (check=True: SB3 and SB3, seeds apart; before=REV: ours and ours at git revision REV, same seed,
    run with `before_flags` when given) as two processes taking turns, ours (the first side) or the other first; their
    turns dicts."""
    (read_1, write_0), (read_0, write_1) = os.pipe(), os.pipe()  # what side 0 writes, side 1 reads, and back
    sides = (("sb3" if check else "ours", read_0, write_0, int(ours_first)),
             ("before" if before else "sb3", read_1, write_1, int(not ours_first)))
    before_flags = ours_flags if before_flags is None else before_flags
    procs = [child_process("turns", pair, steps, seed + k if check else seed, threads,
                           before_flags if side == "before" else ours_flags, "--side", side,
                           "--interleave", str(turn), "--baton", f"{read_fd},{write_fd},{first}",
                           f"--before={before}", pass_fds=(read_fd, write_fd))
             for k, (side, read_fd, write_fd, first) in enumerate(sides)]
    for fd in (read_0, write_0, read_1, write_1):
        os.close(fd)  # only the children hold the pipes, so one's exit reads as "done" in the other
    try:
        return tuple(child_result(proc, f"interleaved {side} {pair}") for (side, *_), proc in zip(sides, procs))
    finally:
        for proc in procs:
            proc.kill()  # the other side, when one failed; a no-op on those that ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", nargs="+", default=["a2c"], choices=sorted(PAIRS))
    parser.add_argument("--repeats", type=int, default=3, help="alternating (ours, SB3) pairs per script")
    parser.add_argument("--steps", type=int, default=None,
                        help="env steps per run (default: 100,000 for a2c and acer, 5,000 sac, 6,000 td3, 3,000 sac_atari)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch/OpenMP/MKL threads per process (default: 1 for a2c and acer, 2 for sac and td3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the Markdown table here as well")
    parser.add_argument("--ours-flags", default="", help="more flags for our scripts' runs, e.g. --ours-flags=--compile")
    parser.add_argument("--interleave", type=int, default=0, metavar="TURN",
                        help="sac and td3: run ours and SB3 as two processes taking turns of TURN env steps (ours "
                             "first in the 1st, 3rd, ... pair of processes, SB3 first in the others) and report the "
                             "ratio of each round of two turns (0: separate processes, the default)")
    parser.add_argument("--interleave-check", action="store_true",
                        help="with --interleave: SB3 on both sides, to check that taking turns is fair (ratio 1)")
    parser.add_argument("--before", default="", metavar="REV",
                        help="with --interleave: our script at git revision REV in SB3's place, same seed (an A/B "
                             "of a speed change: the ratio is the tree's speed over REV's)")
    parser.add_argument("--before-flags", default=None, metavar="FLAGS",
                        help="with --before: REV's flags in place of --ours-flags, e.g. --before HEAD "
                             "--ours-flags=--compile --before-flags=--no-compile for compiled against eager")
    parser.add_argument("--child", choices=["ours", "sb3", "breakdown", "turns"], help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=["ours", "sb3", "before"], help=argparse.SUPPRESS)
    parser.add_argument("--baton", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.repeats < 1 or (args.steps is not None and args.steps < 1000) or (args.threads is not None and
                                                                               args.threads < 1):
        sys.exit("error: --repeats and --threads must be at least 1 and --steps at least 1000")
    if args.steps is not None and args.steps <= LEARNING_STARTS and {"sac", "td3", "sac_atari"} & set(args.pairs):
        sys.exit(f"error: sac, td3 and sac_atari need --steps above their learning_starts ({LEARNING_STARTS:,})")
    if args.interleave < 0 or ((args.interleave_check or args.before) and not args.interleave):
        sys.exit("error: --interleave takes a turn length of at least 1 env step, and --interleave-check and --before "
                 "need it")
    if args.before_flags is not None and not args.before:
        sys.exit("error: --before-flags sets the flags of --before's side: give --before REV too")
    if args.interleave_check and args.before:
        sys.exit("error: --interleave-check and --before each choose the second side: give one of them")
    if args.before:
        revision = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.before}^{{commit}}"], cwd=ROOT,
                                  capture_output=True, text=True)
        if revision.returncode != 0:
            sys.exit(f"error: --before {args.before!r} is not a git revision of this repository; try a commit hash")
        for pair in args.pairs:
            if subprocess.run(["git", "cat-file", "-e", f"{args.before}:{PAIRS[pair][1]}"], cwd=ROOT,
                              capture_output=True).returncode != 0:
                sys.exit(f"error: {PAIRS[pair][1]} does not exist at {args.before}; give a later revision")
    if args.interleave and set(args.pairs) - {"sac", "td3"}:
        sys.exit("error: --interleave works for --pairs sac td3 only (the others have no SB3 peer or step 8 envs)")
    least = LEARNING_STARTS + 2 * args.interleave + 1
    if args.interleave and (args.steps or min(DEFAULT_STEPS[p] for p in args.pairs)) < least:
        sys.exit(f"error: --interleave {args.interleave} needs --steps of at least {least:,}"
                 " (random steps, one warm-up turn, one timed turn)")

    other = f"at {args.before}" if args.before else "SB3"  # the second side's column
    rows = [f"| script | env | threads | ours SPS (median) | {other} SPS (median) | ratio min / median / max | "
            f"peak MB ours / {other} |", "|---|---|---|---|---|---|---|"]
    notes = []
    for pair in args.pairs:
        env_id, script, _, peer = PAIRS[pair]
        threads, steps = args.threads or DEFAULT_THREADS[pair], args.steps or DEFAULT_STEPS[pair]
        results = {"ours": [], "sb3": []}
        if peer is None:
            for k in range(args.repeats):
                results["ours"].append(measure("ours", pair, steps, args.seed + k, threads, args.ours_flags))
            sps = [r["sps"] for r in results["ours"]]
            rows.append(f"| `{script}` | {env_id} | {threads} | {statistics.median(sps):,.0f} (min {min(sps):,.0f}, max "
                        f"{max(sps):,.0f}) | no SB3 peer | - | {max(r['peak_mb'] for r in results['ours']):.0f} / - |")
            if pair == "sac_atari":
                b = measure("breakdown", pair, steps, args.seed, threads)
                notes.append(f"`{script}` per update (every {b['update_frequency']} env steps), {env_id} defaults, "
                             "median of 20 (ms): " + ", ".join(f"{key} {value:.1f}" for key, value in b["parts"].items())
                             + f". Updates {b['update_ms']:.1f} ms for {b['gflop']:.2f} GFLOP of convolutions and "
                             f"matrix products; at the measured 256x256x256 float32 matmul rate of {b['gflops']:.0f} "
                             f"GFLOP/s the arithmetic floor is {b['floor_ms']:.1f} ms "
                             f"({b['update_ms'] / b['floor_ms']:.1f}x the floor).")
            if pair != "acer":
                continue
            parts = measure("breakdown", pair, steps, args.seed, threads)
            notes.append(f"`{script}` per update, CartPole-v1 defaults, median of 200 (ms): " +
                         ", ".join(f"{key} {value:.2f}" for key, value in parts.items()))
            continue
        if args.interleave:
            rounds, per_process = [], []
            for k in range(args.repeats):
                ours, sb3 = measure_interleaved(pair, steps, args.seed + k, threads, args.ours_flags, args.interleave,
                                                args.interleave_check, ours_first=k % 2 == 0, before=args.before,
                                                before_flags=args.before_flags)
                common = [key for key in ours if key in sb3]
                rounds += [(ours[key], sb3[key]) for key in common]
                per_process.append(sum(sb3[key] for key in common) / sum(ours[key] for key in common))
                print(f"{pair} interleaved run {k + 1}/{args.repeats}: {len(common)} rounds, ratio "
                      f"{per_process[-1]:.2f}", file=sys.stderr, flush=True)
            ratios = [sb3 / ours for ours, sb3 in rounds]  # equal turns: SPS ratio = SB3's seconds / ours
            ours_s, sb3_s = (sum(r[i] for r in rounds) for i in (0, 1))
            rows.append(f"| `{script}` | {env_id} | {threads} | {args.interleave * len(rounds) / ours_s:,.0f} | "
                        f"{args.interleave * len(rounds) / sb3_s:,.0f} | {min(ratios):.2f} / "
                        f"{statistics.median(ratios):.2f} / {max(ratios):.2f} | not measured (two runs share the "
                        "machine: see the separate runs) |")
            notes.append(f"`{script}` interleaved"
                         + (" (--interleave-check: SB3 on both sides, one in the ours column)"
                            if args.interleave_check else "")
                         + (f" (--before {args.before}: the script at {args.before} in the second SPS column"
                            + (f", run with `{args.before_flags}`" if args.before_flags is not None else "") + ")"
                            if args.before else "")
                         + f": {len(rounds)} rounds of two {args.interleave}-step turns in {args.repeats} pair(s) of "
                         f"processes; ratio over all rounds {sb3_s / ours_s:.3f}, per pair "
                         + ", ".join(f"{r:.3f} ({('before' if args.before else 'SB3') if k % 2 else 'ours'} first)"
                                     for k, r in enumerate(per_process))
                         + ".")
            continue
        for k in range(args.repeats):
            for side in ("ours", "sb3"):
                results[side].append(measure(side, pair, steps, args.seed + k, threads, args.ours_flags))
                print(f"{pair} {side} run {k + 1}/{args.repeats}: {results[side][-1]['sps']:.0f} SPS, "
                      f"peak {results[side][-1]['peak_mb']:.0f} MB", file=sys.stderr, flush=True)
        ratios = [o["sps"] / s["sps"] for o, s in zip(results["ours"], results["sb3"])]
        ours_sps, sb3_sps = (statistics.median(r["sps"] for r in results[side]) for side in ("ours", "sb3"))
        ours_mb, sb3_mb = (max(r["peak_mb"] for r in results[side]) for side in ("ours", "sb3"))
        rows.append(f"| `{script}` | {env_id} | {threads} | {ours_sps:,.0f} | {sb3_sps:,.0f} | {min(ratios):.2f} / "
                    f"{statistics.median(ratios):.2f} / {max(ratios):.2f} | {ours_mb:.0f} / {sb3_mb:.0f} |")
        if pair == "a2c":
            b = measure("breakdown", pair, steps, args.seed, threads)
            update_ms = b["parts"]["update (loss, backward, clip, RMSprop)"]
            notes.append(f"`{script}` per iteration, {env_id} defaults, median of 500 (ms): " +
                         ", ".join(f"{key} {value:.3f}" for key, value in b["parts"].items()) +
                         f". The update's matrix products are {b['gflop'] * 1000:.2f} MFLOP: at the measured "
                         f"256x256x256 float32 matmul rate of {b['gflops']:.0f} GFLOP/s the arithmetic floor is "
                         f"{b['floor_ms'] * 1000:.1f} µs ({update_ms / b['floor_ms']:.0f}x the floor: the update is "
                         f"overhead, not arithmetic).")
        if pair in ("sac", "td3"):
            b = measure("breakdown", pair, steps, args.seed, threads)
            notes.append(f"`{script}` per env step of the training phase, {env_id} defaults, median of 300 (ms): " +
                         ", ".join(f"{key} {value:.2f}" for key, value in b["parts"].items()) +
                         f". Updates {b['update_ms']:.2f} ms for {b['gflop']:.3f} GFLOP of matrix products; at the "
                         f"measured 256x256x256 float32 matmul rate of {b['gflops']:.0f} GFLOP/s the arithmetic floor "
                         f"is {b['floor_ms']:.2f} ms ({b['update_ms'] / b['floor_ms']:.1f}x the floor). Whole env step "
                         f"from the median SPS: {1000 / ours_sps:.2f} ms.")
    kind = "interleaved pairs of processes" if args.interleave else "alternating pairs"
    table = "\n".join(rows) + (f"\n\n{args.repeats} {kind} per script (runs of "
                               + ", ".join(f"{p} {args.steps or DEFAULT_STEPS[p]:,}" for p in args.pairs)
                               + f" env steps), {os.cpu_count()} CPUs"
                               + (f"; our runs with `{args.ours_flags}`" if args.ours_flags else "") + ".\n")
    table += "".join(f"\n{n}\n" for n in notes)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
