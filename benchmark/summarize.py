"""Summarize finished runs as a markdown table: the last evaluation (deterministic policy) and the mean of the last
K training episodes (10, or --last-episodes K; the PPO paper's A2C/ACER table uses 100), each as mean +- standard
deviation over seeds.

    python benchmark/summarize.py benchmark_runs --exp-name sac_continuous_action   # run dirs anywhere below
    python benchmark/summarize.py benchmark_runs --exp-name a2c --last-episodes 100
"""

import glob
import os
import sys
from collections import defaultdict

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def last_values(run_dir: str, last_episodes: int = 10):
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if "eval/episodic_return" not in tags:
        return None
    evals = acc.Scalars("eval/episodic_return")
    train = [e.value for e in acc.Scalars("charts/episodic_return")[-last_episodes:]] if "charts/episodic_return" in tags else []
    return evals[-1].step, evals[-1].value, float(np.mean(train)) if train else float("nan")


def main(root: str, exp_name: str, last_episodes: int = 10) -> None:
    table = defaultdict(list)
    for run_dir in sorted(glob.glob(os.path.join(root, "**", f"*__{exp_name}__*"), recursive=True)):
        env_id = os.path.basename(run_dir).split("__")[0]
        values = last_values(run_dir, last_episodes)
        if values:
            table[env_id].append(values)
    print(f"| env | steps | seeds | det-eval (last) | train-ret (last {last_episodes} episodes) |")
    print("|---|---|---|---|---|")
    for env_id, rows in table.items():
        steps, evals, train = zip(*rows)
        print(f"| {env_id} | {max(steps):,} | {len(rows)} | {np.mean(evals):.1f} ± {np.std(evals):.1f} "
              f"| {np.mean(train):.1f} ± {np.std(train):.1f} |")


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else "runs"
    exp = sys.argv[sys.argv.index("--exp-name") + 1] if "--exp-name" in sys.argv else "sac_continuous_action"
    last = int(sys.argv[sys.argv.index("--last-episodes") + 1]) if "--last-episodes" in sys.argv else 10
    main(root, exp, last)
