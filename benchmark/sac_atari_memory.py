"""Memory growth of the process per 10k Breakout steps: sac_atari.py's replay buffer against SB3's ReplayBuffer, which
stores the obs and next_obs stacks of every transition (what CleanRL's sac_atari.py uses).

    python benchmark/sac_atari_memory.py            # 30k random-action steps per buffer, each in a fresh process

Both buffers commit memory only as they are written, so the resident set size (VmRSS) grows with the steps stored.
Ours has the default 1M capacity. SB3's has 100k: at 1M it asks for two 26.3 GiB arrays, which numpy refuses on a
24 GB machine ("Unable to allocate 26.3 GiB"); capacity does not change the growth per step. Prints a Markdown table.
"""

import os
import subprocess
import sys

STEPS, EVERY = 30_000, 10_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


def measure(kind: str) -> list:
    """RSS (MB) after 0, 10k, 20k, 30k stored steps, in this process."""
    sys.path.insert(0, ROOT)
    import numpy as np
    import sac_atari as sa

    envs = sa.vector_env([sa.make_env("BreakoutNoFrameskip-v4")])
    obs, _ = envs.reset(seed=0)
    if kind == "ours":
        rb = sa.ReplayBuffer(1_000_000, 1, envs.single_observation_space, "cpu")
        rb.start(obs)
    else:
        from stable_baselines3.common.buffers import ReplayBuffer

        rb = ReplayBuffer(100_000, envs.single_observation_space, envs.single_action_space, "cpu",
                          optimize_memory_usage=False, handle_timeout_termination=False)
    rng = np.random.default_rng(0)
    readings = [rss_mb()]
    for step in range(1, STEPS + 1):
        actions = rng.integers(0, envs.single_action_space.n, 1)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next_obs = sa.final_observations(next_obs, infos)
        if kind == "ours":
            rb.add(actions, rewards, real_next_obs, terminations, terminations | truncations, next_obs)
        else:
            rb.add(obs, real_next_obs, actions, rewards, terminations, [{}])
        obs = next_obs
        if step % EVERY == 0:
            readings.append(rss_mb())
    return readings


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(" ".join(f"{r:.1f}" for r in measure(sys.argv[1])))
        sys.exit()
    print("| buffer | RSS after 0 / 10k / 20k / 30k steps (MB) | growth per 10k steps (MB) | bytes per step |")
    print("|---|---|---|---|")
    for kind, name in (("ours", "sac_atari.py (each frame once)"), ("sb3", "SB3 ReplayBuffer (obs + next_obs stacks)")):
        out = subprocess.run([sys.executable, __file__, kind], capture_output=True, text=True, check=True).stdout
        readings = [float(x) for x in out.split("\n")[-2].split()]
        growth = (readings[-1] - readings[1]) / (len(readings) - 2)
        print(f"| {name} | {' / '.join(f'{r:.0f}' for r in readings)} | {growth:.1f} | {growth * 2**20 / EVERY:,.0f} |")
