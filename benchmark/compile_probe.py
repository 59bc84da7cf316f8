"""Why `--compile` does not pay on this CPU: eager against torch.compile on the twin critics' core, with a kernel profile.

    python benchmark/compile_probe.py            # about a minute, most of it compiling
    python benchmark/compile_probe.py --sac-atari --repeats 80   # SAC-discrete's whole update on Breakout's shapes

The function is the shape of SAC's and TD3's critic update at its heaviest: two 256-unit ReLU layers of a two-member
ensemble (`baddbmm`, batch 256), summed, then backward. Eager and compiled steps alternate, 300 each, on the threads
torch has (set OMP_NUM_THREADS); the medians and their ratio are printed, then the top entries of a `torch.profiler`
table for each, with inductor's generated kernels named (`graph_*_cpp_fused_*`). With --sac-atari the function is
instead `sac_atari.py`'s whole update (built as `benchmark/update_ab.py` builds it) and no profile is printed.
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--sac-atari", action="store_true", help="time sac_atari.py's update instead")
    args = parser.parse_args()
    import torch._inductor.config

    torch._inductor.config.cpp.enable_kernel_profile = True  # name inductor's kernels in the profile
    torch.manual_seed(0)
    x = torch.randn(2, 256, 256)
    w = torch.randn(2, 256, 256, requires_grad=True)
    b = torch.randn(2, 1, 256, requires_grad=True)

    def forward(x):
        h = torch.relu(torch.baddbmm(b, x, w))
        return torch.relu(torch.baddbmm(b, h, w)).sum()

    def step(fn):
        def run():
            w.grad = b.grad = None
            fn(x).backward()
        return run

    steps = {"eager": step(forward), "compiled": step(torch.compile(forward))}
    if args.sac_atari:
        import os
        import sys

        sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(__file__)]
        import sac_atari
        import update_ab

        steps = {"eager": update_ab.sac_atari_update(sac_atari)["update"],
                 "compiled": torch.compile(update_ab.sac_atari_update(sac_atari)["update"])}
    start = time.perf_counter()
    steps["compiled"]()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; first compiled call "
          f"{time.perf_counter() - start:.1f} s")
    times = {name: [] for name in steps}
    for i in range(args.repeats):
        for name in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")):
            start = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - start)
    medians = {name: sorted(t)[len(t) // 2] * 1e3 for name, t in times.items()}
    print(f"{'sac_atari update' if args.sac_atari else 'forward + backward'}, median of {args.repeats}: eager "
          f"{medians['eager']:.2f} ms, compiled {medians['compiled']:.2f} ms "
          f"({medians['compiled'] / medians['eager']:.3f}x)")
    if args.sac_atari:
        return
    from torch.profiler import profile

    for name, run in steps.items():
        with profile() as prof:
            for _ in range(50):
                run()
        print(f"\n{name}, self CPU time per step (under the profiler):")
        for event in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]:
            print(f"  {event.self_cpu_time_total / 50:8.1f} us  x{event.count // 50}  {event.key[:80]}")


if __name__ == "__main__":
    main()
