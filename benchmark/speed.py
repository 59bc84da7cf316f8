"""Training-phase env steps per second (SPS) of our scripts against Stable-Baselines3 (SB3), matched
settings.

    # ours against SB3 on Hopper-v5
    python benchmark/speed.py --pairs sac td3 --steps 12001 --interleave 500 --repeats 2
    # separate runs, ours then SB3
    python benchmark/speed.py --pairs a2c acer sac_atari --out speed.md
    # the tree against REV
    python benchmark/speed.py --pairs sac td3 --steps 12001 --interleave 500 --before REV
    # update time against the arithmetic floor
    python benchmark/speed.py --pairs sac td3 --steps 6000 --floor
    # on a CUDA GPU: eager, compiled, captured and SB3, Hopper-v5 (or --env-id HalfCheetah-v4)
    python benchmark/speed.py --gpu --repeats 1
    # on a CUDA GPU: 1, 4, 8 and 12 captured SAC runs at once, a process each
    python benchmark/speed.py --gpu --pairs sac --concurrent 1 4 8 12

Each run is a fresh process pinned to --threads torch/OpenMP/MKL threads. Env steps are timed from
the first update (after LEARNING_STARTS random steps; A2C and ACER from the first step) to the last;
construction and the final evaluation are left out. --interleave TURN (sac and td3:
sac_continuous_action.py and td3_continuous_action.py on Hopper-v5) runs ours and SB3 as two
processes taking turns of TURN env steps, so a slow spell of the machine hits both sides of a round.
--before REV runs our script as it was at git revision REV as the second side, in SB3's place, with
--before-flags in place of --ours-flags if given. --floor times our update functions, eager and
compiled, against their matmul FLOPs (torch's FlopCounterMode, in a third run) at this machine's 256
x 256 matmul rate. --gpu runs ours eagerly (--no-compile), compiled (--compile with CUDA_GRAPHS off)
and captured (--compile), and SB3, on the GPU, each timed from --warmup env steps after learning
starts, past compilation and capture; with --concurrent N..., N captured runs of ours at once
instead, one thread each, for each N: their mean and total SPS. --env-id puts sac and td3 (both
sides) on another MuJoCo env. Prints Markdown.
"""

import argparse
import contextlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNING_STARTS = 2_000  # SAC, TD3 and SAC-discrete on both sides: random-action steps before the timed phase
FLOOR_WARMUP = 100  # --floor: the first calls of each update function, compilation included, are not timed

# SB3 runs our scripts' default hyperparameters (sb3_model); ACER and SAC-discrete have no SB3 peer.
# Default threads: 2, as SAC's and TD3's 256-unit matrix products gain from a second; A2C's and
# ACER's do not.
EVAL = ["--eval-freq", "0", "--eval-episodes", "1"]
OFF_POLICY = [*EVAL, "--learning-starts", str(LEARNING_STARTS)]  # the timed phase starts after these random steps
PAIRS = {  # name: (env id, our script, its flags, SB3's algorithm, default threads, default env steps per run)
    "sac": ("Hopper-v5", "sac_continuous_action.py", [*OFF_POLICY, "--q-lr", "3e-4"], "SAC", 2, 5_000),
    "sac_hil_serl": ("Hopper-v5", "sac_hil_serl.py", [*OFF_POLICY, "--q-lr", "3e-4"], "SAC", 2, 5_000),
    "td3": ("Hopper-v5", "td3_continuous_action.py", OFF_POLICY, "TD3", 2, 6_000),
    "a2c": ("CartPole-v1", "a2c.py", ["--num-envs", "8", "--num-steps", "5", *EVAL], "A2C", 1, 100_000),
    "acer": ("CartPole-v1", "acer.py", [*EVAL, "--replay-start", "1000"], None, 1, 100_000),
    "sac_atari": ("BreakoutNoFrameskip-v4", "sac_atari.py", [*OFF_POLICY, "--buffer-size", "100000"], None, 2, 3_000),
}


def hook_env_steps(on_step):
    """Make every gymnasium SyncVectorEnv of this process, whatever code builds it, call
    `on_step(env steps done)` before each step, counting each sub-env."""
    import gymnasium as gym

    step, done = gym.vector.SyncVectorEnv.step, [0]

    def counted_step(self, actions):
        on_step(done[0])
        done[0] += self.num_envs
        return step(self, actions)

    gym.vector.SyncVectorEnv.step = counted_step


class Meter:
    """Called with the env steps done at each env step; keeps (time, steps) of the first call at
    `start` steps or later and of the last. With `fds` (read fd, write fd, 1 if this side goes
    first) it takes turns of `turn` env steps with another process, a byte down a pipe each way,
    recording each turn's seconds; a side that ends sends "d"."""

    def __init__(self, start: int, turn: int = 0, fds: tuple = ()):
        self.start, self.turn, self.fds, self.first, self.turns, self.other_done = start, turn, fds, None, {}, not fds
        self.started = time.perf_counter()
        if fds and not fds[2]:
            self.wait()

    def wait(self) -> None:
        if not self.other_done and os.read(self.fds[0], 1) in (b"", b"d"):  # b"": the other side's pipe closed
            self.other_done = True
        self.started = time.perf_counter()

    def __call__(self, steps_done: int) -> None:
        self.last = (time.perf_counter(), steps_done)
        self.first = self.first or (self.last if steps_done >= self.start else None)
        if self.turn and steps_done and steps_done % self.turn == 0:
            self.turns[steps_done - self.turn] = self.last[0] - self.started
            if not self.other_done:
                os.write(self.fds[1], b"t")
                self.wait()

    def finish(self) -> None:
        if not self.other_done:
            os.write(self.fds[1], b"d")


def measure_updates(module, mode: str, record: dict) -> None:
    """--floor: make each update function that `module`'s builders (named *_update or *_updates)
    return append to record[its index] its seconds (mode "time") or its matmul FLOPs (mode "count")
    at every call."""
    from torch.utils.flop_counter import FlopCounterMode

    def measured(fn, key: str):
        def call(*a, **k):
            start = time.perf_counter()
            with FlopCounterMode(display=False) if mode == "count" else contextlib.nullcontext() as counter:
                out = fn(*a, **k)
            record.setdefault(key, []).append(counter.get_total_flops() if counter else time.perf_counter() - start)
            return out

        return call

    for name in [n for n, f in vars(module).items() if n.endswith(("_update", "_updates")) and callable(f)]:

        def build(*a, _build=getattr(module, name), **k):
            fns = _build(*a, **k)
            wrapped = tuple(
                f if getattr(f, "__name__", "") == "act" else measured(f, str(i))  # acting is no update
                for i, f in enumerate(fns if isinstance(fns, tuple) else (fns,))
            )
            return wrapped if isinstance(fns, tuple) else wrapped[0]

        setattr(module, name, build)


def floor_markdown(args, command: str) -> str:
    """--floor: per script an eager run counting FLOPs, then an eager and a compiled run timing the
    updates. A row per script and path: the updates' milliseconds per env step (the first
    FLOOR_WARMUP calls of each function, compilation included, left out) against the floor, their
    matmul FLOPs at the rate of a 256 x 256 matmul."""
    import torch

    torch.set_num_threads(args.threads or 2)
    a, calls, start = torch.randn(256, 256), 0, time.perf_counter()
    while time.perf_counter() - start < 3:
        torch.mm(a, a)
        calls += 1
    rate = 2 * 256**3 * calls / (time.perf_counter() - start)  # FLOP/s
    rows = [
        f"| script | path | update ms per env step | matmul GFLOP per env step | floor ms at {rate / 1e9:.0f} "
        "GFLOP/s (256 x 256 matmul) | update / floor | first calls s (compilation) |",
        "|---" * 7 + "|",
    ]
    for pair in args.pairs:
        runs, steps, threads = {}, args.steps or PAIRS[pair][5], args.threads or PAIRS[pair][4]
        for name, mode, flags in (
            ("count", "count", "--no-compile"),
            ("eager", "time", "--no-compile"),
            ("compiled", "time", "--compile"),
        ):
            pinned = argparse.Namespace(
                **{**vars(args), "threads": threads, "measure": mode, "ours_flags": flags, "before_flags": ""}
            )
            runs[name] = run_children(["ours"], pair, steps, [args.seed], pinned)[0]["updates"]
        train_steps = steps - LEARNING_STARTS
        flops = sum(map(sum, runs.pop("count").values())) / train_steps
        for path, record in runs.items():
            seconds = sum(statistics.mean(v[FLOOR_WARMUP:]) * len(v) for v in record.values()) / train_steps
            rows.append(
                f"| `{PAIRS[pair][1]}` | {path} | {seconds * 1e3:.2f} | {flops / 1e9:.3f} | "
                f"{flops / rate * 1e3:.2f} | {seconds * rate / flops:.2f} | "
                f"{sum(v[0] for v in record.values()):.1f} |"
            )
    return "\n".join([f"`{command}`", "", f"Machine: {machine()}.", "", *rows]) + "\n"


def sb3_model(pair: str, seed: int, device: str = "cpu"):
    """SB3's peer of `pair`, with the hyperparameters of our script's defaults (see PAIRS)."""
    env_id, _, _, algo = PAIRS[pair][:4]
    import numpy as np
    from stable_baselines3 import A2C, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    off_policy = dict(
        buffer_size=1_000_000,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        learning_rate=3e-4,
        learning_starts=LEARNING_STARTS,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=seed,
        device=device,
    )
    if algo == "A2C":
        return A2C(
            "MlpPolicy",
            make_vec_env(env_id, n_envs=8, seed=seed),
            learning_rate=7e-4,
            n_steps=5,
            gamma=0.99,
            gae_lambda=1.0,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
            rms_prop_eps=1e-5,
            use_rms_prop=True,
            normalize_advantage=False,
            seed=seed,
            device="cpu",
        )
    if algo == "SAC":
        return SAC("MlpPolicy", env_id, ent_coef="auto", target_update_interval=1, **off_policy)
    model = TD3("MlpPolicy", env_id, policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5, **off_policy)
    # SB3 adds the noise to actions rescaled to [-1, 1], so 0.1 there is 0.1 * action_scale, as in
    # our script
    act_dim = model.action_space.shape[0]
    model.action_noise = NormalActionNoise(np.zeros(act_dim), 0.1 * np.ones(act_dim))
    return model


def child(args) -> None:
    """One side's run in this process. Prints RESULT and the JSON of its peak MB and SPS
    (interleaved: the seconds of each turn of the training phase but its first, keyed by the turn's
    first env step)."""
    import torch

    torch.set_num_threads(args.threads)
    pair, (env_id, script, flags) = args.pairs[0], PAIRS[args.pairs[0]][:3]
    start = LEARNING_STARTS + args.warmup if "--learning-starts" in flags else 0  # A2C, ACER: from the first step
    meter = Meter(start, args.interleave, tuple(int(x) for x in args.baton.split(",")) if args.baton else ())
    record = {}  # --floor: what the update functions measured
    flags_given = shlex.split(args.before_flags if args.child == "before" else args.ours_flags)
    flags_given = [os.path.abspath(a) if os.path.isfile(a) else a for a in flags_given]  # a file named from here
    try:
        with tempfile.TemporaryDirectory() as folder:
            os.chdir(folder)  # where our script writes runs/
            if args.child == "sb3":
                from stable_baselines3.common.callbacks import BaseCallback

                callback = type("OnStep", (BaseCallback,), {"_on_step": lambda self: meter(self.num_timesteps) or True})
                sb3_model(pair, args.seed, "cuda" if args.gpu else "cpu").learn(
                    total_timesteps=args.steps, callback=callback()
                )
            else:
                if args.child == "before":  # our script at REV: each script stands alone, so the one file is enough
                    with open(script, "w") as f:
                        subprocess.run(["git", "show", f"{args.before}:{script}"], cwd=ROOT, stdout=f, check=True)
                sys.path.insert(0, folder if args.child == "before" else ROOT)
                hook_env_steps(meter)
                module = __import__(script[: -len(".py")])
                if args.no_graphs:  # --gpu's compiled path: compiled, not captured
                    module.CUDA_GRAPHS = False
                if args.measure:
                    measure_updates(module, args.measure, record)
                module.cli(
                    [
                        "--env-id",
                        env_id,
                        "--total-timesteps",
                        str(args.steps),
                        "--seed",
                        str(args.seed),
                        *flags,
                        *flags_given,
                    ]
                )
    finally:
        meter.finish()
    result = {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "updates": record}
    if args.baton:
        result["turns"] = {k: v for k, v in sorted(meter.turns.items()) if k >= start + args.interleave}
    else:
        result["sps"] = (meter.last[1] - meter.first[1]) / (meter.last[0] - meter.first[0])
    print("RESULT " + json.dumps(result))


def run_children(sides: list, pair: str, steps: int, seeds: list, args, batons: list = ()) -> list:
    """Run a child (this file, --child) per side at once, threads pinned: their RESULTs, or exit
    with a failure."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    procs, logs = [], [tempfile.TemporaryFile("w+") for _ in sides]  # files: a full pipe would stall a side's turn
    for k, (side, seed, log) in enumerate(zip(sides, seeds, logs)):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            side,
            "--pairs",
            pair,
            "--steps",
            str(steps),
            "--seed",
            str(seed),
            "--threads",
            str(args.threads),
            f"--ours-flags={args.ours_flags}",
            f"--before-flags={args.before_flags}",
            f"--before={args.before}",
            "--interleave",
            str(args.interleave),
        ]
        cmd += [f"--baton={','.join(map(str, batons[k]))}"] if batons else []
        cmd += [f"--measure={args.measure}"] if args.measure else []
        cmd += ["--warmup", str(args.warmup)] + ["--gpu"] * args.gpu + ["--no-graphs"] * args.no_graphs
        cmd += ["--env-id", args.env_id] if args.env_id else []
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, pass_fds=batons[k][:2] if batons else ()
            )
        )
    for fd in {fd for baton in batons for fd in baton[:2]}:
        os.close(fd)  # only the children hold the pipes, so one's exit reads as "done" in the other
    try:
        results = []
        for side, proc, log in zip(sides, procs, logs):
            proc.wait()
            log.seek(0)
            output = log.read()
            lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                sys.exit(f"error: {side} {pair} failed (exit {proc.returncode}):\n{output[-3000:]}")
            results.append(json.loads(lines[-1][len("RESULT ") :]))
        return results
    finally:
        for proc, log in zip(procs, logs):
            proc.kill()  # the other side, when one failed; a no-op on those that ended
            log.close()


def markdown(args, names: tuple, measured: dict, command: str, machine: str) -> str:
    """The command line, the machine, a row per script and (interleaved) a note per script.
    `measured` maps a pair to (threads, steps, [(one side's result, the other's or None), ...])."""
    a, b = names
    rows = [
        f"| script | env | threads | {a} SPS | {b} SPS | ratio {a} / {b}: min / median / max | peak MB {a} / {b} |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for pair, (threads, steps, results) in measured.items():
        flags, script = shlex.split(args.ours_flags), PAIRS[pair][1]
        env_id = ([v for f, v in zip(flags, flags[1:]) if f == "--env-id"] or [PAIRS[pair][0]])[-1]  # ours' env
        ones, others = [r[0] for r in results], [r[1] for r in results if r[1] is not None]
        peaks = " / ".join(f"{max(r['peak_mb'] for r in side):.0f}" if side else "-" for side in (ones, others))
        if "turns" in ones[0]:
            rounds, per_pair = [], []
            for x, y in zip(ones, others):
                keys = [k for k in x["turns"] if k in y["turns"]]
                rounds += [(x["turns"][k], y["turns"][k]) for k in keys]
                per_pair.append(sum(y["turns"][k] for k in keys) / sum(x["turns"][k] for k in keys))
            seconds = [sum(r[i] for r in rounds) for i in (0, 1)]
            sps, ratios = [[args.interleave * len(rounds) / s] for s in seconds], [y / x for x, y in rounds]
            notes.append(
                f"`{script}`: {len(rounds)} rounds of two {args.interleave}-step turns in {len(per_pair)} "
                f"pair(s) of processes; ratio over all rounds {seconds[1] / seconds[0]:.3f}, per pair "
                + ", ".join(f"{r:.3f} ({(a, b)[k % 2]} first)" for k, r in enumerate(per_pair))
                + "."
            )
        else:
            sps = [[r["sps"] for r in side] for side in (ones, others)]
            ratios = [x / y for x, y in zip(*sps)]
        cells = [f"{statistics.median(s):,.1f}" if s else "no peer" for s in sps]
        spread = " / ".join(f"{f(ratios):.2f}" for f in (min, statistics.median, max)) if ratios else "-"
        rows.append(f"| `{script}` | {env_id} | {threads} | {cells[0]} | {cells[1]} | {spread} | {peaks} |")
    kind = "interleaved pair(s) of processes" if args.interleave else "measurements of each side"
    text = [
        f"`{command}`",
        "",
        f"Machine: {machine}.",
        "",
        *rows,
        "",
        f"{args.repeats} {kind} per script, runs of "
        + ", ".join(f"{p} {m[1]:,}" for p, m in measured.items())
        + " env steps."
        + (f" Our runs with `{args.ours_flags}`." if args.ours_flags else "")
        + (f" The runs at {args.before} with `{args.before_flags}`." if args.before and args.before_flags else ""),
    ]
    return "\n".join(text + [f"\n{note}" for note in notes]) + "\n"


def gpu_markdown(args, command: str) -> str:
    """--gpu: per script, ours eager, compiled and captured, then SB3 (not with --ours-flags, which
    change the task), each in a process of its own on the GPU; a row per script and path: the median
    SPS of --repeats runs, and its ratio to SB3's. --out is rewritten after each path, so a run
    stopped midway keeps the rows it measured."""
    import torch

    paths = {
        "eager": ("ours", "--no-compile", False),
        "compiled": ("ours", "--compile", True),
        "captured": ("ours", "--compile", False),
        **({} if args.ours_flags else {"SB3": ("sb3", "", False)}),
    }
    measured, failed = {pair: {} for pair in args.pairs}, []
    gpu = f"Machine: {machine()}; GPU: {torch.cuda.get_device_name()}."

    def text() -> str:
        rows = ["| script | env | path | SPS | ratio to SB3 | peak host MB |", "|---|---|---|---|---|---|"]
        for pair, found in measured.items():
            for path, (sps, peak) in found.items():
                ratio = f"{sps / found['SB3'][0]:.2f}" if "SB3" in found else "-"
                rows.append(f"| `{PAIRS[pair][1]}` | {PAIRS[pair][0]} | {path} | {sps:,.1f} | {ratio} | {peak:.0f} |")
        runs = ", ".join(f"{p} {args.steps or PAIRS[p][5]:,}" for p in args.pairs)
        note = (
            f"{args.repeats} run(s) a path, of {runs} env steps, timed from {LEARNING_STARTS + args.warmup:,}."
            + (f" Our runs add `{args.ours_flags}`." if args.ours_flags else "")
            + (f" Failed: {', '.join(failed)}." if failed else "")
        )
        return "\n".join([f"`{command}`", "", gpu, "", *rows, "", note]) + "\n"

    for pair in args.pairs:
        steps = args.steps or PAIRS[pair][5]
        for path, (side, flags, no_graphs) in paths.items():
            pinned = argparse.Namespace(
                **{
                    **vars(args),
                    "threads": args.threads or PAIRS[pair][4],
                    "no_graphs": no_graphs,
                    "ours_flags": f"{flags} {args.ours_flags}".strip(),
                }
            )
            try:
                found = [run_children([side], pair, steps, [args.seed + k], pinned)[0] for k in range(args.repeats)]
            except SystemExit as failure:  # one path failing (say, its capture) leaves the others' rows
                print(failure, file=sys.stderr, flush=True)
                failed.append(f"{pair} {path}")
            else:
                measured[pair][path] = (statistics.median(r["sps"] for r in found), max(r["peak_mb"] for r in found))
                print(f"{pair} {path}: {measured[pair][path][0]:,.1f} SPS", file=sys.stderr, flush=True)
            if args.out:
                with open(args.out, "w") as f:
                    f.write(text())
    if not any(measured.values()):
        sys.exit(f"error: every path failed ({', '.join(failed)}); the errors are above")
    return text()


def concurrent_markdown(args, command: str) -> str:
    """--gpu --concurrent N...: for each N, N captured runs of ours (seeds --seed to --seed + N - 1)
    at once on the one GPU, a process of one thread each; a row per N: the runs' mean, slowest and
    total SPS (the sum of each run's SPS over its own timed stretch; the stretches overlap but for
    their ends)."""
    import torch

    pair = args.pairs[0]
    env_id, steps = PAIRS[pair][0], args.steps or PAIRS[pair][5]
    rows = ["| runs at once | mean SPS a run | slowest run | total SPS |", "|---|---|---|---|"]
    pinned = argparse.Namespace(
        **{**vars(args), "threads": args.threads or 1, "ours_flags": f"--compile {args.ours_flags}".strip()}
    )
    for n in args.concurrent:
        sps = [r["sps"] for r in run_children(["ours"] * n, pair, steps, [args.seed + k for k in range(n)], pinned)]
        rows.append(f"| {n} | {statistics.mean(sps):,.1f} | {min(sps):,.1f} | {sum(sps):,.1f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    timed_from = LEARNING_STARTS + args.warmup
    setup = f"`{PAIRS[pair][1]}` captured on {env_id}, runs of {steps:,} env steps timed from {timed_from:,}"
    setup += f", {pinned.threads} thread(s) a run."
    gpu = f"Machine: {machine()}; GPU: {torch.cuda.get_device_name()}."
    return "\n".join([f"`{command}`", "", gpu, "", setup, "", *rows]) + "\n"


def machine() -> str:
    """The CPU model (Linux's /proc/cpuinfo), logical CPUs, memory and the versions that set the
    speed."""
    with open("/proc/cpuinfo") if os.path.exists("/proc/cpuinfo") else open(os.devnull) as f:
        model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{model}, {os.cpu_count()} logical CPUs, {memory:.0f} GiB memory; Python {sys.version.split()[0]}, "
        + ", ".join(f"{p} {version(p)}" for p in ("torch", "stable-baselines3", "gymnasium"))
    )


def check(args) -> str | None:
    """The first problem with the flags, as one line, or None."""
    git = []  # whether git finds --before's commit, then each pair's script in it
    for what in ["^{commit}", *(f":{PAIRS[p][1]}" for p in args.pairs)] if args.before else []:
        exists = subprocess.run(["git", "cat-file", "-e", args.before + what], cwd=ROOT, capture_output=True)
        git.append(exists.returncode == 0)
    off_policy = sorted({"sac", "sac_hil_serl", "td3", "sac_atari"} & set(args.pairs))
    least = LEARNING_STARTS + 2 * args.interleave + 1
    problems = [
        (
            args.repeats < 1
            or (args.threads is not None and args.threads < 1)
            or (args.steps is not None and args.steps < 1000),
            "--repeats and --threads must be at least 1 and --steps at least 1000",
        ),
        (
            off_policy and (args.steps or LEARNING_STARTS + 1) <= LEARNING_STARTS,
            f"{', '.join(off_policy)} need --steps above their learning starts ({LEARNING_STARTS:,})",
        ),
        (args.interleave < 0, "--interleave takes a turn of at least 1 env step"),
        (args.interleave and set(args.pairs) - {"sac", "td3"}, "--interleave works for --pairs sac td3 only"),
        (
            args.interleave and min(args.steps or PAIRS[p][5] for p in args.pairs) < least,
            f"--interleave {args.interleave} needs --steps of at least {least:,} (random steps, warm-up, a timed turn)",
        ),
        (args.before_flags is not None and not args.before, "--before-flags needs --before REV"),
        (
            args.floor and (set(args.pairs) - {"sac", "td3"} or args.interleave or args.before),
            "--floor works for --pairs sac td3 only, without --interleave or --before",
        ),
        (git and not git[0], f"--before {args.before!r} is not a git revision of this repository"),
        (
            args.gpu
            and (set(args.pairs) - {"sac", "sac_hil_serl", "td3"} or args.interleave or args.before or args.floor),
            "--gpu works for --pairs sac sac_hil_serl td3 only, without --interleave, --before or --floor",
        ),
        (args.gpu and not cuda_available(), "--gpu needs a CUDA GPU that torch sees"),
        (args.concurrent and not (args.gpu and len(args.pairs) == 1), "--concurrent needs --gpu and one of --pairs"),
        (args.concurrent and min(args.concurrent) < 1, "--concurrent takes run counts of at least 1"),
        (
            args.env_id and set(args.pairs) - {"sac", "sac_hil_serl", "td3"},
            "--env-id works for --pairs sac sac_hil_serl td3 only",
        ),
        (
            args.warmup < 0 or args.steps is not None and args.steps <= LEARNING_STARTS + args.warmup and off_policy,
            f"--warmup must be non-negative and --steps above {LEARNING_STARTS:,} + --warmup",
        ),
    ] + [(git and not found, f"{PAIRS[p][1]} does not exist at {args.before}") for p, found in zip(args.pairs, git[1:])]
    return next((why for bad, why in problems if bad), None)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pairs_markdown(args, command: str) -> str:
    """Measure each pair's sides (interleaved or separate runs) and return the Markdown."""
    args.before_flags = args.ours_flags if args.before_flags is None else args.before_flags
    measured = {}
    for pair in args.pairs:
        second = ("before",) if args.before else ("sb3",) if PAIRS[pair][3] else ()
        sides = ("ours", *second)
        threads, steps = args.threads or PAIRS[pair][4], args.steps or PAIRS[pair][5]
        pinned, results = argparse.Namespace(**{**vars(args), "threads": threads}), []
        for k in range(args.repeats):
            seeds = [args.seed + k] * len(sides)
            if args.interleave:  # side 0 first in even repeats, side 1 in odd ones
                (read_1, write_0), (read_0, write_1) = os.pipe(), os.pipe()  # side 0 writes, side 1 reads; and back
                found = run_children(
                    sides, pair, steps, seeds, pinned, [(read_0, write_0, 1 - k % 2), (read_1, write_1, k % 2)]
                )
            else:
                found = [run_children([side], pair, steps, [seed], pinned)[0] for side, seed in zip(sides, seeds)]
            results.append((*found, None)[:2])
            print(f"{pair}: {k + 1} of {args.repeats} done", file=sys.stderr, flush=True)
        measured[pair] = (threads, steps, results)
    return markdown(args, ("ours", f"at {args.before}" if args.before else "SB3"), measured, command, machine())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=["sac", "td3"], choices=sorted(PAIRS))
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each side per script")
    parser.add_argument(
        "--steps", type=int, help="env steps a run, at least 1000 (default: sac 5k, td3 6k, sac_atari 3k, else 100k)"
    )
    parser.add_argument("--threads", type=int, help="torch/OpenMP/MKL threads a process (default: 2, a2c and acer 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the Markdown here as well")
    parser.add_argument("--ours-flags", default="", help="more flags for our runs, e.g. --ours-flags=--compile")
    parser.add_argument("--interleave", type=int, default=0, metavar="TURN", help="sac, td3: turns of TURN env steps")
    parser.add_argument("--before", default="", metavar="REV", help="our script at git revision REV as the other side")
    parser.add_argument("--before-flags", metavar="FLAGS", help="REV's flags in place of --ours-flags")
    parser.add_argument("--child", choices=["ours", "sb3", "before"], help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help="sac, td3: time the updates against the arithmetic floor")
    parser.add_argument("--measure", choices=["time", "count"], help=argparse.SUPPRESS)  # a --floor child's part
    parser.add_argument("--gpu", action="store_true", help="sac, td3 on a CUDA GPU: eager, compiled, captured and SB3")
    parser.add_argument("--warmup", type=int, default=0, help="env steps after learning starts left out of the timing")
    parser.add_argument("--no-graphs", action="store_true", help=argparse.SUPPRESS)  # --gpu's compiled path
    parser.add_argument("--concurrent", type=int, nargs="+", metavar="N", help="--gpu: N captured runs at once")
    parser.add_argument("--env-id", help="sac, sac_hil_serl, td3: this MuJoCo env in place of Hopper-v5")
    parser.add_argument("--baton", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for pair in args.pairs if args.env_id else []:  # both sides, in this process and in its children
        PAIRS[pair] = (args.env_id, *PAIRS[pair][1:])
    if args.child:
        return child(args)
    if problem := check(args):  # bad input: one line, exit code 2, as the scripts' own
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if args.out:  # its folder made now, not after the measurements
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    command = shlex.join(["python", "benchmark/speed.py", *sys.argv[1:]])
    report = concurrent_markdown if args.concurrent else gpu_markdown if args.gpu else pairs_markdown
    text = (floor_markdown if args.floor else report)(args, command)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
