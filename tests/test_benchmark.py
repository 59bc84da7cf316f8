"""benchmark/run.py, report.py and speed.py: a tiny a2c grid runs to the end, a second run does
nothing, a runner stopped mid-grid finishes the rest when started again, failures are reported
and do not stop the others, a locked run is left alone, a run its script refused at once pins no
flags, --help is whole, the report's PNG and table match values read straight from the event
files; speed.py's table and notes against SB3 and against a git revision, and its one-line
refusals."""

import argparse
import fcntl
import glob
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from conftest import ROOT

GRID = [
    "--script",
    "a2c",
    "--envs",
    "CartPole-v1",
    "--total-timesteps",
    "400",
    "--extra",
    "--eval-freq 200 --eval-episodes 2 --num-envs 4",
]


def run_py(*args, script="run.py", timeout=600, **kwargs):
    """benchmark/run.py (or another `script` there) with these arguments in a process of its own,
    its output captured."""
    command = [sys.executable, str(ROOT / "benchmark" / script), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def runner(tmp_path, *args, **kwargs):
    return run_py(*GRID, "--out", tmp_path / "grid", *args, **kwargs)


def event_files(tmp_path):
    return sorted(glob.glob(f"{tmp_path}/grid/**/events.out.tfevents.*", recursive=True))


def test_grid_runs_to_the_end_and_a_second_invocation_runs_nothing(tmp_path):
    first = runner(tmp_path, "--seeds", "1", "2", "--workers", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[2/2]" in first.stdout and "min left" in first.stdout
    for seed in (1, 2):
        run = tmp_path / "grid" / "a2c" / "CartPole-v1" / f"seed_{seed}"
        assert (run / "DONE").exists() and "final eval/episodic_return" in (run / "log.txt").read_text()
        assert len(glob.glob(f"{run}/runs/*")) == 1
    before = [(path, os.path.getmtime(path)) for path in event_files(tmp_path)]
    second = runner(tmp_path, "--seeds", "1", "2", "--workers", "2")
    assert second.returncode == 0 and "0 to run" in second.stdout
    assert [(path, os.path.getmtime(path)) for path in event_files(tmp_path)] == before


def test_an_env_module_on_a_relative_pythonpath_reaches_each_run(tmp_path):
    """Each run works in a folder of its own: a relative PYTHONPATH entry, which the runner's own
    checks found, named nothing there, and every run failed on the env's import. The report command
    it ends with runs from where it ran (it named benchmark/report.py, from the repository root)."""
    (tmp_path / "mods").mkdir()
    module = (
        "import gymnasium as gym\ngym.register('Mine-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    (tmp_path / "mods" / "myenv.py").write_text(module)
    argv = [*GRID[:3], "myenv:Mine-v0", *GRID[4:], "--seeds", "1", "--out", "grid"]
    result = run_py(*argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": "mods"})
    assert result.returncode == 0 and "all 1 runs finished" in result.stdout, result.stdout + result.stderr
    command = result.stdout.strip().splitlines()[-1].split("report: ")[1]  # from where it ran
    assert command == f"python {os.path.relpath(ROOT / 'benchmark' / 'report.py', tmp_path)} grid"


def test_a_grid_whose_flags_differ_from_a_recorded_run_is_refused_unless_told_to_rerun(tmp_path):
    """Flags that change a run's results bind its cell; --checkpoint-freq, which changes none, does
    not."""
    assert runner(tmp_path, "--seeds", "1").returncode == 0
    assert "0 to run" in runner(tmp_path, "--seeds", "1", "--checkpoint-freq", "100").stdout
    recorded = tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1" / "flags.txt"
    assert (
        recorded.read_text() == "--env-id CartPole-v1 --seed 1 --total-timesteps 400 --checkpoint-freq 40 "
        "--eval-freq 200 --eval-episodes 2 --num-envs 4\n"
    )
    other = ["--seeds", "1", "--extra", "--eval-freq 200 --eval-episodes 3 --num-envs 4 --ent-coef 0"]
    refused = runner(tmp_path, *other)
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
    assert "--ent-coef (unset) -> 0; --eval-episodes 2 -> 3" in refused.stderr and "--rerun" in refused.stderr
    with open(recorded.parent / ".lock", "w") as lock:  # another runner holds the cell: nothing is deleted
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = runner(tmp_path, *other, "--rerun")
    assert held.returncode == 2 and "another runner holds" in held.stderr and (recorded.parent / "DONE").exists()
    dry = runner(tmp_path, *other, "--rerun", "--dry-run")  # what --rerun would run, afresh; nothing deleted
    assert dry.returncode == 0 and "1 to run" in dry.stdout and "--resume" not in dry.stdout, dry.stdout
    assert dry.stdout.rstrip().endswith("--ent-coef 0") and (recorded.parent / "DONE").exists()
    rerun = runner(tmp_path, *other, "--rerun")
    assert rerun.returncode == 0 and "1 to run" in rerun.stdout, rerun.stdout + rerun.stderr
    assert "--eval-episodes 3 --num-envs 4 --ent-coef 0" in recorded.read_text()
    assert len(glob.glob(f"{tmp_path}/grid/a2c/CartPole-v1/seed_1/runs/*")) == 1  # the old run is gone
    assert "0 to run" in runner(tmp_path, *other).stdout
    spelled = ["--seeds", "1", "--extra", "--eval-freq=200 --eval-episodes 3 --num-envs=4 --ent-coef 0"]
    assert "0 to run" in runner(tmp_path, *spelled).stdout  # --flag=value is --flag value


@pytest.mark.parametrize(
    "flags,needles",
    [
        (["--extra", "--eval-freq 200 --ent-coeff 0"], ["--ent-coeff", "Perhaps you meant", "--ent-coef", "a2c.py"]),
        (["--envs", "CartPole-v1", "NoSuchEnv-v9"], ["error: a2c NoSuchEnv-v9: --env-id NoSuchEnv-v9 cannot be made"]),
        (["--extra", "--gamma 1.5"], ["error: a2c CartPole-v1: --gamma must lie in"]),
        (["--extra", "--gamma 1.5", "--dry-run"], ["error: a2c CartPole-v1: --gamma must lie in"]),
    ],
)
def test_a_grid_whose_script_refuses_a_flag_or_an_env_starts_no_run(tmp_path, flags, needles):
    """The script's own checks run in the runner first, as its main() runs them: what tyro cannot
    parse gets tyro's message, anything else the script's one line, exit code 2, nothing written
    (not one failed run per cell, each leaving its folder)."""
    result = runner(tmp_path, "--seeds", "1", "2", *flags)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert all(needle in result.stderr for needle in needles), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "grid").exists()
    assert needles[0] == "--ent-coeff" or result.stderr.count("\n") == 1  # tyro's box, or one line


def test_a_run_that_wrote_nothing_does_not_pin_the_grid_s_flags(tmp_path):
    """A cell whose run recorded its flags but wrote no run (its script refused it at once) binds no
    grid: a grid with other flags runs there, and records its own."""
    recorded = tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1" / "flags.txt"
    recorded.parent.mkdir(parents=True)
    recorded.write_text("--env-id CartPole-v1 --seed 1 --total-timesteps 400 --checkpoint-freq 40 --ent-coeff 0\n")
    fixed = runner(tmp_path, "--seeds", "1", "--extra", "--eval-freq 200 --eval-episodes 2 --ent-coef 0")
    assert fixed.returncode == 0 and "1 to run" in fixed.stdout, fixed.stdout + fixed.stderr
    assert recorded.read_text().endswith("--eval-freq 200 --eval-episodes 2 --ent-coef 0\n")
    assert (recorded.parent / "DONE").exists()


@pytest.mark.parametrize("script", ["run.py", "report.py", "hil_split.py"])
def test_help_prints_the_whole_description(script):
    """--help ends no sentence of the module docstring midway: the whole of it is there, and its
    commands' continued lines as written (a backslash before the newline, not a joined line)."""
    import ast

    helped = run_py("--help", script=script)
    docstring = ast.get_docstring(ast.parse((ROOT / "benchmark" / script).read_text()))
    assert helped.returncode == 0 and docstring in helped.stdout
    continued = [line for line in (ROOT / "benchmark" / script).read_text().splitlines() if line.endswith(" \\")]
    assert all(line in helped.stdout.splitlines() for line in continued), continued


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path):
    """The commands as the runner would start them: one thread each where runs go side by side."""
    result = runner(tmp_path, "--seeds", "1", "2", "--dry-run")
    assert result.returncode == 0 and result.stdout.count("a2c.py --env-id CartPole-v1") == 2
    assert "--seed 2 --total-timesteps 400" in result.stdout and not (tmp_path / "grid").exists()
    assert "OMP_NUM_THREADS" not in result.stdout
    side_by_side = runner(tmp_path, "--seeds", "1", "2", "--dry-run", "--workers", "2").stdout
    assert side_by_side.count("&& OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ") == 2, side_by_side


def test_a_runner_stopped_mid_grid_finishes_the_rest_when_started_again(tmp_path):
    args = [
        sys.executable,
        str(ROOT / "benchmark" / "run.py"),
        "--script",
        "a2c",
        "--envs",
        "CartPole-v1",
        "--seeds",
        "1",
        "2",
        "3",
        "--total-timesteps",
        "20000",
        "--checkpoint-freq",
        "2000",
        "--out",
        str(tmp_path / "grid"),
        "--extra",
        "--eval-freq 0 --eval-episodes 1",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not glob.glob(f"{tmp_path}/grid/a2c/CartPole-v1/seed_1/runs/*/checkpoint.pt") and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert "resumes from its checkpoint" in out
    assert not glob.glob(f"{tmp_path}/grid/a2c/CartPole-v1/seed_*/DONE")
    resumed = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "3 to run" in resumed.stdout and "[3/3]" in resumed.stdout
    assert len(glob.glob(f"{tmp_path}/grid/a2c/CartPole-v1/seed_*/DONE")) == 3
    log = (tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1" / "log.txt").read_text()
    assert "--resume" in log and "resumed" in log and "step 20,000: final eval" in log
    assert len(glob.glob(f"{tmp_path}/grid/a2c/CartPole-v1/seed_1/runs/*")) == 1  # the same run continued


def test_a_failed_run_is_reported_and_the_others_finish(tmp_path):
    """Seed 1's folder holds a file named runs: its script cannot make its run directory there."""
    cell = tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1"
    cell.mkdir(parents=True)
    (cell / "runs").write_text("")
    result = runner(tmp_path, "--seeds", "1", "2")
    assert result.returncode == 1
    assert "FAILED a2c CartPole-v1 seed 1 (exit 2)" in result.stdout and "cannot make runs/" in result.stdout
    assert (tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_2" / "DONE").exists()
    assert "1 of 2 runs failed: a2c CartPole-v1 seed 1" in result.stdout


def test_a_run_locked_by_another_runner_is_left_alone(tmp_path):
    directory = tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1"
    directory.mkdir(parents=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = runner(tmp_path, "--seeds", "1", "2")
    assert result.returncode == 1 and "another runner holds" in result.stdout
    assert "1 of 2 runs left to the runner that holds them: a2c CartPole-v1 seed 1" in result.stdout
    assert "failed" not in result.stdout, result.stdout
    assert not (directory / "log.txt").exists() and (directory.parent / "seed_2" / "DONE").exists()


def test_a_cell_another_runner_finished_after_this_one_looked_is_not_run_again(tmp_path, monkeypatch):
    """Between a runner's list of cells to run and its lock on one, another runner may finish that
    cell: the lock taken, DONE is looked for again, and the cell is left alone (resuming its
    finished run would be refused)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    (tmp_path / "DONE").touch()
    with pytest.raises(FileExistsError):
        grid_runner.Run("a2c CartPole-v1 seed 1", str(tmp_path), [sys.executable, "-c", "raise SystemExit(3)"], None)
    assert not (tmp_path / "log.txt").exists()
    with open(tmp_path / ".lock", "w") as lock:  # released
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_cell_another_runner_started_with_other_flags_after_this_one_looked_is_not_continued(
    tmp_path, monkeypatch, capsys
):
    """Two grids with other flags on one --out at once: each checks the recorded flags before it
    starts, and again once it holds a cell's lock. A cell the other grid started in between is not
    continued with this grid's flags (its results would mix the two); it is named, the exit code is
    1, and the rest of the grid runs."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    changed = grid_runner.changed_flags
    looks = []

    def changed_since(args, env_id, seed):  # seed 1's flags differ from the second look on
        looks.append(seed)
        return "--ent-coef 0.01 -> 0" if seed == 1 and looks.count(1) > 1 else changed(args, env_id, seed)

    monkeypatch.setattr(grid_runner, "changed_flags", changed_since)
    argv = [*GRID[:-1], "--eval-freq 200 --eval-episodes 2", "--seeds", "1", "2", "--out", str(tmp_path / "grid")]
    assert grid_runner.main(argv) == 1
    out = capsys.readouterr().out
    assert "skipped CartPole-v1 seed 1: another runner started it with other flags (--ent-coef 0.01 -> 0)" in out
    assert "1 of 2 runs failed: a2c CartPole-v1 seed 1" in out, out
    seed_1 = tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1"
    assert not (seed_1 / "log.txt").exists() and (seed_1.parent / "seed_2" / "DONE").exists()


def test_a_run_stopped_before_its_first_checkpoint_is_said_to_start_afresh(tmp_path, monkeypatch, capsys):
    """Ctrl-C before a run wrote a checkpoint (here a stand-in run that never writes one): the
    runner says the run starts afresh next time, not that it resumes."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    def command(*args, **kwargs):  # once the runner's handlers are in place: a Ctrl-C in a second
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    monkeypatch.setattr(grid_runner, "command", command)
    assert grid_runner.main([*GRID, "--seeds", "1", "--out", str(tmp_path / "grid")]) == 128 + signal.SIGINT
    out = capsys.readouterr().out
    assert "a2c CartPole-v1 seed 1 stopped (exit -15); it starts afresh (it wrote no checkpoint) next time" in out, out


def values_from_the_event_files(root, tag) -> list:
    """Each run's [(step, value)] of `tag` in the order written, read record by record with
    tensorboard's raw event file loader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return [
        [
            (event.step, value.tensor.float_val[0] if value.tensor.float_val else value.simple_value)
            for event in EventFileLoader(path).Load()
            if event.HasField("summary")
            for value in event.summary.value
            if value.tag == tag
        ]
        for path in sorted(glob.glob(f"{root}/**/events.out.tfevents.*", recursive=True))
    ]


def test_report_writes_a_png_and_a_table_of_the_event_files_numbers(tmp_path):
    import matplotlib.image

    assert runner(tmp_path, "--seeds", "1", "2", "3", "4", "--workers", "2").returncode == 0
    result = run_py(tmp_path / "grid", "--last-episodes", "3", "--scripts", "a2c", script="report.py")
    assert result.returncode == 0, result.stderr
    # 400 steps evaluated every 200: two evaluations a seed, so the curves show the training returns
    assert result.stderr.count("warning: a2c CartPole-v1 seed") == 4 and "2 evaluation(s)" in result.stderr
    png = tmp_path / "grid" / "report" / "CartPole-v1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 100 and width > 100
    finals = [max(values)[1] for values in values_from_the_event_files(tmp_path / "grid", "eval/episodic_return")]
    train = [
        np.mean([v for _, v in values[-3:]])  # --last-episodes 3
        for values in values_from_the_event_files(tmp_path / "grid", "charts/episodic_return")
    ]
    assert len(finals) == len(train) == 4
    iqm = np.sort(finals)[1:3].mean()  # 4 seeds: the middle two
    row = [
        line
        for line in (tmp_path / "grid" / "report" / "results.md").read_text().splitlines()
        if line.startswith("| `a2c` | CartPole-v1 |")
    ]
    assert len(row) == 1
    assert (
        f"| 4 | 400 | {np.mean(finals):.1f} ± {np.std(finals):.1f} | {iqm:.1f} | {np.mean(train):.1f} ± "
        f"{np.std(train):.1f} |"
    ) in row[0]
    assert "496.68 at 200k frames (SLM Lab" in row[0]
    only = run_py(tmp_path / "grid", "--scripts", "acer", "--out", tmp_path / "acer", script="report.py")
    assert only.returncode == 2 and "no runs of acer under" in only.stderr and "its runs are of a2c" in only.stderr
    assert not (tmp_path / "acer").exists()


def fake_run(root, name, evals=(), episodes=(), finished=True):
    """A run directory root/name whose event file holds `evals` as eval/episodic_return and
    `episodes` as charts/episodic_return, [(step, value)] each, beside a loss; with the `finished`
    file a run that ended writes."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(root / name))
    writer.add_scalar("losses/value_loss", 1.0, 0)
    for tag, points in (("eval/episodic_return", evals), ("charts/episodic_return", episodes)):
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()
    if finished:
        (root / name / "finished").write_text("finished\n")
    return str(root / name)


def report_main(*argv):
    sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    return report.main([str(arg) for arg in argv] + ["--reference", ""])


def results_row(out, script):
    return next(line for line in (out / "results.md").read_text().splitlines() if line.startswith(f"| `{script}` |"))


EVALS = [(100, 10.0), (200, 20.0), (300, 30.0)]


def test_report_names_a_run_that_has_not_finished_in_a_warning_and_in_its_row(tmp_path, capsys):
    """A grid stopped halfway: seed 2 stopped at step 200 of 300, without the `finished` file a run
    writes at its end. It was reported as a final result without a word."""
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__100", evals=EVALS)
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__2__100", evals=EVALS[:2], finished=False)
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "warning: a2c CartPole-v1 seed 2 has not finished (no `finished` file in " in err, err
    assert "its final return is of step 200" in err and "seed 1 has not" not in err
    assert results_row(tmp_path / "out", "a2c").startswith("| `a2c` | CartPole-v1 | 2 (1 unfinished) | 300 |")


def test_report_keeps_the_newest_of_runs_sharing_script_env_and_seed_and_warns(tmp_path, capsys):
    """Of two runs of a2c on CartPole-v1 seed 1, the one whose name ends in the greater unix time is
    kept (1000 over 999, though '999' sorts after '1000' as text), and one warning line names both
    and the one kept."""
    older = fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__999", evals=[*EVALS[:2], (300, 99.0)])
    newer = fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=EVALS)
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "a2c CartPole-v1 seed 1" in warnings[0], warnings
    assert older in warnings[0] and warnings[0].endswith(f"keeps the newest by the unix time ending its name: {newer}")
    assert "| 1 | 300 | 30.0 ± 0.0 | 30.0 |" in results_row(tmp_path / "out", "a2c")


def test_report_with_no_run_left_to_report_is_an_error_and_writes_nothing(tmp_path, capsys):
    """Every run left out for want of evaluations: one line after the warnings, exit code 2, and no
    report folder with an empty table."""
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", episodes=[(50, 5.0)])
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"error: no run under {tmp_path / 'runs'} has an eval/episodic_return: nothing to report", err
    assert not (tmp_path / "out").exists()


def test_report_warns_about_each_run_it_leaves_out_for_want_of_evaluations(tmp_path, capsys):
    """Seed 2 logged a loss only, seed 3 training episodes but no evaluation (a run stopped before
    its first): a warning names each one's run directory, and the row counts seed 1 alone."""
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=EVALS, episodes=[(50, 5.0)])
    empty = fake_run(tmp_path / "runs", "CartPole-v1__a2c__2__1000")
    unevaluated = fake_run(tmp_path / "runs", "CartPole-v1__a2c__3__1000", episodes=[(50, 5.0)])
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {empty} has neither eval/episodic_return nor charts/episodic_return: left out",
        f"warning: {unevaluated} has no eval/episodic_return: left out",
    ]
    assert "| `a2c` | CartPole-v1 | 1 | 300 |" in results_row(tmp_path / "out", "a2c")


def test_report_warns_about_a_seed_that_ends_before_the_others(tmp_path, capsys):
    """A seed stopped, crashed or still running ends before the others: its final return is of an
    earlier step."""
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=EVALS)
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__2__1000", evals=EVALS[:2])
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    assert (
        f"warning: a2c CartPole-v1 seed 2 ends at step {EVALS[1][0]:,}, before the others' {EVALS[-1][0]:,}"
        in capsys.readouterr().err
    )


def record_offsets(path) -> list:
    """The byte offset of each TFRecord of an events file: an 8-byte length, its 4-byte crc, the
    data and the data's 4-byte crc."""
    data = open(path, "rb").read()
    offsets = [0]
    while offsets[-1] < len(data):
        offsets.append(offsets[-1] + 16 + int.from_bytes(data[offsets[-1] : offsets[-1] + 8], "little"))
    return offsets[:-1]


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_report_warns_about_a_damaged_events_file_and_uses_the_records_before_the_damage(tmp_path, capsys, damage):
    """A run killed while writing leaves a truncated last record; a damaged disk a record that fails
    its crc32 check. tensorboard's reader stops there without a word; the report names the file in
    one warning line and uses the whole records before it: here the evaluations at steps 100 and
    200, the one at 300 being the damaged record (truncated) or after it (corrupt: the 200 one's
    data flipped, so only 100 is read)."""
    run_dir = fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=EVALS)
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__2__1000", evals=EVALS)
    (path,) = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    data = bytearray(open(path, "rb").read())
    offsets = record_offsets(path)
    if damage == "truncated":
        data = data[:-5]
    else:
        data[offsets[-2] + 14] ^= 0xFF  # a byte of the data of the evaluation at step 200
    open(path, "wb").write(bytes(data))
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    kept = {"truncated": len(offsets) - 1, "corrupt": len(offsets) - 2}[damage]
    what = {"truncated": "a truncated record", "corrupt": "a corrupt record (a failed crc32 check)"}[damage]
    warnings = [line for line in capsys.readouterr().err.splitlines() if path in line]
    assert warnings == [
        f"warning: {path} has {what} after {kept} whole one(s): the report uses those and nothing after"
    ]
    last = {"truncated": EVALS[1], "corrupt": EVALS[0]}[damage]
    assert f"| 2 | 300 | {(last[1] + EVALS[-1][1]) / 2:.1f} ± " in results_row(tmp_path / "out", "a2c")


def test_report_refuses_a_bad_out_before_it_reads_the_events_files(tmp_path, capsys):
    """Its flags are checked first: an --out that is a file is the one line, with no warning about
    a damaged events file it would have read."""
    run_dir = fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=EVALS)
    (path,) = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-5])  # a truncated last record
    (tmp_path / "a-file").write_text("")
    assert report_main(tmp_path / "runs", "--out", tmp_path / "a-file") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and err.count("\n") == 1, err


def test_report_says_nothing_of_whole_events_files(tmp_path, capsys):
    fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=EVALS)
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    assert capsys.readouterr().err == ""


def test_report_draws_a_one_point_curve_with_a_marker(tmp_path, monkeypatch):
    """One evaluation and one training episode: the curve (of training returns) is a single point,
    and the PNG's pixel at that point is not the background's white."""
    import matplotlib.image
    import matplotlib.pyplot as plt

    fake_run(tmp_path / "runs", "CartPole-v1__a2c__1__1000", evals=[(500, 20.0)], episodes=[(500, 100.0)])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure, to find the point's pixel
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    image = matplotlib.image.imread(tmp_path / "out" / "CartPole-v1.png")
    (fig,) = figures
    x, y = fig.axes[0].transData.transform((500, 100.0)) * image.shape[0] / fig.bbox.height
    assert image[int(image.shape[0] - y), int(x), :3].sum() < 2.5


def reported_figure(tmp_path, monkeypatch, run_name: str, evals: list, reference_rows: list):
    """The axes of the learning-curve figure report.py draws of one fake run, `evals` as its
    evaluations, against a reference CSV of `reference_rows` ('steps,value,source') for its script
    and env."""
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    fake_run(tmp_path / "runs", run_name, evals=evals)
    env_id, script = run_name.split("__")[:2]
    rows = "".join(f"{script},{env_id},{row}\n" for row in reference_rows)
    (tmp_path / "reference.csv").write_text("script,env,steps,value,source\n" + rows)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure
    argv = [str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--reference", str(tmp_path / "reference.csv")]
    assert report.main(argv) == 0
    (fig,) = figures
    return fig.axes[0]


def test_report_draws_the_published_lines_over_the_curves_and_clear_of_the_frame(tmp_path, monkeypatch):
    """CartPole's published 500 and a curve that reaches it: each dotted line lies at least 8% of
    the axes' height inside the frame (matplotlib's own margin leaves it 4.5% from the top edge,
    under the curve), and is drawn over the curves."""
    evals = [(100, 200.0), (200, 500.0), (300, 500.0)]
    ax = reported_figure(tmp_path, monkeypatch, "CartPole-v1__a2c__1__1000", evals, ["500k,500 ± 0,A", "500k,150,B"])
    low, high = ax.get_ylim()
    dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
    curves = [line for line in ax.lines if line.get_linestyle() == "-"]
    assert sorted(line.get_ydata()[0] for line in dotted) == [150.0, 500.0] and len(curves) == 1
    for line in dotted:
        y = line.get_ydata()[0]
        assert min(high - y, y - low) >= 0.08 * (high - low), (y, low, high)
        assert line.get_zorder() > curves[0].get_zorder()


def test_report_draws_a_published_figure_the_curve_reaches_as_a_point_and_of_the_others_the_furthest(
    tmp_path, monkeypatch
):
    """A published figure at a step the curve reaches is a point at that step, its ± an error bar;
    of those beyond the curve only the furthest is drawn, as a dotted line, and one whose count is
    not of env steps ('200k frames') stays a line; the legend lies under the axes."""
    evals = [(50_000, 500.0), (100_000, 1000.0), (150_000, 1500.0)]
    rows = ["100k,1100 ± 400,A", "300k,2100 ± 1000,B", "1M,2800,C", "200k frames,900,D"]
    ax = reported_figure(tmp_path, monkeypatch, "Hopper-v4__sac_continuous_action__1__1000", evals, rows)
    assert sorted(line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == ":") == [900.0, 2800.0]
    (point,) = ax.containers
    assert list(point.lines[0].get_xdata()) == [100_000] and list(point.lines[0].get_ydata()) == [1100.0]
    assert point.lines[2][0].get_segments()[0].tolist() == [[100_000, 700.0], [100_000, 1500.0]]
    renderer = ax.figure.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0


def test_report_file_names_replace_colons_and_slashes_in_env_ids(tmp_path):
    fake_run(tmp_path / "runs", "grasp_env:PointGrasp-v0__sac__1__1000", evals=EVALS)
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out") == 0
    assert sorted(os.listdir(tmp_path / "out")) == ["grasp_env_PointGrasp-v0.png", "results.md"]
    assert "| `sac` | grasp_env:PointGrasp-v0 | 1 |" in results_row(tmp_path / "out", "sac")


def test_report_reads_an_exp_name_that_holds_a_double_underscore(tmp_path):
    """--exp-name my__exp names runs CartPole-v1__my__exp__1__1000: reported as my__exp (it was
    left out, silently)."""
    fake_run(tmp_path / "runs", "CartPole-v1__my__exp__1__1000", evals=EVALS)
    assert report_main(tmp_path / "runs", "--out", tmp_path / "out", "--scripts", "my__exp") == 0
    assert "| 1 | 300 | 30.0 ± 0.0 | 30.0 |" in results_row(tmp_path / "out", "my__exp")


def test_report_speed_draws_a_bar_per_row_with_a_peer(tmp_path):
    """report.py --speed reads speed.py's tables: rows with a peer become bars, a row without one is
    left out."""
    import matplotlib.image

    header = "| script | env | threads | ours SPS | SB3 SPS | ratio ours / SB3: min / median / max | peak MB |"
    (tmp_path / "compiled.md").write_text(
        f"{header}\n|---|\n| `td3_continuous_action.py` | Hopper-v5 | 2 | 274.7 "
        "| 177.6 | 1.27 / 1.55 / 1.80 | 464 / 389 |\n\nOur runs with `--compile`.\n"
    )
    (tmp_path / "separate.md").write_text(
        f"{header}\n|---|\n| `a2c.py` | CartPole-v1 | 1 | 14,500.2 | 9,907.4 | "
        "1.41 / 1.46 / 1.61 | 324 / 340 |\n| `acer.py` | CartPole-v1 | 1 | 10,029.5 "
        "| no peer | - | 326 / - |\n"
    )
    done = run_py(tmp_path, "--speed", script="report.py")
    assert done.returncode == 0 and "2 bar(s)" in done.stdout, done.stderr
    assert matplotlib.image.imread(tmp_path / "speed.png").shape[0] > 100
    elsewhere = run_py(tmp_path, "--speed", "--out", tmp_path / "chart", script="report.py")  # a folder it makes
    assert elsewhere.returncode == 0 and (tmp_path / "chart" / "speed.png").exists(), elsewhere.stderr
    (tmp_path / "compiled.md").unlink()
    (tmp_path / "separate.md").write_text(f"{header}\n|---|\n| `acer.py` | CartPole-v1 | 1 | 10 | no peer | - | 3 |\n")
    done = run_py(tmp_path, "--speed", script="report.py")
    assert done.returncode == 2 and "no speed.py table with a peer" in done.stderr


def test_measure_updates_counts_the_matmul_flops_and_times_each_update_function():
    """speed.py --floor's wrapper, on a module whose builder returns two update functions: every
    call records its FLOPs (2 M N K a matmul) or its seconds, keyed by the function's place in what
    the builder returned."""
    import types

    import torch

    sys.path.insert(0, str(ROOT / "benchmark"))
    import speed

    a, b = torch.ones(8, 16), torch.ones(16, 4)
    for mode in ("count", "time"):
        module, record = types.SimpleNamespace(toy_updates=lambda: (lambda: a @ b, lambda: (a @ b) @ b.T)), {}
        speed.measure_updates(module, mode, record)
        first, second = module.toy_updates()
        for _ in range(3):
            first(), second()
        if mode == "count":
            assert record == {"0": [2 * 8 * 16 * 4] * 3, "1": [2 * 8 * 16 * 4 + 2 * 8 * 4 * 16] * 3}
        else:
            assert sorted(record) == ["0", "1"] and all(len(v) == 3 and min(v) > 0 for v in record.values())


@pytest.mark.slow
def test_speed_floor_times_td3_s_updates_eager_and_compiled(tmp_path):
    """--floor on TD3: a row per path, whose update / floor is the update time over the floor, and
    the seconds of each path's first calls (how long compiling takes depends on inductor's cache and
    the machine's load, so no order between the paths is asserted)."""
    out = tmp_path / "floor.md"
    done = speed("--pairs", "td3", "--steps", "2201", "--floor", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        line.split("|")[2].strip(): line.strip("|").split("|")[2:]
        for line in out.read_text().splitlines()
        if line.startswith("| `td3_continuous_action.py` |")
    }
    assert sorted(rows) == ["compiled", "eager"]
    for update_ms, gflop, floor_ms, ratio, _ in ([float(c) for c in row] for row in rows.values()):
        # no order asserted between the update and the floor: two timings, each at its moment's load
        assert update_ms > 0 and floor_ms > 0 and gflop > 0 and abs(ratio - update_ms / floor_ms) < 0.01 + 0.01 * ratio
    assert float(rows["compiled"][-1]) > 0 and float(rows["eager"][-1]) >= 0  # eager: 0.0 s at one decimal


def test_report_bands_stay_within_the_return_bounds_it_knows():
    sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    values = np.array([[300.0, 500.0], [500.0, 500.0], [500.0, 500.0]])  # 3 seeds at 2 steps
    mean, low, high = report.band(values, "CartPole-v1")
    assert np.allclose(mean, [433.333, 500.0], atol=1e-3) and np.allclose(high, [500.0, 500.0])
    assert np.allclose(low, mean - values.std(0))
    _, _, unbounded = report.band(values, "NoBounds-v0")
    assert unbounded[0] == pytest.approx(mean[0] + values[:, 0].std())


@pytest.mark.parametrize("values, expected", [([1, 2, 3], 2.0), ([1, 2, 3, 100], 2.5), ([5, 1, 2, 3, 4], 3.0)])
def test_iqm_trims_a_quarter_from_each_end(values, expected):
    sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    assert report.iqm(values) == expected


CUDA = torch.cuda.is_available()


def speed(*flags, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, str(cwd or ROOT) + "/benchmark/speed.py", *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def table_row(text, script="td3_continuous_action.py"):
    """The cells of `script`'s row: env, threads, the two SPS, the ratios' min / median / max, peak
    MB."""
    row = next(line for line in text.splitlines() if line.startswith(f"| `{script}`"))
    return [c.strip() for c in row.strip("|").split("|")][1:]


def test_speed_finds_a_file_that_a_flag_names_from_where_it_was_started(tmp_path):
    """A flag's relative file name (`--resume` here, `--image-encoder-weights resnet10.pt` on the
    performance page) is found from the folder speed.py was started in, not the temporary folder a
    run writes in: the script reads the file, and refuses it as damaged."""
    (tmp_path / "damaged.pt").write_bytes(b"not a checkpoint")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "speed.py"), "--pairs", "td3", "--repeats", "1", "--steps", "2100"]
        + ["--ours-flags=--resume damaged.pt"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode != 0 and f"--resume {tmp_path}/damaged.pt: unreadable or damaged" in done.stderr, done.stderr


def test_speed_help_documents_the_sb3_pairs_and_the_before_revision():
    done = speed("--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    for words in (
        "sac_continuous_action.py and td3_continuous_action.py on Hopper-v5",
        "runs ours and SB3 as two processes taking turns of TURN env steps",
        "--before REV runs our script as it was at git revision REV as the second side, in SB3's place",
        "--before-flags in place of --ours-flags",
    ):
        assert words in text, words


def test_speed_compares_td3_with_sb3(tmp_path):
    """benchmark/speed.py on TD3, separate runs: one (ours, SB3) pair that reaches updates on both
    sides, whose ratio is the ratio of the two SPS cells, and the peak memory of each; --out in a
    folder it makes."""
    out = tmp_path / "tables" / "speed.md"
    done = speed("--pairs", "td3", "--repeats", "1", "--steps", "2100", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert text.startswith("`python benchmark/speed.py --pairs td3 --repeats 1 --steps 2100 --out ")
    assert "Machine: " in text
    assert "| ours SPS | SB3 SPS | ratio ours / SB3: min / median / max | peak MB ours / SB3 |" in text
    assert "1 measurements of each side per script, runs of td3 2,100 env steps." in text
    env_id, threads, ours, sb3, ratios, peaks = table_row(text)
    assert env_id == "Hopper-v5" and threads == "2"
    ours_sps, sb3_sps = float(ours.replace(",", "")), float(sb3.replace(",", ""))
    low, median, high = (float(x) for x in ratios.split("/"))
    assert ours_sps > 0 and sb3_sps > 0 and low == median == high  # one pair: one ratio
    # the SPS cells are rounded to tenths, the ratio to hundredths
    assert (ours_sps - 0.05) / (sb3_sps + 0.05) - 0.005 <= median <= (ours_sps + 0.05) / (sb3_sps - 0.05) + 0.005
    assert all(float(mb) > 100 for mb in peaks.split("/"))


def test_speed_interleaved_reports_a_ratio_per_round(tmp_path):
    """benchmark/speed.py --interleave: ours and SB3 take turns in two processes; after 2,000 random
    steps and one warm-up turn, (2,151 - 1 - 2,000) / 50 - 1 = 2 rounds are timed, and the row's
    ratios are the rounds'."""
    out = tmp_path / "speed.md"
    done = speed("--pairs", "td3", "--repeats", "1", "--steps", "2151", "--interleave", "50", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    _, _, ours, sb3, ratios, _ = table_row(text)
    ours_sps, sb3_sps = float(ours.replace(",", "")), float(sb3.replace(",", ""))
    low, median, high = (float(x) for x in ratios.split("/"))
    assert ours_sps > 0 and sb3_sps > 0 and low <= median <= high
    assert "`td3_continuous_action.py`: 2 rounds of two 50-step turns in 1 pair(s) of processes" in text
    overall = float(text.split("ratio over all rounds ")[1].split(",")[0])
    per_pair = float(text.split("per pair ")[1].split(" (ours first)")[0])
    assert overall == per_pair  # one pair
    # SB3's seconds over ours in all rounds: the ratio of the SPS cells (rounded to tenths), between
    # the rounds' ratios
    assert (ours_sps - 0.05) / (sb3_sps + 0.05) - 1e-3 <= overall <= (ours_sps + 0.05) / (sb3_sps - 0.05) + 1e-3
    assert low - 0.005 <= overall <= high + 0.005


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--pairs", "a2c", "--interleave", "100"], "--interleave works for --pairs sac td3 only"),
        (
            ["--pairs", "td3", "--interleave", "500", "--steps", "2500"],
            "--interleave 500 needs --steps of at least 3,001",
        ),
        (["--pairs", "td3", "--interleave", "-1"], "--interleave takes a turn of at least 1 env step"),
        (["--pairs", "a2c", "--floor"], "--floor works for --pairs sac td3 only"),
        (["--pairs", "td3", "--floor", "--interleave", "500"], "without --interleave or --before"),
        (["--pairs", "td3", "--interleave", "500", "--before", "no-such-revision"], "is not a git revision"),
        (["--pairs", "td3", "--interleave", "500", "--before-flags=--no-compile"], "--before-flags needs --before REV"),
        (["--pairs", "td3", "--steps", "999"], "--steps at least 1000"),
        (["--pairs", "td3", "--repeats", "0"], "--repeats and --threads must be at least 1"),
        (["--pairs", "sac_atari", "--steps", "2000"], "sac_atari need --steps above their learning starts (2,000)"),
        (["--pairs", "a2c", "--gpu"], "--gpu works for --pairs sac sac_hil_serl td3 only"),
        (["--pairs", "td3", "--warmup", "500", "--steps", "2500"], "--steps above 2,000 + --warmup"),
        (["--pairs", "sac", "--concurrent", "4"], "--concurrent needs --gpu and one of --pairs"),
        (["--pairs", "a2c", "--env-id", "Hopper-v4"], "--env-id works for --pairs sac sac_hil_serl td3 only"),
        pytest.param(
            ["--pairs", "td3", "--gpu"],
            "--gpu needs a CUDA GPU that torch sees",
            marks=pytest.mark.skipif(CUDA, reason="a CUDA GPU is present"),
        ),
    ],
)
def test_speed_rejects_bad_flags_in_one_line(flags, message):
    done = speed(*flags)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_speed_gpu_runs_each_path_with_its_flags_and_leaves_sb3_out_under_ours_flags(monkeypatch):
    """speed.py --gpu's runs and table, the runs stood in for: eager, compiled (CUDA_GRAPHS off) and
    captured, then SB3 as the ratio's base; with --ours-flags (another task than SB3's) no SB3 run
    and no ratio."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import speed

    runs = []

    def run_children(sides, pair, steps, seeds, args, batons=()):
        runs.append((sides[0], args.ours_flags, args.no_graphs))
        return [{"sps": 400.0 if sides[0] == "ours" else 100.0, "peak_mb": 1.0}]

    monkeypatch.setattr(speed, "run_children", run_children)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    args = argparse.Namespace(
        pairs=["td3"], steps=3000, warmup=500, repeats=1, seed=1, threads=None, ours_flags="", out=None
    )
    text = speed.gpu_markdown(args, "cmd")
    assert runs == [
        ("ours", "--no-compile", False),
        ("ours", "--compile", True),
        ("ours", "--compile", False),
        ("sb3", "", False),
    ]
    assert "| `td3_continuous_action.py` | Hopper-v5 | captured | 400.0 | 4.00 | 1 |" in text and "GPU: a GPU" in text
    runs.clear()
    text = speed.gpu_markdown(argparse.Namespace(**{**vars(args), "ours_flags": "--batch-size 512"}), "cmd")
    assert [side for side, *_ in runs] == ["ours"] * 3 and "| SB3 |" not in text and "| captured | 400.0 | - |" in text


def test_speed_gpu_concurrent_runs_n_captured_runs_at_once_and_sums_them(monkeypatch):
    """--gpu --concurrent 1 3: for each N, N runs of ours at once (one call, seeds from --seed),
    captured (--compile, graphs on), one thread each; a row of their mean, slowest and total SPS."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import speed

    calls = []

    def run_children(sides, pair, steps, seeds, args, batons=()):
        calls.append((sides, seeds, args.ours_flags, args.threads, args.no_graphs))
        return [{"sps": 100.0 * (k + 1), "peak_mb": 1.0} for k in range(len(sides))]

    monkeypatch.setattr(speed, "run_children", run_children)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    args = argparse.Namespace(
        pairs=["sac"], steps=4800, warmup=300, seed=5, threads=None, ours_flags="", no_graphs=False, concurrent=[1, 3]
    )
    text = speed.concurrent_markdown(args, "cmd")
    assert calls == [(["ours"], [5], "--compile", 1, False), (["ours"] * 3, [5, 6, 7], "--compile", 1, False)]
    assert "| 1 | 100.0 | 100.0 | 100.0 |" in text and "| 3 | 200.0 | 100.0 | 600.0 |" in text
    assert "on Hopper-v5, runs of 4,800 env steps timed from 2,300, 1 thread(s) a run." in text


def test_speed_env_id_reaches_both_sides_in_the_children(monkeypatch):
    """--env-id puts the chosen pairs (ours and SB3, which read PAIRS) on that env in the parent and
    in each child, whose command line carries the flag; the other pairs keep theirs."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import speed

    for pair in ("sac", "td3"):
        monkeypatch.setitem(speed.PAIRS, pair, speed.PAIRS[pair])  # restored after the test
    seen, commands = [], []
    monkeypatch.setattr(speed, "child", lambda args: seen.append((speed.PAIRS["td3"][0], speed.PAIRS["sac"][0])))
    monkeypatch.setattr(sys, "argv", ["speed.py", "--child", "ours", "--pairs", "td3", "--env-id", "Walker2d-v4"])
    speed.main()
    assert seen == [("Walker2d-v4", "Hopper-v5")]

    def popen(cmd, **kwargs):
        commands.append(cmd)
        raise OSError("stop here")

    monkeypatch.setattr(speed.subprocess, "Popen", popen)
    args = argparse.Namespace(
        threads=1,
        ours_flags="",
        before_flags="",
        before="",
        interleave=0,
        measure=None,
        warmup=0,
        gpu=False,
        no_graphs=False,
        env_id="Walker2d-v4",
    )
    with pytest.raises(OSError):
        speed.run_children(["ours"], "td3", 3000, [1], args)
    assert commands[0][-2:] == ["--env-id", "Walker2d-v4"]


def test_speed_gpu_keeps_the_rows_of_the_paths_that_ran(monkeypatch, tmp_path):
    """A path that fails (say, its capture) is named under the table and the others keep their rows;
    --out holds the rows measured so far after each path; when every path fails, one line and exit
    1."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import speed

    written = []

    def run_children(sides, pair, steps, seeds, args, batons=()):
        written.append(open(out).read() if os.path.exists(out) else "")
        if args.ours_flags == "--compile" and not args.no_graphs or fail_all:
            sys.exit("error: ours td3 failed (exit 1)")
        return [{"sps": 400.0 if sides[0] == "ours" else 100.0, "peak_mb": 1.0}]

    out, fail_all = str(tmp_path / "gpu.md"), False
    monkeypatch.setattr(speed, "run_children", run_children)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    args = argparse.Namespace(
        pairs=["td3"], steps=3000, warmup=500, repeats=1, seed=1, threads=None, ours_flags="", out=out
    )
    text = speed.gpu_markdown(args, "cmd")
    assert "| compiled | 400.0 | 4.00 |" in text and "| captured |" not in text and "Failed: td3 captured." in text
    assert "| eager | 400.0 | - |" in written[1] and "| compiled |" in written[3] and "Failed" in written[3]
    fail_all = True
    with pytest.raises(SystemExit, match="every path failed"):
        speed.gpu_markdown(args, "cmd")


def test_meter_alternates_turns_and_lets_the_last_side_run_on_alone():
    """speed.Meter on two threads (the logic; speed.py puts the sides in two processes): turns of 3
    steps alternate, first side first, neither side steps during the other's turn, each side records
    its turns, and when the shorter side finishes the longer one runs its remaining steps without
    waiting."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import threading

    import speed

    (read_1, write_0), (read_0, write_1) = os.pipe(), os.pipe()
    fds, meters, log, lock = [(read_0, write_0, 1), (read_1, write_1, 0)], [None, None], [], threading.Lock()

    def side(k, steps):
        meters[k] = meter = speed.Meter(0, 3, fds[k])
        try:
            for n in range(steps):
                meter(n)
                with lock:
                    log.append(k)
        finally:
            meter.finish()

    threads = [threading.Thread(target=side, args=(0, 10)), threading.Thread(target=side, args=(1, 16))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    # side 0: turns at steps 0-2, 3-5, 6-8, then step 9 and done; side 1: 0-2, 3-5, 6-8, then 9-15
    # alone
    assert log == [0] * 3 + [1] * 3 + [0] * 3 + [1] * 3 + [0] * 3 + [1] * 3 + [0] + [1] * 7
    assert sorted(meters[0].turns) == [0, 3, 6] and sorted(meters[1].turns) == [0, 3, 6, 9, 12]
    assert meters[0].first[1] == 0 and meters[0].last[1] == 9 and meters[1].last[1] == 15
    for fd in (read_0, write_0, read_1, write_1):
        os.close(fd)


FAKE_SCRIPT = """import os
import gymnasium as gym


def cli(argv):
    with open(os.environ["SPEED_FAKE_LOG"], "a") as f:
        f.write("{side} " + " ".join(argv) + "\\n")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    envs.reset(seed=0)
    for _ in range(int(argv[argv.index("--total-timesteps") + 1])):
        envs.step(envs.action_space.sample())
"""


def test_speed_before_runs_the_script_as_it_was_at_a_revision_with_its_own_flags(tmp_path):
    """--before REV in a repository whose td3_continuous_action.py differs between REV and the tree:
    one side imports the tree's file and gets --ours-flags, the other `git show
    REV:td3_continuous_action.py` and gets --before-flags; both sides are timed in two interleaved
    pairs, one with each side first."""
    repo, log = tmp_path / "repo", tmp_path / "calls.txt"
    (repo / "benchmark").mkdir(parents=True)
    (repo / "benchmark" / "speed.py").write_text((ROOT / "benchmark" / "speed.py").read_text())
    (repo / "td3_continuous_action.py").write_text(FAKE_SCRIPT.replace("{side}", "revision"))
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "revision"]):
        assert subprocess.run(git + cmd, cwd=repo, capture_output=True).returncode == 0
    (repo / "td3_continuous_action.py").write_text(FAKE_SCRIPT.replace("{side}", "tree"))
    out = tmp_path / "speed.md"
    done = speed(
        "--pairs",
        "td3",
        "--repeats",
        "2",
        "--steps",
        "2101",
        "--interleave",
        "50",
        "--before",
        "HEAD",
        "--ours-flags=--tree-flag 1",
        "--before-flags=--revision-flag 2",
        "--out",
        str(out),
        cwd=repo,
        env={**os.environ, "SPEED_FAKE_LOG": str(log)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    calls = sorted(log.read_text().splitlines())
    assert len(calls) == 4
    for call, seed in zip(calls, [1, 2, 1, 2]):
        side = "revision" if call.startswith("revision ") else "tree"
        flags = "--revision-flag 2" if side == "revision" else "--tree-flag 1"
        assert call == (
            f"{side} --env-id Hopper-v5 --total-timesteps 2101 --seed {seed} --eval-freq 0 --eval-episodes "
            f"1 --learning-starts 2000 {flags}"
        )
    assert [call.split()[0] for call in calls] == ["revision", "revision", "tree", "tree"]
    text = out.read_text()
    assert "| ours SPS | at HEAD SPS | ratio ours / at HEAD: min / median / max | peak MB ours / at HEAD |" in text
    assert "Our runs with `--tree-flag 1`. The runs at HEAD with `--revision-flag 2`." in text
    assert (
        ("`td3_continuous_action.py`: 2 rounds of two 50-step turns in 2 pair(s) of processes; ratio over all rounds ")
        in text
        and "(ours first), " in text
        and "(at HEAD first)." in text
    )
    _, _, ours, before, _, _ = table_row(text)
    assert float(ours.replace(",", "")) > 0 and float(before.replace(",", "")) > 0


def test_speed_interleaved_against_a_revision_times_both_sides(tmp_path):
    """--interleave with --before HEAD: the tree's script and HEAD's take turns; the row and the
    notes name the revision and the flags of its side."""
    out = tmp_path / "speed.md"
    done = speed(
        "--pairs",
        "td3",
        "--repeats",
        "1",
        "--steps",
        "2151",
        "--interleave",
        "50",
        "--before",
        "HEAD",
        "--before-flags=--no-compile",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert "| ours SPS | at HEAD SPS | ratio ours / at HEAD: min / median / max | peak MB ours / at HEAD |" in text
    assert "The runs at HEAD with `--no-compile`." in text
    assert "`td3_continuous_action.py`: 2 rounds of two 50-step turns in 1 pair(s) of processes" in text
    assert "(ours first)." in text
    env_id, _, ours, before, _, peaks = table_row(text)
    assert env_id == "Hopper-v5" and float(ours.replace(",", "")) > 0 and float(before.replace(",", "")) > 0
    assert all(float(mb) > 100 for mb in peaks.split("/"))


def test_speed_before_flags_reach_the_revision_s_side_only():
    """A flag only REV's side gets, and that its script rejects, fails that side alone: the error
    names it."""
    done = speed(
        "--pairs",
        "td3",
        "--repeats",
        "1",
        "--steps",
        "2101",
        "--interleave",
        "50",
        "--before",
        "HEAD",
        "--before-flags=--no-such-flag",
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: before td3 failed (exit 2):"), done.stderr[-2000:]
    assert "Unrecognized options" in done.stderr and "--no-such-flag" in done.stderr


def test_speed_before_a_revision_without_the_script_is_refused_in_one_line():
    """The repository's first commit predates td3_continuous_action.py (in a full clone)."""
    first = subprocess.run(
        ["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()[0]
    if (
        subprocess.run(
            ["git", "cat-file", "-e", f"{first}:td3_continuous_action.py"], cwd=ROOT, capture_output=True
        ).returncode
        == 0
    ):
        pytest.skip("a shallow clone: its oldest commit already has the script")
    done = speed("--pairs", "td3", "--interleave", "500", "--before", first)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"td3_continuous_action.py does not exist at {first}" in done.stderr


def test_slurm_wait_asks_squeue_again_when_it_fails(tmp_path, monkeypatch, capsys):
    """--wait follows the job array while squeue fails (a busy or restarting controller) instead of
    reporting the runs unfinished at the first failure; an unknown job id ends the wait; failing
    past SQUEUE_PATIENCE gives one line."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 77\n")
    calls = tmp_path / "calls"
    (bin_dir / "squeue").write_text(  # fails twice, lists the job once, then no longer knows it
        f'#!/bin/sh\ncase "$*" in *-h*) echo x >> {calls};; esac\nn=$(wc -l < {calls})\n'
        'if [ "$n" -le 2 ]; then echo "slurm_load_jobs error: Socket timed out" >&2; exit 1; fi\n'
        'if [ "$n" -eq 3 ]; then echo "77_0 RUNNING"; exit 0; fi\n'
        'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1\n'
    )
    for tool in ("sbatch", "squeue"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(run.time, "sleep", lambda seconds: None)
    monkeypatch.chdir(tmp_path)
    argv = [*GRID, "--seeds", "1", "--out", str(tmp_path / "grid"), "--backend", "slurm", "--wait"]
    assert run.main(argv) == 1  # the stand-in job ran nothing: the run is reported unfinished once the job has ended
    assert calls.read_text().count("x") == 4 and "did not finish" in capsys.readouterr().out
    calls.write_text("")
    monkeypatch.setattr(run, "SQUEUE_PATIENCE", -1)
    assert run.main(argv) == 1 and calls.read_text().count("x") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: squeue failed") and "Socket timed out" in err, err


def test_a_run_that_crashes_while_the_runner_stops_is_reported_failed(tmp_path, monkeypatch, capsys):
    """A stopping runner calls a run "stopped" (to resume from its checkpoint) only when it exits as
    a signal ends it; one that crashes instead is reported FAILED, with its log."""
    import threading

    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    def command(args, env_id, seed, directory):  # seed 1 stops as SIGTERM asks, seed 2 crashes on it
        return [
            sys.executable,
            "-c",
            "import pathlib, signal, sys, time\n"
            f"signal.signal(signal.SIGTERM, lambda *a: sys.exit({143 if seed == 1 else 1}))\n"
            "pathlib.Path('started').touch()\ntime.sleep(60)",
        ]

    def stop_once_both_run():  # the runner's handler is in place before it starts any run
        deadline = time.time() + 60
        while len(glob.glob(f"{tmp_path}/grid/**/started", recursive=True)) < 2 and time.time() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(grid_runner, "command", command)
    threading.Thread(target=stop_once_both_run, daemon=True).start()
    assert grid_runner.main([*GRID, "--seeds", "1", "2", "--workers", "2", "--out", str(tmp_path / "grid")]) == 143
    out = capsys.readouterr().out
    assert "seed 1 stopped (exit 143)" in out and "FAILED a2c CartPole-v1 seed 2 (exit 1)" in out, out


def test_the_time_left_counts_what_running_runs_have_left_over_the_workers(monkeypatch):
    """Four workers, the first run done in 100 s, three more 100 s old and eight queued: 800 s of
    work over four workers (it read 1,100 s: each running run counted whole, and no workers); two
    done (a mean of 90 s) and one left, 30 s old: its 60 s, not a quarter of them."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    assert grid_runner.time_left([100.0], 8, [100.0] * 3, 4) == pytest.approx(200.0)
    assert grid_runner.time_left([100.0, 80.0], 0, [30.0], 4) == pytest.approx(60.0)
    assert grid_runner.time_left([100.0], 0, [250.0], 2) == 0.0


def test_a_stopping_runner_signals_each_run_once(tmp_path, monkeypatch, capsys):
    """A run that a SIGTERM stops restores the default handler once its checkpoint is written, then
    closes its logs (here a stand-in that takes a second over it): a second SIGTERM from the runner
    would kill it there (exit -15), losing the logs' end."""
    import threading

    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    def command(args, env_id, seed, directory):
        return [
            sys.executable,
            "-c",
            "import pathlib, signal, sys, time\n"
            "def stop(*a):\n    signal.signal(signal.SIGTERM, signal.SIG_DFL)\n    time.sleep(1)\n    sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, stop)\npathlib.Path('started').touch()\ntime.sleep(60)",
        ]

    def stop_once_it_runs():
        deadline = time.time() + 60
        while not glob.glob(f"{tmp_path}/grid/**/started", recursive=True) and time.time() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(grid_runner, "command", command)
    threading.Thread(target=stop_once_it_runs, daemon=True).start()
    assert grid_runner.main([*GRID, "--seeds", "1", "--out", str(tmp_path / "grid")]) == 143
    assert "a2c CartPole-v1 seed 1 stopped (exit 143)" in capsys.readouterr().out


@pytest.mark.parametrize("cuda", [True, False])
def test_the_runner_runs_four_at_once_by_default_on_a_gpu_host_and_one_elsewhere(tmp_path, monkeypatch, capsys, cuda):
    """Without --workers, runs at a time: GPU_WORKERS (4, the measured best total on one GPU) where
    torch sees a CUDA GPU, 1 elsewhere. Each stand-in run counts the runs going beside it."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmark"))
    import run as grid_runner

    (tmp_path / "going").mkdir()

    def command(args, env_id, seed, directory):  # going until 4 are (or 2 s), then says how many were
        return [
            sys.executable,
            "-c",
            f"import os, pathlib, time\ngoing = pathlib.Path({str(tmp_path / 'going')!r})\n"
            f"(going / '{seed}').touch()\nend = time.time() + 2\n"
            "while len(os.listdir(going)) < 4 and time.time() < end:\n    time.sleep(0.02)\n"
            "pathlib.Path('beside').write_text(str(len(os.listdir(going))))\n"
            f"(going / '{seed}').unlink()",
        ]

    monkeypatch.setattr(grid_runner, "command", command)
    monkeypatch.setattr(grid_runner, "cuda_host", lambda: cuda)
    seeds = ["1", "2", "3", "4", "5"]
    assert grid_runner.main([*GRID, "--seeds", *seeds, "--out", str(tmp_path / "grid")]) == 0, capsys.readouterr()
    beside = [int(path.read_text()) for path in (tmp_path / "grid").glob("**/beside")]
    assert len(beside) == 5 and max(beside) == (grid_runner.GPU_WORKERS if cuda else 1) == (4 if cuda else 1), beside


@pytest.mark.parametrize("workers", ["", "3"])
def test_the_grid_scripts_pass_workers_only_when_WORKERS_is_set(tmp_path, workers):
    """Without WORKERS, each benchmark/<script>.sh leaves --workers to run.py's default (4 on a CUDA
    GPU's host); with WORKERS=3 it passes --workers 3. A stand-in python prints what it is given."""
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "$@"\n')
    stub.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key not in ("ENVS", "EXTRA", "SEEDS", "OUT")}
    env.update(PATH=f"{tmp_path}:{os.environ['PATH']}", WORKERS=workers)
    scripts = sorted(set((ROOT / "benchmark").glob("*.sh")) - {ROOT / "benchmark" / "gpu.sh"})
    assert len(scripts) == 6
    for script in scripts:
        grids = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True).stdout
        grids = grids.splitlines()
        assert grids and all("--script" in grid for grid in grids), (script.name, grids)
        expected = " --workers 3 " if workers else None
        assert all((expected in grid) if expected else ("--workers" not in grid) for grid in grids), (script, grids)


def test_the_gpu_probe_answers_as_torch_does():
    sys.path.insert(0, str(ROOT / "benchmark"))
    import run as grid_runner

    assert grid_runner.cuda_host() == torch.cuda.is_available()


@pytest.mark.parametrize("extra", ["--critic-layer-norm", "--no-such-flag"])
def test_a_single_flag_passes_through_extra(tmp_path, extra):
    """A lone flag as --extra (EXTRA="--critic-layer-norm" in the .sh scripts) reaches each run's
    command once the script's own parsing takes it; one the script does not know gets tyro's
    message."""
    result = run_py(
        "--script",
        "sac_continuous_action",
        "--envs",
        "Pendulum-v1",
        "--seeds",
        "1",
        "--total-timesteps",
        "6000",
        "--extra",
        extra,
        "--out",
        tmp_path / "grid",
        "--dry-run",
        timeout=60,
    )
    if extra == "--no-such-flag":
        assert result.returncode == 2 and "Unrecognized options: --no-such-flag" in result.stderr, result.stderr
    else:
        assert result.returncode == 0 and f"--checkpoint-freq 600 {extra}" in result.stdout, result.stderr


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--extra", '--unterminated "quote'], "does not split into flags"),
        (["--seeds", "1", "--extra", "--seed 5"], "--extra sets --seed, which run.py sets for each run"),
        (
            ["--extra", "--env_id Acrobot-v1 --total_timesteps=800"],
            "--extra sets --env_id, --total_timesteps=800, which",
        ),
        (["--seeds", "1", "1", "--dry-run"], "--envs and --seeds list 1 twice"),
        (["--envs", "CartPole-v1", "CartPole-v1", "--seeds", "1", "1"], "list 1, CartPole-v1 twice"),
        (["--backend", "slurm", "--cpus-per-task", "0", "--dry-run"], "--cpus-per-task must be at least 1"),
        (["--backend", "slurm", "--gpus-per-task", "-1", "--dry-run"], "--gpus-per-task at least 0"),
        (["--partition", "big", "--wait"], "--partition, --wait need --backend slurm"),
        (["--workers", "0"], "--workers and --total-timesteps must be at least 1"),
        (["--out", "a-file"], "--out a-file is a file: pass a directory"),
        (["--out", "/proc/no-such/grid"], "--out /proc/no-such/grid: No such file or directory: pass a directory"),
    ],
)
def test_bad_runner_flags_are_one_line(tmp_path, flags, message):
    (tmp_path / "a-file").write_text("")
    result = runner(tmp_path, *flags, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize(
    "case",
    [
        "a reference that is no CSV",
        "a missing reference",
        "an --out that is a file",
        "an --out that cannot be made",
        "scripts with no runs",
        "a script with no runs beside one with",
    ],
)
def test_report_refuses_bad_flags_in_one_line(tmp_path, capsys, case):
    """report.py names what is wrong instead of ignoring a --reference it can't read, tracing back
    on an --out that is a file or cannot be made, or saying there are no runs where only the
    --scripts filter finds none."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    fake_run(tmp_path / "grid", "CartPole-v1__a2c__1__100", evals=[(100, 10.0), (200, 20.0), (300, 30.0)])
    (tmp_path / "notes.txt").write_text("just some words\n")
    (tmp_path / "a-file").write_text("")
    argv, message = {
        "a reference that is no CSV": (
            ["--reference", tmp_path / "notes.txt"],
            "is no CSV with the columns script, env",
        ),
        "a missing reference": (["--reference", tmp_path / "nowhere.csv"], "cannot be read (No such file"),
        "an --out that is a file": (["--out", tmp_path / "a-file"], "is a file: pass a directory"),
        "an --out that cannot be made": (["--out", "/proc/no-such/report"], "No such file or directory: pass a"),
        "scripts with no runs": (["--scripts", "nosuch"], "no runs of nosuch under"),
        "a script with no runs beside one with": (["--scripts", "a2c", "nosuch"], "no runs of nosuch under"),
    }[case]
    assert report.main([str(tmp_path / "grid"), *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert "no runs of" not in message or "its runs are of a2c" in err
