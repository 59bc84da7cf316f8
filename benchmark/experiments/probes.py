"""Small probes behind the README's "What is left" (Performance): settings that could speed up TD3's updates on a CPU.

    python benchmark/experiments/probes.py spin        # how long libgomp's idle threads spin, per GOMP_SPINCOUNT
    python benchmark/experiments/probes.py mkl         # MKL on two threads while torch's own operators use one?
    python benchmark/experiments/probes.py bf16        # TD3's updates under bfloat16 autocast against float32
    python benchmark/experiments/probes.py cpp-wrapper # TD3's critic update compiled, default and cpp_wrapper
    python benchmark/experiments/probes.py bool-mask   # inductor's kernel for a ReLU's boolean mask against eager's

Each prints medians of interleaved repeats. `spin` and `mkl` start one child process per setting, since OpenMP reads
its environment once, at start. These are experiments, not part of the scripts: see the README for what was kept.
"""

import argparse
import ctypes
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmark")]  # the scripts, and speed.py's and update_ab.py's helpers
SETTINGS = {"spin": ["default", "300000", "1000000", "3000000"], "mkl": ["two", "one", "mixed"],
            "cpp-wrapper": ["off", "on"]}  # one child process each: OpenMP and inductor read their settings once


def medians_us(fns: dict, repeats: int) -> dict:
    """Median microseconds of each callable, the callables taking turns `repeats` times after 20 warm-up rounds."""
    from speed import median_ms

    median_ms(fns, 20)
    return {name: ms * 1e3 for name, ms in median_ms(fns, repeats).items()}


def spin_child(setting: str) -> None:
    """CPU time burnt while the main thread sleeps 0.5 s right after a two-thread matmul: the worker's spinning."""
    import torch

    x = torch.randn(512, 512)
    burnt = []
    for _ in range(5):
        x @ x
        start = time.process_time()
        time.sleep(0.5)
        burnt.append((time.process_time() - start) * 1e3)
    print(f"GOMP_SPINCOUNT={setting}: CPU ms spent during each 0.5 s sleep "
          + ", ".join(f"{ms:.1f}" for ms in burnt))


def mkl_child(mode: str) -> None:
    """bmm, mm and two elementwise operators on TD3's shapes with two threads, one, or one for torch and two for MKL."""
    import torch

    if mode != "two":
        torch.set_num_threads(1)
    if mode == "mixed":  # MKL's per-thread setting, exported by libtorch_cpu
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        lib.MKL_Set_Num_Threads_Local(2)
    a, w, x = torch.randn(2, 256, 256), torch.randn(2, 256, 256), torch.randn(256, 256)
    us = medians_us({"bmm (2,256,256)": lambda: torch.bmm(a, w), "mm 256": lambda: x @ x,
                     "relu (2,256,256)": lambda: torch.relu(a), "sum over batch": lambda: a.sum(1)}, 300)
    print(f"{mode:>6}: " + ", ".join(f"{name} {t:.1f} us" for name, t in us.items()))


def td3_updates():
    import td3_continuous_action
    import update_ab

    return update_ab.off_policy_updates(td3_continuous_action, "td3_continuous_action")


def bf16() -> None:
    import torch

    updates = td3_updates()

    def autocast(fn):
        def run():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                fn()
        return run

    us = medians_us({"critic float32": updates["critic update"], "critic bf16": autocast(updates["critic update"]),
                     "actor float32": updates["actor update"], "actor bf16": autocast(updates["actor update"])}, 300)
    print(", ".join(f"{name} {t / 1e3:.3f} ms" for name, t in us.items()))


def cpp_wrapper_child(setting: str) -> None:
    import torch
    import torch._inductor.config

    on = setting == "on"
    torch._inductor.config.cpp_wrapper = on
    updates = td3_updates()
    eager = updates["critic update"]
    compiled = torch.compile(eager)
    start = time.perf_counter()
    compiled()
    compiled()
    seconds = time.perf_counter() - start
    us = medians_us({"eager": eager, "compiled": compiled}, 300)
    print(f"cpp_wrapper={on}: compiled in {seconds:.1f} s; critic update eager {us['eager'] / 1e3:.3f} ms, compiled "
          f"{us['compiled'] / 1e3:.3f} ms ({us['compiled'] / us['eager']:.3f}x)")


def bool_mask() -> None:
    """`x <= 0` on a 256x256 float tensor, the mask a ReLU's backward needs, eager and compiled; with ReLU beside it,
    and with the mask as float32, which inductor stores without the boolean path."""
    import torch

    x = torch.randn(256, 256)
    fns = {"mask": lambda x: x <= 0, "relu and mask": lambda x: (torch.relu(x), x <= 0),
           "relu and float mask": lambda x: (torch.relu(x), (x <= 0).float())}
    timed = {}
    for name, fn in fns.items():
        timed[f"{name}, eager"] = lambda fn=fn: fn(x)
        compiled = torch.compile(fn)
        timed[f"{name}, compiled"] = lambda fn=compiled: fn(x)
    us = medians_us(timed, 300)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads: "
          + ", ".join(f"{name} {t:.1f} us" for name, t in us.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("probe", choices=["spin", "mkl", "bf16", "cpp-wrapper", "bool-mask"])
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        {"spin": spin_child, "mkl": mkl_child, "cpp-wrapper": cpp_wrapper_child}[args.probe](args.child)
        return
    if args.probe in ("bf16", "bool-mask"):
        return {"bf16": bf16, "bool-mask": bool_mask}[args.probe]()
    for setting in SETTINGS[args.probe]:
        env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
        if args.probe == "spin" and setting != "default":
            env["GOMP_SPINCOUNT"] = setting
        subprocess.run([sys.executable, __file__, args.probe, "--child", setting], env=env, check=True)


if __name__ == "__main__":
    main()
