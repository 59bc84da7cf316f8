import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Headless MuJoCo rendering; must be set before mujoco is first imported.
os.environ.setdefault("MUJOCO_GL", "egl")
# One thread per process, in-process and in the scripts' subprocesses: pytest-xdist runs a worker per core, and the
# learning tests' thresholds were measured with one thread (thread count changes float reduction order).
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
torch.set_num_threads(1)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test inside an empty directory, so that runs/ lands there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def scalars(run_dir) -> dict:
    """All TensorBoard scalars of a run directory: {tag: [(step, value), ...]}, purged events already dropped."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def pytest_terminal_summary(terminalreporter):
    """Print what a passing test recorded with record_property("shown_in_summary", text): the Slurm test's sbatch and
    squeue output, which would otherwise stay in the captured output of a pytest-xdist worker."""
    for report in terminalreporter.stats.get("passed", []):
        for name, text in getattr(report, "user_properties", []):
            if name == "shown_in_summary":
                terminalreporter.write_sep("-", f"output of {report.nodeid}")
                terminalreporter.write_line(text.rstrip())
