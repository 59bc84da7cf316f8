import os
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# tests/ on the scripts' subprocesses' path too: `--env-id grasp_env:PointGrasp-v0` imports the test
# env from there
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
# Headless MuJoCo rendering; must be set before mujoco is first imported.
os.environ.setdefault("MUJOCO_GL", "egl")
# One thread per process, in-process and in the scripts' subprocesses: pytest-xdist runs a worker
# per core, and the learning tests' thresholds were measured with one thread (thread count changes
# float reduction order).
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
torch.set_num_threads(1)

SCRIPTS = ["sac_continuous_action", "sac_hil_serl", "td3_continuous_action", "sac_atari", "a2c", "acer"]  # as modules

# A Pendulum run of SAC or TD3 of a few hundred steps that reaches 200 critic updates in about a
# second
TINY_CONTINUOUS = dict(
    env_id="Pendulum-v1",
    total_timesteps=300,
    learning_starts=100,
    batch_size=32,
    buffer_size=1_000,
    eval_freq=0,
    eval_episodes=1,
    log_freq=50,
    cuda=False,
)


def fake_envs(low, high, obs_dim=3):
    """The two attributes the Actor and QEnsemble of SAC and TD3 read from a vector env."""
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        single_action_space=gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32)),
    )


@pytest.fixture(autouse=True)
def inductor_as_in_a_new_process():
    """Inductor's settings as a new process has them, at each test's start: a setting that one
    script's --compile makes (fallback_random) must not reach another script's test in the same
    worker and make it pass."""
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.fallback_random = False


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test inside an empty directory, so that runs/ lands there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def scalars(run_dir) -> dict:
    """All TensorBoard scalars of a run directory: {tag: [(step, value), ...]}, purged events
    already dropped."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


LONG = ("test_learns_pendulum", "_on_slurm_", "test_learns_", "resumes")  # tests of 35 s to 140 s, longest first


def pytest_collection_modifyitems(items):
    """The long tests first, longest first (a stable sort keeps the rest in file order). With
    --maxschedchunk 2 (pyproject's addopts) pytest-xdist hands each worker two tests at a time, so
    the two workers start on the long ones and share the short ones at the end, and neither runs a
    learning test alone while the other idles."""
    items.sort(key=lambda item: next((i for i, part in enumerate(LONG) if part in item.name), len(LONG)))


def pytest_terminal_summary(terminalreporter):
    """Print what a passing test recorded with record_property("shown_in_summary", text): the Slurm
    test's sbatch and squeue output, which would otherwise stay in the captured output of a
    pytest-xdist worker."""
    for report in terminalreporter.stats.get("passed", []):
        for name, text in getattr(report, "user_properties", []):
            if name == "shown_in_summary":
                terminalreporter.write_sep("-", f"output of {report.nodeid}")
                terminalreporter.write_line(text.rstrip())


def fake_cuda_graphs(monkeypatch) -> list:
    """torch.cuda's streams and graphs made stand-ins that run on the CPU: recording runs nothing
    new, a replay only appends to the returned list. For the bookkeeping of a script's
    `Captured`."""
    import contextlib

    class Stream:
        def wait_stream(self, other):
            pass

    replays = []
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: SimpleNamespace(replay=lambda: replays.append(1)))
    monkeypatch.setattr(torch.cuda, "graph", lambda graph: contextlib.nullcontext())
    return replays


class EndsAtTimeLimit(gym.Env):
    """Each episode terminates at its 5th step, where its time limit also truncates it: both flags
    are set."""

    observation_space, action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(2, self.t / 5, np.float32), 1.0, self.t == 5, False, {}


gym.register("EndsAtTimeLimit-v0", entry_point=EndsAtTimeLimit, max_episode_steps=5)
