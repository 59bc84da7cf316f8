"""Run an env x seed grid of one script with N local worker processes; a grid stopped halfway
resumes where it was.

    python benchmark/run.py --script sac_continuous_action --envs Hopper-v5 --seeds 1 2 --workers 2
    python benchmark/run.py --script a2c --envs CartPole-v1 --seeds 1 2 --dry-run
    # flags passed to every run
    python benchmark/run.py --script acer --envs CartPole-v1 --extra "--ent-coef 0"

First the script's own checks run on each env's flags, as its main() runs them (tyro's parsing, then
setup(): its checks and a trial env): a bad flag or env id ends the grid in the script's message,
exit code 2, before anything is written. Each run lives in its own directory,
OUT/<script>/<env>/seed_<seed>/, and runs there: the script's runs/<run_name>/ (TensorBoard events,
checkpoint, model) is inside it, its output in log.txt. A run exiting 0 leaves a DONE file and is
skipped next time; one that left a checkpoint (the runner passes --checkpoint-freq, and a stopped
runner SIGTERMs its runs, which write one) is continued with --resume; the others start afresh. A
lock file held while a run is going keeps a second runner out of its directory. A failed run is
reported by name with the tail of its log, and the others go on; a run another runner holds is left
to it. A fresh run records its flags in flags.txt; a grid whose flags differ from a recorded run's
is refused, naming the difference (--checkpoint-freq does not count), unless --rerun says to delete
such runs and run them again; a run that wrote nothing (its script refused a flag) binds no grid.
With more than one worker each run gets one torch/OpenMP/MKL thread (oversubscribed threads are
ruinous). --workers is 1 by default, or GPU_WORKERS where torch sees a CUDA GPU.

Then: python benchmark/report.py OUT
"""

import argparse
import fcntl
import glob
import importlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("sac_continuous_action", "sac_hil_serl", "td3_continuous_action", "sac_atari", "a2c", "acer")
# --workers on a CUDA GPU's host by default: captured SAC runs on Hopper-v5 on one H200
# totalled 797, 1,693, 1,377 and 1,496 env steps/s at 1, 4, 8 and 12 at once
# (docs/performance.md, "Several runs on one GPU")
GPU_WORKERS = 4
SQUEUE_PATIENCE = 600  # --wait: seconds of failing squeue calls (a busy or restarting controller) before giving up


def cuda_host() -> bool:
    """Whether torch, in a child so that the runner stays light, sees a CUDA GPU."""
    probe = [sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def default_workers(args) -> int:
    """--workers when not given: GPU_WORKERS for local runs on a CUDA GPU's host, else 1."""
    local = args.backend == "local" and args.run_index is None and not (args.dry_run or args.check_flags)
    return GPU_WORKERS if local and cuda_host() else 1


def run_dir(out: str, script: str, env_id: str, seed: int) -> str:
    return os.path.join(out, script, env_id.replace("/", "-"), f"seed_{seed}")


def flags(args, env_id: str, seed: int) -> list:
    """The flags of this run's fresh start, as flags.txt records them."""
    every = args.checkpoint_freq if args.checkpoint_freq is not None else max(args.total_timesteps // 10, 1)
    return [
        "--env-id",
        env_id,
        "--seed",
        str(seed),
        "--total-timesteps",
        str(args.total_timesteps),
        "--checkpoint-freq",
        str(every),
        *shlex.split(args.extra),
    ]


def checkpoints(directory: str) -> list:
    """The checkpoint the run in this cell left, if any: [path] or []."""
    return glob.glob(os.path.join(directory, "runs", "*", "checkpoint.pt"))


def command(args, env_id: str, seed: int, directory: str, fresh: bool = False) -> list:
    """The script's command line for this run: --resume from its checkpoint if it left one (and is
    not to start afresh), a fresh start otherwise."""
    left = [] if fresh else checkpoints(directory)
    if left:
        return [sys.executable, os.path.join(ROOT, f"{args.script}.py"), "--resume", os.path.abspath(left[0])]
    return [sys.executable, os.path.join(ROOT, f"{args.script}.py"), *flags(args, env_id, seed)]


def changed_flags(args, env_id: str, seed: int) -> str:
    """How this grid's flags differ from those the run in this cell recorded ('' if alike, if none
    recorded, or if the run wrote nothing)."""
    directory = run_dir(args.out, args.script, env_id, seed)
    path = os.path.join(directory, "flags.txt")
    if not os.path.exists(path) or not os.path.isdir(os.path.join(directory, "runs")):  # none, or a run that wrote
        return ""  # nothing (its script refused a flag): there is no result to keep apart
    old, new = ({}, {}), flags(args, env_id, seed)
    for table, tokens in zip(old, (shlex.split(open(path).read()), new)):
        key = ""
        tokens = [part for token in tokens for part in (token.split("=", 1) if token.startswith("--") else [token])]
        for token in tokens:  # {"--flag": "its value", "--switch": ""}
            key = token if token.startswith("--") else key
            table[key] = "" if token == key else f"{table[key]} {token}".strip()
    return "; ".join(
        f"{key} {old[0].get(key, '(unset)')} -> {old[1].get(key, '(unset)')}"
        for key in sorted((old[0].keys() | old[1].keys()) - {"--checkpoint-freq"})  # it changes no result
        if old[0].get(key) != old[1].get(key)
    )


def refused(args) -> int:
    """0, or 2 once the script's own message is printed: each env's flags are parsed by the
    script's Args (tyro prints what it cannot parse) and checked by its setup(), which makes and
    steps a trial env, as its main() does before it writes anything. A grid with a bad flag or env
    id starts no run. It runs in a child (run.py --check-flags), so that the runner stays light."""
    sys.path.insert(0, ROOT)
    module = importlib.import_module(args.script)
    wrap = getattr(module, "observation_wrappers", None) or getattr(module, "actions_in_bounds", None)
    for env_id in args.envs:
        try:
            script_args = tyro.cli(module.Args, args=flags(args, env_id, args.seeds[0]), prog=f"{args.script}.py")
        except SystemExit as e:  # tyro's message is printed
            return e.code or 2
        try:
            module.setup(script_args, module.check_args, module.check_spaces, wrap)
        except module.ConfigError as e:
            print(f"error: {args.script} {env_id}: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
    return 0


def lock(directory: str):
    """The directory's lock file, locked, or BlockingIOError if another runner holds it."""
    f = open(os.path.join(directory, ".lock"), "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise
    return f


class Run:
    """One grid cell going in a subprocess, holding its directory's lock. own_session (the local
    runner's runs): Ctrl-C reaches the runner alone, which stops each run; a Slurm task's run stays
    in the task's group, which Slurm kills."""

    def __init__(self, name: str, directory: str, cmd: list, threads: int | None, own_session=False, differs=None):
        self.name, self.directory, self.started = name, directory, time.time()
        self.stopping = False  # sent the SIGTERM that makes it write a checkpoint and exit
        self.lock = lock(directory)
        if os.path.exists(os.path.join(directory, "DONE")):  # another runner finished it since this one looked
            self.lock.close()
            raise FileExistsError(directory)
        difference = differs() if differs else ""  # another runner started it since, with other flags
        if difference:
            self.lock.close()
            raise ValueError(difference)
        env = dict(os.environ)
        if env.get("PYTHONPATH"):  # each run works in its own folder: a relative entry would name another
            env["PYTHONPATH"] = os.pathsep.join(map(os.path.abspath, env["PYTHONPATH"].split(os.pathsep)))
        if threads:
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.log = open(os.path.join(directory, "log.txt"), "a")
        self.log.write(f"$ {shlex.join(cmd)}\n")
        if "--resume" not in cmd:  # a fresh start: a later grid compares its flags with these
            with open(os.path.join(directory, "flags.txt"), "w") as f:
                f.write(shlex.join(cmd[2:]) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(
            cmd, cwd=directory, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=own_session
        )

    def finish(self) -> int:
        code = self.proc.wait()
        self.log.close()
        if code == 0:
            open(os.path.join(self.directory, "DONE"), "w").close()
        self.lock.close()
        return code


def time_left(durations: list, queued: int, ages: list, workers: int) -> float:
    """Seconds until the grid ends, were each run as long as the mean of those finished: the queued
    runs' whole length and what the running ones (`ages` seconds old) have left, shared by the
    workers, and no less than the longest single run left."""
    mean = sum(durations) / len(durations)
    left = [max(mean - age, 0.0) for age in ages] + [mean] * queued
    return max(sum(left) / workers, max(left, default=0.0))


def tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def run_one(args, env_id: str, seed: int) -> int:
    """One grid cell in the foreground (a Slurm array task): skipped if DONE, refused if locked,
    continued from its checkpoint if it left one; SIGTERM (scancel, or the time limit) makes the run
    write a checkpoint and stop."""
    directory = run_dir(args.out, args.script, env_id, seed)
    if os.path.exists(os.path.join(directory, "DONE")):
        print(f"{env_id} seed {seed} finished before", flush=True)
        return 0
    os.makedirs(directory, exist_ok=True)
    try:
        run = Run(f"{args.script} {env_id} seed {seed}", directory, command(args, env_id, seed, directory), None)
    except BlockingIOError:
        print(f"error: another runner holds {directory}", file=sys.stderr)
        return 1
    except FileExistsError:
        print(f"{env_id} seed {seed} finished by another runner", flush=True)
        return 0
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: run.proc.send_signal(signal.SIGTERM))
    try:
        code = run.finish()
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"{run.name}: exit {code}; log in {directory}/log.txt", flush=True)
    return code


def shell(cmd: list) -> subprocess.CompletedProcess:
    """Run a Slurm command, echoing it and its output."""
    print(f"$ {shlex.join(cmd)}", flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    print(result.stdout + result.stderr, end="", flush=True)
    return result


def submit_slurm(args, grid: list, todo: list, argv: list) -> int:
    """Write a job-array batch script with one task per unfinished run and submit it with sbatch
    (--wait: then follow it with squeue until it ends, and write the report)."""
    print(
        f"{args.script}: {len(grid)} runs in the grid, {len(grid) - len(todo)} finished before, {len(todo)} to submit",
        flush=True,
    )
    if not todo:
        print("nothing to submit", flush=True)
        return 0
    indices = ",".join(str(grid.index(cell)) for cell in todo)
    keep = [a for a in argv if a not in ("--dry-run", "--wait")]
    task = [sys.executable, os.path.abspath(__file__), *keep, "--run-index", "$SLURM_ARRAY_TASK_ID"]
    logs = os.path.abspath(os.path.join(args.out, args.script))
    options = [
        f"--job-name={args.script}-grid",
        f"--array={indices}",
        f"--cpus-per-task={args.cpus_per_task}",
        f"--output={logs}/slurm-%A_%a.out",
        f"--chdir={os.getcwd()}",
    ]
    options += [f"--partition={args.partition}"] * bool(args.partition) + [f"--time={args.time}"] * bool(args.time)
    options += [f"--mem={args.mem}"] * bool(args.mem) + [f"--gres=gpu:{args.gpus_per_task}"] * (args.gpus_per_task > 0)
    batch = "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# {args.script} grid: written by benchmark/run.py --backend slurm; one task per unfinished run",
            *[f"#SBATCH {option}" for option in options],
            "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK MKL_NUM_THREADS=$SLURM_CPUS_PER_TASK",
            "exec " + " ".join(shlex.quote(a) if a != "$SLURM_ARRAY_TASK_ID" else a for a in task),
            "",
        ]
    )
    if args.dry_run:
        print(batch, end="")
        return 0
    os.makedirs(logs, exist_ok=True)
    path = os.path.join(logs, f"grid_{time.strftime('%Y%m%d-%H%M%S')}.sbatch")
    with open(path, "w") as f:
        f.write(batch)
    result = shell(["sbatch", "--parsable", path])
    if result.returncode != 0:
        print(f"error: sbatch failed (exit {result.returncode}); the batch script is {path}", file=sys.stderr)
        return 1
    job = result.stdout.strip().split(";")[0]
    print(f"submitted job array {job}: {len(todo)} tasks; follow with squeue -j {job}", flush=True)
    if not args.wait:
        return 0
    last, failed_since = None, None
    while True:
        result = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True)
        if result.returncode and "Invalid job id" not in result.stderr:  # the controller busy or restarting: ask again
            failed_since = failed_since or time.monotonic()
            if time.monotonic() - failed_since > SQUEUE_PATIENCE:
                print(
                    f"error: squeue failed for {SQUEUE_PATIENCE} s ({' '.join(result.stderr.split())}); job array "
                    f"{job} may still run: follow it with squeue -j {job}, then run this command again",
                    file=sys.stderr,
                )
                return 1
            time.sleep(2)
            continue
        failed_since, queue = None, "" if result.returncode else result.stdout  # an unknown job id: it has ended
        if queue != last:
            shell(["squeue", "-j", job])
            last = queue
        if not queue.strip():
            break
        time.sleep(2)
    missing = [
        f"{env_id} seed {seed}"
        for env_id, seed in todo
        if not os.path.exists(os.path.join(run_dir(args.out, args.script, env_id, seed), "DONE"))
    ]
    if missing:
        print(f"{len(missing)} runs did not finish: {', '.join(missing)}; see {logs}/slurm-{job}_*.out", flush=True)
        return 1
    print(f"all {len(grid)} runs finished", flush=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report

    return report.main([args.out])


OWN_FLAGS = ("--env-id", "--seed", "--total-timesteps", "--checkpoint-freq")  # what run.py sets for each run


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    i = 0
    while i < len(argv) - 1:  # argparse takes a value that starts with "--" for a flag: "--extra X" as "--extra=X"
        if argv[i] == "--extra":
            argv[i : i + 2] = [f"--extra={argv[i + 1]}"]
        i += 1
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", required=True, choices=SCRIPTS)
    parser.add_argument("--envs", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, required=True)
    parser.add_argument(
        "--workers", type=int, default=None, help=f"runs at a time (default: 1, or {GPU_WORKERS} on a CUDA GPU's host)"
    )
    parser.add_argument("--extra", default="", help="flags passed to every run, as one string")
    parser.add_argument(
        "--checkpoint-freq", type=int, default=None, help="passed to every run (default: a tenth of --total-timesteps)"
    )
    parser.add_argument("--out", default="benchmark_runs", help="the grid's root directory")
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="delete the runs whose recorded flags differ from this grid's, and run them again",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the commands of the runs still to do (slurm: the batch script), run nothing",
    )
    parser.add_argument(
        "--backend",
        choices=["local", "slurm"],
        default="local",
        help="local worker processes, or one Slurm job array with a task per unfinished run",
    )
    slurm = parser.add_argument_group("slurm backend")
    slurm.add_argument("--partition", default=None, help="sbatch --partition (default: the cluster's default)")
    slurm.add_argument("--cpus-per-task", type=int, default=1, help="CPUs of each task; the run gets as many threads")
    slurm.add_argument("--gpus-per-task", type=int, default=0, help="GPUs of each task (sbatch --gres=gpu:N)")
    slurm.add_argument("--time", default=None, help="time limit of each task, e.g. 2-00:00:00 (sbatch --time)")
    slurm.add_argument("--mem", default=None, help="memory of each task, e.g. 8G (sbatch --mem)")
    slurm.add_argument("--wait", action="store_true", help="wait for the array to end, then write the report")
    slurm.add_argument("--run-index", type=int, default=None, help=argparse.SUPPRESS)  # what each array task runs
    parser.add_argument("--check-flags", action="store_true", help=argparse.SUPPRESS)  # refused(), in a child
    args = parser.parse_args(argv)
    if args.workers is None:
        args.workers = default_workers(args)
    try:
        extra = shlex.split(args.extra)
    except ValueError as e:  # an unterminated quote
        print(f"error: --extra {args.extra!r} does not split into flags ({e}): close its quotes", file=sys.stderr)
        return 2
    own = [flag for flag in extra if flag.split("=")[0].replace("_", "-") in OWN_FLAGS]  # tyro reads --env_id too
    slurm = dict(partition=None, cpus_per_task=1, gpus_per_task=0, time=None, mem=None, wait=False)
    slurm_only = ["--" + key.replace("_", "-") for key, default in slurm.items() if getattr(args, key) != default]
    twice = sorted(
        {str(seed) for seed in args.seeds if args.seeds.count(seed) > 1}
        | {e for e in args.envs if args.envs.count(e) > 1}
    )
    for bad, why in [
        (
            args.workers < 1
            or args.total_timesteps < 1
            or (args.checkpoint_freq is not None and args.checkpoint_freq < 0),
            "--workers and --total-timesteps must be at least 1, --checkpoint-freq non-negative",
        ),
        (
            own,
            f"--extra sets {', '.join(own)}, which run.py sets for each run: "
            "use --envs, --seeds, --total-timesteps and --checkpoint-freq",
        ),
        (twice, f"--envs and --seeds list {', '.join(map(str, twice))} twice: each run once"),
        (
            args.cpus_per_task < 1 or args.gpus_per_task < 0,
            "--cpus-per-task must be at least 1 and --gpus-per-task at least 0",
        ),
        (args.backend == "local" and slurm_only, f"{', '.join(slurm_only)} need --backend slurm"),
        (os.path.exists(args.out) and not os.path.isdir(args.out), f"--out {args.out} is a file: pass a directory"),
    ]:
        if bad:
            print(f"error: {why}", file=sys.stderr)
            return 2

    grid = [(env_id, seed) for env_id in args.envs for seed in args.seeds]
    if args.run_index is not None:
        return run_one(args, *grid[args.run_index])
    if args.check_flags:
        return refused(args)
    code = subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--check-flags"]).returncode
    if code:
        return code
    if not args.dry_run:  # the grid's folder, made and written to before any run starts
        try:
            os.makedirs(args.out, exist_ok=True)
            tempfile.TemporaryFile(dir=args.out).close()
        except OSError as e:
            print(f"error: --out {args.out}: {e.strerror}: pass a directory that can be written", file=sys.stderr)
            return 2
    rerun = []  # the cells --rerun deletes and runs afresh
    for env_id, seed in grid:
        difference = changed_flags(args, env_id, seed)
        directory = run_dir(args.out, args.script, env_id, seed)
        if difference and not args.rerun:
            print(
                f"error: {directory} ran with other flags ({difference}): pass --rerun to delete it and run it "
                "again with these, or choose another --out",
                file=sys.stderr,
            )
            return 2
        if difference:
            rerun.append((env_id, seed))
        if difference and not args.dry_run:
            try:  # a run another runner is still training is not deleted under it
                with lock(directory):
                    shutil.rmtree(directory)
            except BlockingIOError:
                print(f"error: --rerun: another runner holds {directory}; wait for it, or stop it", file=sys.stderr)
                return 2
    todo = [
        (env_id, seed)
        for env_id, seed in grid
        if (env_id, seed) in rerun
        or not os.path.exists(os.path.join(run_dir(args.out, args.script, env_id, seed), "DONE"))
    ]
    if args.backend == "slurm":
        return submit_slurm(args, grid, todo, argv)
    print(
        f"{args.script}: {len(grid)} runs in the grid, {len(grid) - len(todo)} finished before, {len(todo)} to run",
        flush=True,
    )
    threads = 1 if args.workers > 1 else None
    if args.dry_run:
        pinned = f"OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} " if threads else ""  # as Run sets them
        for env_id, seed in todo:
            directory = run_dir(args.out, args.script, env_id, seed)
            cmd = command(args, env_id, seed, directory, fresh=(env_id, seed) in rerun)
            print(f"cd {shlex.quote(directory)} && {pinned}{shlex.join(cmd)}")
        return 0

    stop = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: stop.append(signum)) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    running, failed, held, durations = [], [], [], []
    queue = list(todo)
    try:
        while (queue and not stop) or running:
            while queue and not stop and len(running) < args.workers:
                env_id, seed = queue.pop(0)
                directory = run_dir(args.out, args.script, env_id, seed)
                os.makedirs(directory, exist_ok=True)
                try:
                    running.append(
                        Run(
                            f"{args.script} {env_id} seed {seed}",
                            directory,
                            command(args, env_id, seed, directory),
                            threads,
                            own_session=True,
                            differs=lambda: changed_flags(args, env_id, seed),
                        )
                    )
                except BlockingIOError:
                    held.append(f"{args.script} {env_id} seed {seed}")
                    print(f"skipped {env_id} seed {seed}: another runner holds {directory}", flush=True)
                except FileExistsError:
                    print(f"{env_id} seed {seed} finished by another runner", flush=True)
                except ValueError as e:  # not continued with these flags: its results would mix two grids
                    failed.append(f"{args.script} {env_id} seed {seed}")
                    print(f"skipped {env_id} seed {seed}: another runner started it with other flags ({e})", flush=True)
            for run in running if stop else []:
                if run.proc.poll() is None and not run.stopping:  # once: a second ends it as it closes
                    run.proc.send_signal(signal.SIGTERM)  # it writes a checkpoint and exits
                    run.stopping = True
            for run in [r for r in running if r.proc.poll() is not None]:
                running.remove(run)
                code = run.finish()
                if code == 0:
                    durations.append(time.time() - run.started)
                    ages = [time.time() - r.started for r in running]
                    eta = time_left(durations, len(queue), ages, args.workers)
                    print(
                        f"[{len(durations) + len(grid) - len(todo)}/{len(grid)}] {run.name} finished in "
                        f"{time.time() - run.started:.0f} s; about {eta / 60:.1f} min left",
                        flush=True,
                    )
                elif stop and code in (128 + signal.SIGTERM, 128 + signal.SIGINT, -signal.SIGTERM, -signal.SIGINT):
                    wrote = checkpoints(run.directory)
                    then = "resumes from its checkpoint" if wrote else "starts afresh (it wrote no checkpoint)"
                    print(f"{run.name} stopped (exit {code}); it {then} next time", flush=True)
                else:
                    failed.append(run.name)
                    print(
                        f"FAILED {run.name} (exit {code}); the end of {run.directory}/log.txt:\n"
                        f"{tail(os.path.join(run.directory, 'log.txt'))}",
                        flush=True,
                    )
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop:
        print(f"stopped by signal {stop[0]}: run the same command again to finish the grid", flush=True)
        return 128 + stop[0]
    if held:
        print(f"{len(held)} of {len(todo)} runs left to the runner that holds them: {', '.join(held)}", flush=True)
    if failed:
        print(f"{len(failed)} of {len(todo)} runs failed: {', '.join(failed)}", flush=True)
    if held or failed:
        return 1
    report = shlex.join(["python", os.path.relpath(os.path.join(ROOT, "benchmark", "report.py")), args.out])
    print(f"all {len(grid)} runs finished; report: {report}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
