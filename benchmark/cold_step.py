"""How much slower one env step is when other work ran just before it: why per-part timings taken in isolation
understate a training loop's non-update time on this machine.

    python benchmark/cold_step.py                       # Hopper-v5, 600 steps per case, about 30 seconds
    python benchmark/cold_step.py --env-id Pendulum-v1 --steps 200

In a training loop every env step follows an update of a few milliseconds, so the step's code and data (the
gymnasium wrappers, the env's Python and numpy, MuJoCo) come back cold. Each case here runs something before every
timed step of a one-env SyncVectorEnv, as the scripts build it (RecordEpisodeStatistics, SAME_STEP autoreset), and
prints the median step time in microseconds:

- back to back: nothing in between (what a microbenchmark of the env step measures);
- busy Python 1 ms and 5 ms: a pure-Python loop on the clock, which touches almost no memory;
- sleep 5 ms: the process idle;
- matmul 5 ms: (2, 256, 256) batched matrix products, the bulk of a SAC or TD3 update, on torch's threads.

The case's own work is left out of the timing. Torch's threads follow OMP_NUM_THREADS (2 by default here, as speed.py
gives SAC and TD3).
"""

import argparse
import os
import statistics
import sys
import time


def cases(gap_s: float) -> dict:
    """{name: function run before each timed step}."""
    import torch

    x, w = torch.randn(2, 256, 256), torch.randn(2, 256, 256)

    def busy(seconds):
        def run():
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                pass
        return run

    def matmul():
        start = time.perf_counter()
        while time.perf_counter() - start < gap_s:
            torch.bmm(x, w)

    return {"back to back": lambda: None, f"busy Python {gap_s / 5 * 1e3:g} ms": busy(gap_s / 5),
            f"busy Python {gap_s * 1e3:g} ms": busy(gap_s), f"sleep {gap_s * 1e3:g} ms": lambda: time.sleep(gap_s),
            f"matmul {gap_s * 1e3:g} ms": matmul}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=600, help="timed env steps per case")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="length of the work before each step")
    args = parser.parse_args()
    if args.steps < 10 or args.gap_ms <= 0:
        sys.exit("error: --steps must be at least 10 and --gap-ms above 0")
    import gymnasium as gym
    import numpy as np
    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import td3_continuous_action as script  # its make_env and vector_env: the training loop's env

    try:
        script.check_env(args.env_id)
    except script.ConfigError as error:
        sys.exit(f"error: {error}")
    envs = script.vector_env([script.make_env(args.env_id)])
    envs.reset(seed=0)
    space = envs.single_action_space
    rng = np.random.default_rng(0)
    print(f"{args.env_id}, torch {torch.__version__} on {torch.get_num_threads()} threads, gymnasium {gym.__version__}; "
          f"median of {args.steps} steps per case")
    print("| before each step | env step (µs) |\n|---|---|")
    for name, before in cases(args.gap_ms / 1e3).items():
        times = []
        for _ in range(args.steps):
            actions = rng.uniform(space.low, space.high, (1, *space.shape)).astype(space.dtype)
            before()
            start = time.perf_counter()
            envs.step(actions)
            times.append(time.perf_counter() - start)
        print(f"| {name} | {statistics.median(times) * 1e6:.0f} |", flush=True)
    envs.close()


if __name__ == "__main__":
    main()
