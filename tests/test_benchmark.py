"""benchmark/run.py and benchmark/report.py: a tiny a2c grid runs to the end, a second run does nothing, a runner stopped
mid-grid finishes the rest when started again, failures are reported and do not stop the others, a locked run is
left alone, and the report's PNG and table match values read straight from the event files."""

import fcntl
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT

GRID = ["--script", "a2c", "--envs", "CartPole-v1", "--total-timesteps", "400",
        "--extra", "--eval-freq 200 --eval-episodes 2 --num-envs 4"]


def runner(tmp_path, *args, **kwargs):
    return subprocess.run([sys.executable, str(ROOT / "benchmark" / "run.py"), *GRID, "--out", str(tmp_path / "grid"),
                           *args], capture_output=True, text=True, timeout=600, **kwargs)


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


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path):
    result = runner(tmp_path, "--seeds", "1", "2", "--dry-run")
    assert result.returncode == 0 and result.stdout.count("a2c.py --env-id CartPole-v1") == 2
    assert "--seed 2 --total-timesteps 400" in result.stdout and not (tmp_path / "grid").exists()


def test_a_runner_stopped_mid_grid_finishes_the_rest_when_started_again(tmp_path):
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "a2c", "--envs", "CartPole-v1",
            "--seeds", "1", "2", "3", "--total-timesteps", "60000", "--checkpoint-freq", "2000", "--out",
            str(tmp_path / "grid"), "--extra", "--eval-freq 0 --eval-episodes 1"]
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
    assert "--resume" in log and "resumed" in log and "step 60,000: final eval" in log
    assert len(glob.glob(f"{tmp_path}/grid/a2c/CartPole-v1/seed_1/runs/*")) == 1  # the same run continued


def test_a_failed_run_is_reported_and_the_others_finish(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "a2c", "--envs",
                             "NoSuchEnv-v0", "CartPole-v1", "--seeds", "1", "--total-timesteps", "400", "--out",
                             str(tmp_path / "grid"), "--extra", "--eval-freq 0 --eval-episodes 1"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert "FAILED a2c NoSuchEnv-v0 seed 1 (exit 2)" in result.stdout and "unknown env id" in result.stdout
    assert (tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1" / "DONE").exists()
    assert "1 of 2 runs failed" in result.stdout


def test_a_run_locked_by_another_runner_is_left_alone(tmp_path):
    directory = tmp_path / "grid" / "a2c" / "CartPole-v1" / "seed_1"
    directory.mkdir(parents=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = runner(tmp_path, "--seeds", "1", "2")
    assert result.returncode == 1 and "another runner holds" in result.stdout
    assert not (directory / "log.txt").exists() and (directory.parent / "seed_2" / "DONE").exists()


def final_evaluations_from_the_event_files(root) -> list:
    """The last eval/episodic_return of each run, read record by record with tensorboard's raw event file loader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    finals = []
    for path in sorted(glob.glob(f"{root}/**/events.out.tfevents.*", recursive=True)):
        values = [(event.step, value.tensor.float_val[0] if value.tensor.float_val else value.simple_value)
                  for event in EventFileLoader(path).Load() if event.HasField("summary")
                  for value in event.summary.value if value.tag == "eval/episodic_return"]
        finals.append(max(values)[1] if values else None)
    return finals


def test_report_writes_a_png_and_a_table_of_the_event_files_numbers(tmp_path):
    import matplotlib.image

    assert runner(tmp_path, "--seeds", "1", "2", "3", "4", "--workers", "2").returncode == 0
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "report.py"), str(tmp_path / "grid")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    png = tmp_path / "grid" / "report" / "CartPole-v1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 100 and width > 100
    finals = final_evaluations_from_the_event_files(tmp_path / "grid")
    assert len(finals) == 4 and None not in finals
    iqm = np.sort(finals)[1:3].mean()  # 4 seeds: the middle two
    row = [line for line in (tmp_path / "grid" / "report" / "results.md").read_text().splitlines()
           if line.startswith("| `a2c` | CartPole-v1 |")]
    assert len(row) == 1
    assert f"| 4 | 400 | {np.mean(finals):.1f} ± {np.std(finals):.1f} | {iqm:.1f} |" in row[0]
    assert "496.68 at 200k frames (SLM Lab" in row[0]


@pytest.mark.parametrize("values, expected", [([1, 2, 3], 2.0), ([1, 2, 3, 100], 2.5), ([5, 1, 2, 3, 4], 3.0)])
def test_iqm_trims_a_quarter_from_each_end(values, expected):
    sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    assert report.iqm(values) == expected


def test_speed_compares_td3_with_sb3_and_breaks_a_step_down_against_the_floor(tmp_path):
    """benchmark/speed.py on TD3: one (ours, SB3) pair that reaches updates on both sides, a ratio, peak memory, and a
    per-step breakdown whose FLOP count is the hand count of one critic update plus half an actor update."""
    out = tmp_path / "speed.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed.py"), "--pairs", "td3", "--repeats", "1",
                           "--steps", "2100", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in out.read_text().splitlines() if line.startswith("| `td3_continuous_action.py`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "Hopper-v5" and cells[2] == "2"  # env, threads
    ours_sps, sb3_sps = (float(c.replace(",", "")) for c in cells[3:5])
    ratio = float(cells[5].split("/")[1])
    # the SPS cells are rounded to whole steps/s: at the tens of steps/s a loaded suite gives, that is a few percent
    assert ours_sps > 0 and sb3_sps > 0
    assert (ours_sps - 0.5) / (sb3_sps + 0.5) - 0.01 <= ratio <= (ours_sps + 0.5) / (sb3_sps - 0.5) + 0.01
    assert all(float(mb) > 100 for mb in cells[6].split("/"))
    # Hopper: |S| 11, |A| 3, batch 256, 256-unit layers. Matmul FLOPs = 2 * batch * sum(fan_in * fan_out) per forward;
    # backward doubles it where weights and inputs both need gradients.
    def fwd(dims, copies=1):
        return 2 * 256 * copies * sum(a * b for a, b in zip(dims[:-1], dims[1:]))
    actor, critic = [11, 256, 256, 3], [14, 256, 256]  # the critics' output layer is a multiply-and-sum, not a matmul
    critic_update = fwd(actor) + fwd(critic, 2) + 3 * fwd(critic, 2) - 2 * 256 * 2 * 14 * 256  # no grad into (s, a)
    actor_update = 3 * fwd(actor) - 2 * 256 * 11 * 256 + 2 * fwd(critic, 1)  # critic 1: forward, input gradients
    note = out.read_text().split("per env step of the training phase")[1]
    gflop = float(note.split(" GFLOP of matrix products")[0].split(" ms for ")[1])
    assert gflop == pytest.approx((critic_update + actor_update / 2) / 1e9, abs=1.5e-3)
    assert "arithmetic floor" in note and "critic update" in note


def test_update_ab_times_a_revision_against_the_tree_in_one_process():
    """benchmark/update_ab.py with the tree against its own HEAD: both sides build and run TD3's updates, and each part
    prints both medians and a ratio."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "update_ab.py"), "--before", "HEAD", "--scripts",
                           "td3_continuous_action", "--repeats", "5"], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("td3_continuous_action.py")]
    assert [line.split(":")[0] for line in lines] == ["td3_continuous_action.py critic update",
                                                      "td3_continuous_action.py actor update"]
    for line in lines:
        ratio = float(line.split("median ratio after / before ")[1].split()[0])
        assert 0.2 < ratio < 5 and "(5 rounds)" in line


def test_update_ab_rejects_an_unknown_revision():
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "update_ab.py"), "--before", "no-such-rev",
                           "--scripts", "td3_continuous_action"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 1 and done.stderr.startswith("error: git show no-such-rev:td3_continuous_action.py")


def test_op_profile_lists_each_update_s_operators_with_the_matmul_share():
    """benchmark/op_profile.py on SAC: both updates are profiled; each lists --top operators whose per-update times do
    not exceed the printed total, and the matrix products' share is the sum of their listed rows."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "op_profile.py"), "--script", "sac_continuous_action",
                           "--steps", "3", "--rounds", "2", "--top", "200"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    sections = done.stdout.split("\n\n")[1:]
    assert [s.split(":")[0] for s in sections] == ["critic update", "actor update"]
    for section in sections:
        head, *rows = section.strip().splitlines()
        total = float(head.split(": ")[1].split(" us")[0])
        matmul = float(head.split("matrix products ")[1].split(" us")[0])
        listed = {row.split(maxsplit=3)[3]: float(row.split()[0]) for row in rows}
        assert "aten::baddbmm" in listed and "aten::addmm" in listed  # the critic ensemble and the actor's layers
        assert sum(listed.values()) == pytest.approx(total, rel=0.01, abs=len(listed) * 0.1)
        matmul_rows = [us for key, us in listed.items()
                       if key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")]
        # the header prints whole microseconds (off by up to 0.5), each row tenths (up to 0.05 each)
        assert matmul == pytest.approx(sum(matmul_rows), abs=0.5 + 0.05 * len(matmul_rows) + 1e-6)


def test_op_profile_rejects_a_zero_count():
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "op_profile.py"), "--steps", "0"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 2 and "must be at least 1" in done.stderr.strip().splitlines()[-1]


def test_baton_alternates_turns_and_lets_the_last_side_run_on_alone():
    """speed.Baton on two threads (the logic; speed.py puts the sides in two processes): turns of 3 steps alternate,
    first side first, neither side steps during the other's turn, each side records its timed turns, and when the
    shorter side finishes the longer one runs its remaining steps without waiting."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import threading

    import speed

    (read_1, write_0), (read_0, write_1) = os.pipe(), os.pipe()
    batons = speed.Baton(3, read_0, write_0), speed.Baton(3, read_1, write_1)
    log, lock = [], threading.Lock()

    def side(k, steps):
        baton = batons[k]
        baton.begin(first=k == 0)
        try:
            for n in range(steps):
                baton.tick(n)
                with lock:
                    log.append(k)
        finally:
            baton.finish()

    threads = [threading.Thread(target=side, args=(0, 10)), threading.Thread(target=side, args=(1, 16))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    # side 0: turns at steps 0-2, 3-5, 6-8, then step 9 and done; side 1: 0-2, 3-5, 6-8, then 9-15 alone
    assert log == [0] * 3 + [1] * 3 + [0] * 3 + [1] * 3 + [0] * 3 + [1] * 3 + [0] + [1] * 7
    assert sorted(batons[0].turns) == [0, 3, 6] and sorted(batons[1].turns) == [0, 3, 6, 9, 12]
    for fd in (read_0, write_0, read_1, write_1):
        os.close(fd)


def test_speed_interleaved_reports_a_ratio_per_round(tmp_path):
    """benchmark/speed.py --interleave: ours and SB3 take turns in two processes; after 2,000 random steps and one
    warm-up turn, (2,601 - 1 - 2,000) / 200 - 1 = 2 rounds are timed, and the row's ratios are the rounds'."""
    out = tmp_path / "speed.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed.py"), "--pairs", "td3", "--repeats", "1",
                           "--steps", "2601", "--interleave", "200", "--out", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `td3_continuous_action.py`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    ours_sps, sb3_sps = (float(c.replace(",", "")) for c in cells[3:5])
    low, median, high = (float(x) for x in cells[5].split("/"))
    assert ours_sps > 0 and sb3_sps > 0 and low <= median <= high
    assert "2 rounds of two 200-step turns in 1 pair(s) of processes" in text
    overall = float(text.split("ratio over all rounds ")[1].split(",")[0])
    # the SPS cells are rounded to whole steps/s, which at the tens a busy machine gives is a few percent
    assert (ours_sps - 0.5) / (sb3_sps + 0.5) - 1e-3 <= overall <= (ours_sps + 0.5) / (sb3_sps - 0.5) + 1e-3
    assert low <= overall <= high


@pytest.mark.parametrize("flags, message", [
    (["--pairs", "a2c", "--interleave", "100"], "--interleave works for --pairs sac td3 only"),
    (["--pairs", "td3", "--interleave", "500", "--steps", "2500"], "--interleave 500 needs --steps of at least 3,001"),
    (["--pairs", "td3", "--interleave-check"], "--interleave-check and --before need it"),
    (["--pairs", "td3", "--before", "HEAD"], "--interleave-check and --before need it"),
    (["--pairs", "td3", "--interleave", "500", "--interleave-check", "--before", "HEAD"], "give one of them"),
    (["--pairs", "td3", "--interleave", "500", "--before", "no-such-revision"], "is not a git revision"),
    (["--pairs", "td3", "--interleave", "500", "--before-flags=--no-compile"], "give --before REV too"),
])
def test_speed_rejects_bad_interleave_flags_in_one_line(flags, message):
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed.py"), *flags], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and message in done.stderr


def test_speed_before_writes_the_script_as_it_was_at_a_revision(tmp_path):
    """--before REV: the other side of the interleaved pair imports the script as `git show REV:script` gives it."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import speed

    speed.script_at("HEAD", "td3_continuous_action.py", str(tmp_path))
    shown = subprocess.run(["git", "show", "HEAD:td3_continuous_action.py"], cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0 and (tmp_path / "td3_continuous_action.py").read_text() == shown.stdout


def test_speed_interleaved_against_a_revision_times_both_sides(tmp_path):
    """--interleave with --before HEAD: the tree's script and HEAD's take turns; the note names the revision and the
    flags of its side."""
    out = tmp_path / "speed.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed.py"), "--pairs", "td3", "--repeats", "1",
                           "--steps", "2601", "--interleave", "200", "--before", "HEAD", "--before-flags=--no-compile",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert ("(--before HEAD: the script at HEAD in the second SPS column, run with `--no-compile`): 2 rounds of two "
            "200-step turns") in text
    assert "| ours SPS (median) | at HEAD SPS (median) |" in text
    assert "| peak MB ours / at HEAD |" in text
    assert "per pair " in text and "(ours first)" in text


def test_speed_before_flags_reach_the_revision_s_side_only():
    """A flag only REV's side gets, and that its script rejects, fails that side alone: the error names it."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed.py"), "--pairs", "td3", "--repeats", "1",
                           "--steps", "2601", "--interleave", "200", "--before", "HEAD",
                           "--before-flags=--no-such-flag"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert "interleaved before td3 failed" in done.stderr and "--no-such-flag" in done.stderr, done.stderr[-2000:]


def test_cold_step_times_an_env_step_after_each_kind_of_work():
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "cold_step.py"), "--env-id", "Pendulum-v1",
                           "--steps", "10", "--gap-ms", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| before")]
    names = [row.split("|")[1].strip() for row in rows]
    assert names == ["back to back", "busy Python 0.2 ms", "busy Python 1 ms", "sleep 1 ms", "matmul 1 ms"]
    assert all(float(row.split("|")[2]) > 0 for row in rows)


@pytest.mark.parametrize("flags, message", [
    (["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["--steps", "3"], "--steps must be at least 10"),
])
def test_cold_step_rejects_bad_input_in_one_line(flags, message):
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "cold_step.py"), *flags], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and message in done.stderr


def test_speed_before_a_revision_without_the_script_is_refused_in_one_line():
    """The repository's first commit predates td3_continuous_action.py (in a full clone)."""
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()[0]
    if subprocess.run(["git", "cat-file", "-e", f"{first}:td3_continuous_action.py"], cwd=ROOT,
                      capture_output=True).returncode == 0:
        pytest.skip("a shallow clone: its oldest commit already has the script")
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed.py"), "--pairs", "td3", "--interleave", "500",
                           "--before", first], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert f"td3_continuous_action.py does not exist at {first}" in done.stderr


@pytest.mark.parametrize("patch", sorted(p.name for p in (ROOT / "benchmark" / "experiments").glob("*.patch")))
def test_experiment_patch_still_applies_to_the_tree(patch):
    """The README's `git apply benchmark/experiments/...` commands reproduce an experiment only while its patch applies."""
    done = subprocess.run(["git", "apply", "--check", str(ROOT / "benchmark" / "experiments" / patch)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_probes_time_the_operators_under_each_thread_setting():
    done = subprocess.run([sys.executable, str(ROOT / "benchmark" / "experiments" / "probes.py"), "mkl"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["two", "one", "mixed"]
    assert all(line.count(" us") == 4 for line in lines)
