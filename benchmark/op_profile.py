"""Where SAC's and TD3's update time goes, operator by operator: the profile to read before trying a speed change.

    python benchmark/op_profile.py                                    # TD3's critic and actor updates
    python benchmark/op_profile.py --script sac_continuous_action --top 25

Each update (built as `benchmark/update_ab.py` builds it: the script's own losses, flat parameters and fused Adam, on
Hopper-v5's shapes, batch 256) runs `--steps` times under `torch.profiler`, `--rounds` times; the round with the least
total self CPU time is printed (this VM's slow spells otherwise inflate single operators many times over), as self CPU
microseconds per update for the `--top` operators, with the share taken by matrix products. Shapes are not recorded:
recording them slowed the elementwise operators of the first rounds tens of times here.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # update_ab.py, speed.py
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def profile_update(run, steps: int, rounds: int) -> tuple[float, list]:
    """(total self CPU us per call, [(operator, self us per call, calls per call)]) of the quietest of `rounds`."""
    from torch.profiler import profile

    for _ in range(20):  # warm-up: optimizer state, allocator, OpenMP threads
        run()
    best = None
    for _ in range(rounds):
        with profile() as prof:
            for _ in range(steps):
                run()
        events = [(e.key, e.self_cpu_time_total / steps, e.count / steps) for e in prof.key_averages()]
        total = sum(us for _, us, _ in events)
        if best is None or total < best[0]:
            best = (total, sorted(events, key=lambda e: -e[1]))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--script", choices=("td3_continuous_action", "sac_continuous_action"),
                        default="td3_continuous_action")
    parser.add_argument("--steps", type=int, default=200, help="updates per profiled round")
    parser.add_argument("--rounds", type=int, default=4, help="profiled rounds; the quietest is printed")
    parser.add_argument("--top", type=int, default=15, help="operators printed per update")
    args = parser.parse_args()
    if min(args.steps, args.rounds, args.top) < 1:
        parser.error("--steps, --rounds and --top must be at least 1")
    import torch

    import update_ab

    sys.path.insert(0, ROOT)
    updates = update_ab.off_policy_updates(__import__(args.script), args.script)
    print(f"{args.script}, torch {torch.__version__}, {torch.get_num_threads()} threads; quietest of {args.rounds} "
          f"rounds of {args.steps} updates")
    for name, run in updates.items():
        total, events = profile_update(run, args.steps, args.rounds)
        matmul = sum(us for key, us, _ in events if key in MATMULS)
        print(f"\n{name}: {total:.0f} us self CPU per update; matrix products {matmul:.0f} us "
              f"({100 * matmul / total:.0f}%), {sum(n for _, _, n in events):.0f} profiled events")
        for key, us, calls in events[: args.top]:
            print(f"  {us:8.1f} us  x{calls:<5.1f} {key[:80]}")


if __name__ == "__main__":
    main()
