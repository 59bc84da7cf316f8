"""sac_hil_serl.py's learner and actor apart (--role both) against one loop (local), on the test
task PointReach-v0 of tests/hil_env.py with a scripted person who corrects the policy (300 steps,
from step 500 on), 10,000 env steps, seeds 1, 2, 3. It runs a grid of each by benchmark/run.py,
in OUT/<grid>, then prints a table: each seed's final greedy return, their mean ± std, and what the
split changes, per seed: the learner's critic updates per env step (its last charts/utd_ratio; a
local run makes --utd-ratio, 1) and the policy lag (the mean of its charts/policy_lag, in actor
updates). Run again, it skips the finished runs and prints the table.

    python benchmark/hil_split.py                       # local; the actor at 100 Hz, and unlimited
    python benchmark/hil_split.py --control-hz 100 --seeds 1 --out split_runs
    python benchmark/report.py benchmark_runs/hil_split --scripts local split-100hz-both  # curves

A learner updates flat out, so its updates per env step follow the actor's rate and the machine's
speed: 100 Hz gives about one per step on two cores, as local makes. The local grid runs --workers
runs at a time; a split grid one at a time, as each of its runs is two processes that the
comparison needs to have their cores.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402
import run  # noqa: E402

ENV_ID = "hil_env:PointReach-v0"
FLAGS = "--env-kwargs person_budget:300 person_wait:500 --learning-starts 500 --eval-freq 1000 --critic-layer-norm"
FLAGS += " --no-backup-entropy"  # the settings of the page's person comparison on this task


def grids(control_hz: list) -> dict:
    """{grid: its flags}: local, and the split at each control rate (0: unlimited); a run's name
    (--exp-name) says its grid, and a split's learner binds a free port."""
    flags = {"local": f"{FLAGS} --exp-name local"}
    for hz in control_hz:
        name = f"split-{hz:g}hz" if hz else "split-unlimited"
        flags[name] = f"{FLAGS} --exp-name {name} --role both --control-hz {hz:g} --learner-address tcp://127.0.0.1:*"
    return flags


def row(grid: str, root: str) -> str:
    """The table's row of a grid: its learner runs' (a split's actors evaluate too) final returns,
    updates per env step and policy lag."""
    learner = grid if grid == "local" else f"{grid}-both"
    seeds = dict(sorted(report.find_runs(root, [learner])[(learner, ENV_ID.replace(":", "-"))].items()))
    finals = [report.read_scalars(run_dir, report.EVAL_TAG)[-1][1] for run_dir in seeds.values()]
    utd, lag = "1", "0"
    if grid != "local":
        utd = ", ".join(f"{report.read_scalars(d, 'charts/utd_ratio')[-1][1]:.2f}" for d in seeds.values())
        lags = [np.mean([v for _, v in report.read_scalars(d, "charts/policy_lag")]) for d in seeds.values()]
        lag = ", ".join(f"{value:.0f}" for value in lags)
    returns = ", ".join(f"{value:.1f}" for value in finals)
    mean = f"{np.mean(finals):.2f} ± {np.std(finals):.2f}"
    return f"| {grid} | {', '.join(map(str, seeds))} | {returns} | {mean} | {utd} | {lag} |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, default=10_000)
    parser.add_argument(
        "--control-hz",
        nargs="+",
        type=float,
        default=[100.0, 0.0],
        help="the split's actor rates, a grid each (0: unlimited)",
    )
    parser.add_argument("--workers", type=int, default=2, help="local runs at a time (split runs: one)")
    parser.add_argument("--out", default="benchmark_runs/hil_split", help="the grids' root directory")
    args = parser.parse_args(argv)
    tests = os.path.join(os.path.dirname(HERE), "tests")  # hil_env, imported by --env-id in each run
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    flags = grids(args.control_hz)
    for grid, extra in flags.items():
        workers = args.workers if grid == "local" else 1
        grid_args = ["--script", "sac_hil_serl", "--envs", ENV_ID, "--seeds", *map(str, args.seeds)]
        grid_args += ["--total-timesteps", str(args.total_timesteps), "--workers", str(workers)]
        code = run.main([*grid_args, f"--extra={extra}", "--out", os.path.join(args.out, grid)])
        if code:
            return code
    print(
        "\n| run | seeds | final greedy return of each | mean ± std | critic updates per env step | policy lag "
        "(actor updates) |\n|---|---|---|---|---|---|"
    )
    for grid in flags:
        print(row(grid, os.path.join(args.out, grid)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
