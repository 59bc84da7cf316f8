"""Learning before and after a change: the same scripts at two git revisions, over seeds, on cheap tasks.

    python benchmark/parity.py --before 19fcde5 --scripts sac_continuous_action td3_continuous_action \
        --envs Pendulum-v1:5000 InvertedPendulum-v5:10000 --seeds 1 2 3 --workers 2 --out parity.md
    python benchmark/parity.py --before 57b57fc --scripts sac_atari --envs CartPole-v1:6000 --seeds 1 2 3 4 5 \
        --flags='--update-frequency 1 --target-network-frequency 1 --tau 0.005 --batch-size 64 --buffer-size 6000'

Each (script, env, seed) runs at the `--before` revision (taken with `git show`; every script stands alone) and at the
working tree, as fresh processes with torch and OpenMP pinned to one thread, all with `--learning-starts
--eval-freq --eval-episodes` as given and with `--flags`. The deterministic evaluations the scripts print are the
learning curve. For each env and eval step the Markdown table gives mean ± std over seeds before and after, and the
difference of the means in units of the larger of the two stds ("within seed noise" reads as |diff| below 1).
"""

import argparse
import concurrent.futures
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL_LINE = re.compile(r"^step ([\d,]+): (?:final )?eval/episodic_return (-?[\d.]+)", re.M)


def run(script_path: str, env_id: str, steps: int, seed: int, args, side: str) -> dict:
    """Train once; returns {env step: eval return}."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, script_path, "--env-id", env_id, "--total-timesteps", str(steps), "--seed", str(seed),
           "--learning-starts", str(args.learning_starts), "--eval-freq", str(args.eval_freq), "--eval-episodes",
           str(args.eval_episodes), *shlex.split(args.flags),
           *shlex.split(args.after_flags if side == "after" else "")]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return {int(step.replace(",", "")): float(value) for step, value in EVAL_LINE.findall(out.stdout)}


def mean_std(values):
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="git revision of the 'before' scripts")
    parser.add_argument("--scripts", nargs="+", default=["sac_continuous_action", "td3_continuous_action"])
    parser.add_argument("--envs", nargs="+", default=["Pendulum-v1:5000", "InvertedPendulum-v5:10000"],
                        help="ENV_ID:TOTAL_TIMESTEPS")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--eval-freq", type=int, default=1_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="runs at once (one thread each)")
    parser.add_argument("--flags", default="", help="more flags for every run, both sides, e.g. --flags='--tau 0.005'")
    parser.add_argument("--after-flags", default="", help="more flags for the working tree's runs only, e.g. "
                        "--after-flags=--compile (with --before HEAD: the compiled path against the eager one)")
    parser.add_argument("--out", default=None, help="write the Markdown tables here as well")
    args = parser.parse_args()
    envs = [(e.split(":")[0], int(e.split(":")[1])) for e in args.envs if e.count(":") == 1]
    if len(envs) != len(args.envs) or args.workers < 1 or len(args.seeds) < 2:
        sys.exit("error: --envs take ENV_ID:TOTAL_TIMESTEPS, --workers at least 1, --seeds at least two")

    with tempfile.TemporaryDirectory() as before_dir:
        paths = {}
        for script in args.scripts:
            source = subprocess.run(["git", "show", f"{args.before}:{script}.py"], cwd=ROOT, capture_output=True,
                                    text=True)
            if source.returncode != 0:
                sys.exit(f"error: git show {args.before}:{script}.py: {source.stderr.strip()}")
            paths[(script, "before")] = os.path.join(before_dir, f"{script}.py")
            with open(paths[(script, "before")], "w") as f:
                f.write(source.stdout)
            paths[(script, "after")] = os.path.join(ROOT, f"{script}.py")
        jobs = [(script, env_id, steps, seed, side) for script in args.scripts for env_id, steps in envs
                for seed in args.seeds for side in ("before", "after")]
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
            futures = {job: pool.submit(run, paths[(job[0], job[4])], *job[1:4], args, job[4]) for job in jobs}
            results = {}
            for job, future in futures.items():
                results[job] = future.result()
                print(f"{job}: final {results[job][max(results[job])]:.1f}", file=sys.stderr, flush=True)

    lines = [f"Before: `{args.before}`; after: the working tree. Seeds {args.seeds}; deterministic evaluation over "
             f"{args.eval_episodes} episodes every {args.eval_freq:,} env steps; learning starts at "
             f"{args.learning_starts:,}; one torch thread per run{f'; flags `{args.flags}`' if args.flags else ''}"
             f"{f'; the working tree with `{args.after_flags}`' if args.after_flags else ''}.\n"]
    for script in args.scripts:
        for env_id, steps in envs:
            lines += [f"`{script}.py`, {env_id}:\n", "| env step | before mean ± std | after mean ± std | diff / std |",
                      "|---|---|---|---|"]
            for step in sorted(results[(script, env_id, steps, args.seeds[0], "before")]):
                (mb, sb), (ma, sa) = (mean_std([results[(script, env_id, steps, seed, side)][step]
                                                for seed in args.seeds]) for side in ("before", "after"))
                lines.append(f"| {step:,} | {mb:.1f} ± {sb:.1f} | {ma:.1f} ± {sa:.1f} | "
                             f"{(ma - mb) / max(sb, sa, 1e-9):+.2f} |")
            finals = {side: ", ".join(f"{results[(script, env_id, steps, seed, side)][steps]:.1f}"
                                      for seed in args.seeds) for side in ("before", "after")}
            lines.append(f"\nFinal per seed: before {finals['before']}; after {finals['after']}.\n")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
