"""benchmark/run.py --backend slurm against a real single-node Slurm
(benchmark/slurm/local_cluster.sh): a tiny a2c grid submitted as a job array, followed with squeue
and reported; a resubmission submitting nothing; a task cancelled with scancel finishing, from its
checkpoint, when the grid is submitted again. Skipped unless RL_TEST_SLURM=1, and where the cluster
cannot be started: not root, or neither Slurm nor apt-get to install it."""

import glob
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import ROOT

CLUSTER = str(ROOT / "benchmark" / "slurm" / "local_cluster.sh")


@pytest.fixture
def cluster():
    """The cluster, for one test: pytest-xdist may run tests of a module on different workers, and a
    second test's teardown would stop the daemons under the first, so everything that needs Slurm is
    one test."""
    if os.environ.get("RL_TEST_SLURM") != "1":
        pytest.skip("RL_TEST_SLURM=1 starts a single-node Slurm for this test (as root; .ci/run sets it)")
    if os.geteuid() != 0:
        pytest.skip("starting the Slurm daemons needs root")
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        pytest.skip("Slurm is not installed and there is no apt-get to install slurm-wlm and munge")
    started = subprocess.run(["bash", CLUSTER, "start"], capture_output=True, text=True, timeout=900)
    assert started.returncode == 0, started.stdout + started.stderr
    yield
    subprocess.run(["bash", CLUSTER, "stop"], capture_output=True, timeout=120)


def grid(tmp_path, *args, seeds=("1", "2"), steps="400", extra="--eval-freq 200 --eval-episodes 2 --num-envs 4"):
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmark" / "run.py"),
            "--script",
            "a2c",
            "--envs",
            "CartPole-v1",
            "--seeds",
            *seeds,
            "--total-timesteps",
            steps,
            f"--extra={extra}",
            "--out",
            str(tmp_path / "grid"),
            "--backend",
            "slurm",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_dry_run_prints_the_batch_script(tmp_path):
    result = grid(
        tmp_path,
        "--dry-run",
        "--partition",
        "big",
        "--time",
        "1:00:00",
        "--mem",
        "4G",
        "--gpus-per-task",
        "1",
        "--cpus-per-task",
        "2",
    )
    assert result.returncode == 0, result.stderr
    for line in (
        "#SBATCH --array=0,1",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --partition=big",
        "#SBATCH --mem=4G",
        "#SBATCH --time=1:00:00",
        "#SBATCH --gres=gpu:1",
        "--run-index $SLURM_ARRAY_TASK_ID",
    ):
        assert line in result.stdout, line
    assert not (tmp_path / "grid").exists()


def test_grid_on_slurm_finishes_reports_resubmits_nothing_and_survives_scancel(cluster, tmp_path, record_property):
    # a 2-seed grid, followed with squeue to the end, then reported
    result = grid(tmp_path, "--wait")
    record_property("shown_in_summary", result.stdout)  # conftest prints it: sbatch and squeue of the real Slurm
    assert result.returncode == 0, result.stdout + result.stderr
    assert "$ sbatch --parsable" in result.stdout and "$ squeue -j" in result.stdout and "JOBID" in result.stdout
    for seed in (1, 2):
        assert (tmp_path / "grid" / "a2c" / "CartPole-v1" / f"seed_{seed}" / "DONE").exists()
    assert (tmp_path / "grid" / "report" / "CartPole-v1.png").exists()
    assert "| `a2c` | CartPole-v1 | 2 | 400 |" in (tmp_path / "grid" / "report" / "results.md").read_text()
    again = grid(tmp_path, "--wait")
    assert again.returncode == 0 and "nothing to submit" in again.stdout and "sbatch" not in again.stdout

    # a run cancelled with scancel stops with a checkpoint and finishes from it when the grid is
    # submitted again
    (tmp_path / "cancel").mkdir()
    long = dict(seeds=("1",), steps="200000", extra="--eval-freq 0 --eval-episodes 1")
    submitted = grid(tmp_path / "cancel", "--checkpoint-freq", "4000", **long)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = re.search(r"submitted job array (\d+)", submitted.stdout).group(1)
    run = tmp_path / "cancel" / "grid" / "a2c" / "CartPole-v1" / "seed_1"
    deadline = time.time() + 300
    while not glob.glob(f"{run}/runs/*/checkpoint.pt") and time.time() < deadline:
        time.sleep(0.1)
    cancel = subprocess.run(["scancel", job], capture_output=True, text=True)
    assert cancel.returncode == 0, (
        cancel.stderr,
        subprocess.run(["squeue"], capture_output=True, text=True).stdout,
        (run / "log.txt").read_text(),
    )
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline
        time.sleep(0.5)
    assert not (run / "DONE").exists() and "stopped by signal 15" in (run / "log.txt").read_text()
    resumed = grid(tmp_path / "cancel", "--checkpoint-freq", "4000", "--wait", **long)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 to submit" in resumed.stdout and (run / "DONE").exists()
    log = (run / "log.txt").read_text()
    assert "--resume" in log and "resumed" in log and "step 200,000: final eval" in log
