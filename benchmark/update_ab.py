"""One script's updates at a git revision against the working tree, interleaved in one process: small speed changes
measured without the VM's swings.

    python benchmark/update_ab.py --before 57b57fc --scripts sac_atari
    python benchmark/update_ab.py --before 57b57fc --scripts sac_continuous_action td3_continuous_action

A run-to-run comparison on this VM moves by 10 to 30 percent, more than most single changes are worth. Here both
versions of a script are imported side by side (the 'before' one from `git show`), each builds its networks,
optimizers and a batch the way its `main` does (same seed; SAC's and TD3's through speed.py's `off_policy_steps`),
and their updates run alternately, `--repeats` times: critic, then actor (and alpha) for SAC and TD3 on Hopper-v5's
shapes, the whole update for SAC-discrete on Breakout's.
The medians and the median of the per-round ratios (tree / before) are printed. The 'before' scripts must have the same
loss functions and classes as the tree's; revisions that predate `flatten_parameters` or the fused optimizers are
built as those revisions built them only where this file says so (SAC-discrete's frame scaling and fused Adam).
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # speed.py, whose update steps this times


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def off_policy_updates(m, script: str) -> dict:
    """{'critic update': fn, 'actor update': fn} for SAC or TD3 on Hopper-v5's shapes (11-dim obs, 3-dim actions, batch
    256), the steps built by speed.py's `off_policy_steps`, each drawing its batch from a buffer of random data."""
    import gymnasium as gym
    import numpy as np
    import torch

    import speed

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5")])
    torch.manual_seed(0)
    steps = speed.off_policy_steps(m, script == "sac_continuous_action", envs)
    envs.close()
    rb = m.ReplayBuffer(10_000, 11, 3, "cpu")
    rng = np.random.default_rng(0)
    for _ in range(5_000):
        rb.add(rng.standard_normal((1, 11)), rng.uniform(-1, 1, (1, 3)), rng.standard_normal(1),
               rng.standard_normal((1, 11)), np.zeros(1))
    return {"critic update": lambda: steps["critic"](rb.sample(256)),
            "actor update": lambda: steps["actor"](rb.sample(256))}


def sac_atari_update(m) -> dict:
    """{'update': fn}: one SAC-discrete update (critics, then actor) on a fixed Breakout-shaped batch of 64."""
    import torch

    envs = m.vector_env([m.make_env("BreakoutNoFrameskip-v4")])
    torch.manual_seed(0)
    actor, qf1, qf2 = m.Actor(envs), m.SoftQNetwork(envs), m.SoftQNetwork(envs)
    qf1_target, qf2_target = m.SoftQNetwork(envs).requires_grad_(False), m.SoftQNetwork(envs).requires_grad_(False)
    envs.close()
    scaled = hasattr(m, "network_input")  # revisions with network_input scale frames once per batch, fused Adam
    kwargs = {"fused": True} if scaled else {}
    q_optimizer = torch.optim.Adam([*qf1.parameters(), *qf2.parameters()], lr=3e-4, eps=1e-4, **kwargs)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4, eps=1e-4, **kwargs)
    g = torch.Generator().manual_seed(0)
    frames = [torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8, generator=g) for _ in range(2)]
    raw = (frames[0], torch.randint(0, 4, (64,), generator=g), torch.randn(64, generator=g), frames[1], torch.zeros(64))
    alpha = torch.tensor(0.1)

    def update():
        batch = raw
        if scaled:
            batch = (m.network_input(raw[0]), raw[1], raw[2], m.network_input(raw[3]), raw[4])
        loss, _ = m.compute_loss_q(actor, qf1, qf2, qf1_target, qf2_target, batch, alpha, 0.99)
        q_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        q_optimizer.step()
        loss, _, _ = m.compute_loss_pi(actor, qf1, qf2, batch[0], alpha)
        actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        actor_optimizer.step()
    return {"update": update}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="git revision of the 'before' script")
    parser.add_argument("--scripts", nargs="+", default=["sac_continuous_action", "td3_continuous_action"],
                        choices=["sac_continuous_action", "td3_continuous_action", "sac_atari"])
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 500, 40 for sac_atari)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads; before: {args.before}, after: the working tree")
    with tempfile.TemporaryDirectory() as tmp:
        for script in args.scripts:
            source = subprocess.run(["git", "show", f"{args.before}:{script}.py"], cwd=ROOT, capture_output=True,
                                    text=True)
            if source.returncode != 0:
                sys.exit(f"error: git show {args.before}:{script}.py: {source.stderr.strip()}")
            before_path = os.path.join(tmp, f"{script}_before.py")
            with open(before_path, "w") as f:
                f.write(source.stdout)
            sides = {"before": load(before_path, f"{script}_before"),
                     "after": load(os.path.join(ROOT, f"{script}.py"), f"{script}_after")}
            build = sac_atari_update if script == "sac_atari" else (lambda m: off_policy_updates(m, script))
            parts = {side: build(m) for side, m in sides.items()}
            repeats = args.repeats or (40 if script == "sac_atari" else 500)
            for part in parts["before"]:
                fns = {side: parts[side][part] for side in sides}
                for fn in fns.values():  # warm-up
                    for _ in range(3):
                        fn()
                times = {side: [] for side in sides}
                for i in range(repeats):
                    for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
                        start = time.perf_counter()
                        fns[side]()
                        times[side].append((time.perf_counter() - start) * 1000)
                ratio = statistics.median(a / b for a, b in zip(times["after"], times["before"]))
                print(f"{script}.py {part}: before {statistics.median(times['before']):.3f} ms, after "
                      f"{statistics.median(times['after']):.3f} ms, median ratio after / before {ratio:.3f} "
                      f"({repeats} rounds)")


if __name__ == "__main__":
    main()
