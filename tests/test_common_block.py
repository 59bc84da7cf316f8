"""The common block, specified once: it is the same text in all six scripts, and its behaviour
(episode ends, environment snapshots, checkpoints and resume, bad input, --compile, --help, saved
models, video) is checked here against each script that it serves."""

import glob
import importlib
import io
import os
import re
import shlex
import shutil
import signal
import site
import subprocess
import sys
import time
import typing
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT, SCRIPTS, scalars

OFF_POLICY = SCRIPTS[:4]
# script -> (fields of a run of a few seconds that reaches its updates, an env of the wrong action
# space and the script its error points to)
OFF_POLICY_TINY = dict(learning_starts=100, batch_size=32, buffer_size=1_000)
TINY = {
    "sac_continuous_action": (OFF_POLICY_TINY, ("CartPole-v1", "sac_atari.py")),
    "sac_hil_serl": (OFF_POLICY_TINY, ("CartPole-v1", "sac_atari.py")),
    "td3_continuous_action": (OFF_POLICY_TINY, ("CartPole-v1", "sac_atari.py")),
    "sac_atari": (
        dict(OFF_POLICY_TINY, env_id="CartPole-v1", update_frequency=1, target_network_frequency=50),
        ("Pendulum-v1", "sac_continuous_action.py"),
    ),
    "a2c": (dict(env_id="CartPole-v1"), ("FrozenLake-v1", "observations")),
    "acer": (dict(env_id="CartPole-v1", replay_start=100), ("Pendulum-v1", "sac_continuous_action.py")),
}
COMMON_BAD_INPUT = {
    "unknown env id": (["--env-id", "NoSuchEnv-v0"], "unknown env id"),
    "module that does not import": (["--env-id", "nosuchmodule:Foo-v0"], "nosuchmodule"),
    "missing checkpoint": (["--resume", "nowhere/checkpoint.pt"], "No such file"),
    "corrupt checkpoint": (["--resume", "corrupt.pt"], "unreadable or damaged"),
    "zero envs": (["--num-envs", "0"], "--num-envs must be at least 1"),
    "negative eval freq": (["--eval-freq", "-1"], "--eval-freq must be at least 0"),
    "zero eval episodes": (["--eval-episodes", "0"], "--eval-episodes must be at least 1"),
    "negative checkpoint freq": (["--checkpoint-freq", "-5"], "--checkpoint-freq must be at least 0"),
    "zero log freq": (["--log-freq", "0"], "--log-freq must be at least 1"),
    "negative total timesteps": (["--total-timesteps", "-5"], "--total-timesteps must be at least 0"),
    "a negative seed": (["--seed", "-1"], "--seed must be at least 0"),
    "a seed beyond numpy's": (["--seed", "99999999999999"], "--seed must lie in [0, 2**32 - 1]"),
    "a broken --env-kwargs literal": (["--env-kwargs", "g:[1,2"], "--env-kwargs g:[1,2: a broken literal"),
    "an --env-kwargs key given twice": (["--env-kwargs", "g:9.81", "g:5"], "--env-kwargs g is given twice"),
    "an --env-kwargs value the env cannot use": (["--env-kwargs", "g:abc"], "cannot be made and stepped"),
}
# what tyro cannot parse: tyro's own message, which names the flag (and suggests the nearest one)
TYRO_BAD_INPUT = {
    "a mistyped flag": (["--total-timestep", "10"], ["--total-timestep", "Perhaps you meant", "--total-timesteps"]),
    "unparsable value": (["--seed", "abc"], ["--seed", "abc"]),
    "a float for an integer": (["--total-timesteps", "1e4"], ["--total-timesteps", "1e4"]),
    "a float for an integer, with =": (["--total-timesteps=1e4"], ["--total-timesteps", "1e4"]),
    "a bad value after good ones": (["--seed", "2", "--eval-freq", "x"], ["--eval-freq"]),
    "missing value": (["--seed"], ["--seed"]),
}
BLOCK_START = "# COMMON BLOCK:"
BLOCK_LINES = 466  # the block may shrink; it grows only for a guarantee, with its test
MEAN_CHARS = 59.6  # its mean characters per non-blank line (#56: at most 60): never raised by packing
ARGS_START, ARGS_END = "    # --- COMMON ARGS:", "    # --- END OF COMMON ARGS ---\n"


@pytest.fixture(params=SCRIPTS)
def script(request):
    return importlib.import_module(request.param)


def tiny(module, **overrides):
    base = dict(env_id="Pendulum-v1", total_timesteps=300, eval_freq=0, eval_episodes=1, log_freq=50, cuda=False)
    return module.Args(**{**base, **TINY[module.__name__][0], **overrides})


def script_path(module) -> str:
    return str(ROOT / f"{module.__name__}.py")


def run_cli(module, args, cwd, **kwargs):
    return subprocess.run(
        [sys.executable, script_path(module), *args], cwd=cwd, capture_output=True, text=True, timeout=600, **kwargs
    )


def common_regions(path) -> tuple:
    """(the COMMON ARGS lines, the COMMON BLOCK lines) of a script: the block runs from its banner
    to the end of cli()."""
    text = open(path).read()
    args = text[text.index(ARGS_START) : text.index(ARGS_END) + len(ARGS_END)]
    block = text[text.index(BLOCK_START) :]
    end = re.search(r"\n\ndef cli\(.*?\n(?=\S)", block, re.S)
    return args.splitlines(), block[: end.end() if end else len(block)].rstrip("\n").splitlines()


# --------------------------------------------------------------------------------------------------
# ONE BLOCK
# --------------------------------------------------------------------------------------------------
def test_the_common_block_is_the_same_text_in_all_six_scripts():
    regions = {name: common_regions(ROOT / f"{name}.py") for name in SCRIPTS}
    args, block = regions["sac_continuous_action"]
    for name, (other_args, other_block) in regions.items():
        assert other_args == args, f"{name}: its COMMON ARGS differ from sac_continuous_action.py's"
        assert other_block == block, f"{name}: its COMMON BLOCK differs from sac_continuous_action.py's"
    assert block[-1].startswith("    return summary")  # the block ends with cli()


def test_the_common_block_stays_small_without_packing():
    """The block a researcher copies with every script: its length from banner to the end of cli,
    and its mean characters per non-blank line (what packing would raise)."""
    _, block = common_regions(ROOT / "sac_continuous_action.py")
    filled = [line for line in block if line.strip()]
    assert len(block) <= BLOCK_LINES and sum(map(len, filled)) / len(filled) <= MEAN_CHARS, len(block)


def test_final_observations_replace_reset_rows_only(script):
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("Pendulum-v1", max_episode_steps=5) for _ in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=0)
    for _ in range(5):
        next_obs, _, _, truncations, infos = envs.step(envs.action_space.sample())
    assert truncations.all()
    real = script.final_observations(next_obs, infos)
    np.testing.assert_array_equal(real, np.stack(infos["final_obs"]))
    assert not np.allclose(real, next_obs)  # next_obs holds the reset observations
    np.testing.assert_array_equal(script.final_observations(next_obs, {}), next_obs)


def test_checkpointed_envs_continue_exactly(in_tmp):
    """Run.save_checkpoint pickles the sub-envs with their simulator state and RNG; a Run made from
    that checkpoint steps them on exactly as the originals (MuJoCo state, an Atari game with sticky
    actions)."""
    import sac_atari
    import sac_continuous_action as sac

    for module, env_id, actions in [
        (sac, "Hopper-v5", lambda rng: rng.uniform(-1, 1, (2, 3))),
        (sac_atari, "ALE/Breakout-v5", lambda rng: rng.integers(0, 4, 2)),
    ]:
        args = module.Args(env_id=env_id, num_envs=2, cuda=False, exp_name=env_id.replace("/", "_"))
        run = module.Run(args, None, torch.device("cpu"), "--batch-size", getattr(module, "observation_wrappers", None))
        counters, obs = run.resume({}, (0,), None)
        rng = np.random.default_rng(0)
        for _ in range(40):
            obs = run.envs.step(actions(rng))[0]
        path = run.save_checkpoint((40,), obs)
        plan = [actions(rng) for _ in range(200)]
        original = [run.envs.step(a)[0] for a in plan]
        run.__exit__(None, None, None)
        checkpoint = torch.load(path, weights_only=False)
        restored_run = module.Run(
            module.Args(**{**checkpoint["args"], "resume": path}),
            checkpoint,
            torch.device("cpu"),
            "--batch-size",
            getattr(module, "observation_wrappers", None),
        )
        counters, restored_obs = restored_run.resume({}, (0,), None)
        assert counters == (40,) and restored_run.exact
        np.testing.assert_array_equal(restored_obs, obs)
        np.testing.assert_array_equal(np.stack(original), np.stack([restored_run.envs.step(a)[0] for a in plan]))
        restored_run.__exit__(None, None, None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_checkpoint_written_on_the_cpu_resumes_on_a_gpu(in_tmp, script):
    """A CPU run's checkpoint holds an empty list of CUDA RNG states; resuming it where CUDA is
    present restores the rest and sets no CUDA state (the device is only named here: the restore is
    all that reads it)."""
    run = script.Run(tiny(script), None, torch.device("cpu"), "--batch-size")
    counters, obs = run.resume({}, (0,), None)
    path = run.save_checkpoint(counters, obs)
    run.__exit__(None, None, None)
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["rng"][3] == []
    torch.manual_seed(12345)
    resumed = script.Run(
        script.Args(**{**checkpoint["args"], "resume": path}), checkpoint, torch.device("cuda"), "--batch-size"
    )
    resumed.resume({}, (0,), None)
    resumed.__exit__(None, None, None)
    assert torch.equal(torch.get_rng_state(), checkpoint["rng"][0])


def test_crossed_finds_every_multiple_once():
    import a2c

    steps = list(range(0, 1000, 8))
    hits = [now for before, now in zip(steps, steps[1:]) if a2c.crossed(before, now, 100)]
    assert hits == [104, 200, 304, 400, 504, 600, 704, 800, 904] and not a2c.crossed(0, 99, 0)


# --------------------------------------------------------------------------------------------------
# DETERMINISM AND RESUME
# --------------------------------------------------------------------------------------------------
def last_logged(run_dir) -> int:
    """The last step of any scalar the run's events hold so far (-1: none)."""
    return max((step for values in scalars(run_dir).values() for step, _ in values), default=-1)


def stop_and_resume(tmp_path, module, flags, checkpoint_freq: int, total: int, name: str, sig=signal.SIGTERM) -> None:
    """Run `name` and stop it once its first periodic checkpoint exists: by SIGTERM (one line, no
    traceback, a checkpoint of where it stopped), or by SIGKILL once it has logged past that
    checkpoint (what it logged after it is dropped on resume); then resume it from elsewhere to the
    end: it writes beside the checkpoint."""
    (tmp_path / name).mkdir()
    proc = subprocess.Popen(
        [sys.executable, script_path(module), *flags, "--checkpoint-freq", str(checkpoint_freq)],
        cwd=tmp_path / name,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not glob.glob(f"{tmp_path}/{name}/runs/*/checkpoint.pt") and time.time() < deadline:
        time.sleep(0.02)
    (run_dir,) = glob.glob(f"{tmp_path}/{name}/runs/*")
    checkpoint = f"{run_dir}/checkpoint.pt"
    if sig == signal.SIGKILL:  # once the events hold a step past the checkpoint's: a growth of the
        (events,) = glob.glob(f"{run_dir}/events.*")  # file may be steps logged before it, flushed
        while proc.poll() is None:
            proc.send_signal(signal.SIGSTOP)  # frozen, so that no checkpoint lands between the check and the kill
            os.waitpid(proc.pid, os.WUNTRACED)  # until it has stopped
            if last_logged(run_dir) > torch.load(checkpoint, weights_only=False)["counters"][0]:
                break
            proc.send_signal(signal.SIGCONT)
            size = os.path.getsize(events)
            while os.path.getsize(events) == size and proc.poll() is None:
                time.sleep(0.005)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    stopped_at = torch.load(checkpoint, weights_only=False)["counters"][0]
    assert checkpoint_freq <= stopped_at < total
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "checkpoint written" in out and "Traceback" not in err
    else:
        assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
        assert last_logged(run_dir) > stopped_at  # to be dropped by the resumed run
    resumed = run_cli(module, ["--resume", checkpoint], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not (tmp_path / "runs").exists()


def check_stopped_runs_resume_exactly(
    tmp_path, module, flags, checkpoint_freq: int, total: int, model_keys, tags, kill: bool = False
):
    """Run a, and run c with the same flags stopped by SIGTERM at its first checkpoint and resumed
    (with `kill`, also run k, killed by SIGKILL past its first checkpoint and resumed from it): each
    ends with a's networks (model.pt's `model_keys`) and logged `tags`, determinism and exact resume
    in one, since a same-seed run that differed anywhere, before the stop or after it, would end
    elsewhere."""
    (tmp_path / "a").mkdir()
    result = run_cli(module, flags, tmp_path / "a")
    assert result.returncode == 0, result.stderr
    stop_and_resume(tmp_path, module, flags, checkpoint_freq, total, "c")
    if kill:
        stop_and_resume(tmp_path, module, flags, checkpoint_freq, total, "k", signal.SIGKILL)
    a = torch.load(glob.glob(f"{tmp_path}/a/runs/*/model.pt")[0], weights_only=False)
    logged_a = scalars(glob.glob(f"{tmp_path}/a/runs/*")[0])
    for d in "ck" if kill else "c":
        c = torch.load(glob.glob(f"{tmp_path}/{d}/runs/*/model.pt")[0], weights_only=False)
        for key in model_keys:  # tolerance 0: bit for bit
            torch.testing.assert_close(c[key], a[key], rtol=0, atol=0, msg=lambda m, key=key, d=d: f"{d} {key}: {m}")
        logged_c = scalars(glob.glob(f"{tmp_path}/{d}/runs/*")[0])
        for tag in tags:
            assert logged_a[tag] == logged_c[tag], (d, tag)


def resume_case(env_flags: list, model_keys: tuple) -> tuple:
    """(flags, checkpoint interval, total steps, model.pt's networks compared, logged tags compared)
    of a run that updates before and after its first checkpoint."""
    flags = [*env_flags, *"--total-timesteps 1500 --learning-starts 300 --batch-size 64 --eval-freq 500".split()]
    return flags, 400, 1500, model_keys, ("losses/qf_loss", "losses/actor_loss", "eval/episodic_return")


RESUME = {
    "sac_continuous_action": resume_case(["--env-id", "Pendulum-v1"], ("actor", "qf", "log_alpha")),
    "sac_hil_serl": resume_case(["--env-id", "Pendulum-v1"], ("actor", "qf", "log_alpha")),
    "td3_continuous_action": resume_case(["--env-id", "Pendulum-v1"], ("actor", "qf")),
    "sac_atari": resume_case(["--env-id", "CartPole-v1", "--update-frequency", "1"], ("actor", "qf1", "qf2")),
}


@pytest.mark.parametrize("name", list(RESUME))
def test_same_seed_is_identical_and_a_run_stopped_by_sigterm_or_killed_resumes_exactly(tmp_path, name):
    flags, checkpoint_freq, total, model_keys, tags = RESUME[name]
    flags = [*flags, "--eval-episodes", "1", "--save-model", "--log-freq", "50", "--no-cuda"]
    check_stopped_runs_resume_exactly(
        tmp_path, importlib.import_module(name), flags, checkpoint_freq, total, model_keys, tags, kill=True
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["sac_continuous_action", "td3_continuous_action"])
def test_a_captured_run_checkpoints_and_resumes_to_the_end_on_a_gpu(tmp_path, name):
    """On a GPU, with --compile (the captured path): SIGTERM at the first checkpoint, then --resume
    finishes the run."""
    flags, checkpoint_freq, total = RESUME[name][:3]
    flags = [*flags, "--eval-episodes", "1", "--save-model", "--log-freq", "50", "--compile"]
    stop_and_resume(tmp_path, importlib.import_module(name), flags, checkpoint_freq, total, "captured")
    assert glob.glob(f"{tmp_path}/captured/runs/*/model.pt") and glob.glob(f"{tmp_path}/captured/runs/*/finished")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sac_continuous_action", "td3_continuous_action"])
def test_a_compiled_run_stopped_by_sigterm_resumes_exactly(tmp_path, name):
    """--compile keeps Adam's state in the optimizers, so a checkpoint resumes the compiled path
    exactly."""
    flags, checkpoint_freq, total, model_keys, tags = RESUME[name]
    flags = [*flags, "--eval-episodes", "1", "--save-model", "--log-freq", "50", "--no-cuda", "--compile"]
    check_stopped_runs_resume_exactly(
        tmp_path, importlib.import_module(name), flags, checkpoint_freq, total, model_keys, tags
    )


def stored_replay_bytes(name: str, args, state: dict) -> int:
    """The bytes of the transitions a checkpoint's replay `state` holds, from each script's layout:
    stored transitions times bytes per transition (and SAC's frames: one per row, one per episode
    end and the newest rows' s')."""
    module = importlib.import_module(name)
    env = module.make_env(args, getattr(module, "observation_wrappers", None))()
    obs, act = env.observation_space, env.action_space
    env.close()
    if name == "a2c":  # no replay
        return 0
    if name == "acer":  # segments of T steps x N envs: s_0..s_T, then a, r, done and mu per step
        T, N, n = args.num_steps, args.num_envs, state["size"]
        return n * ((T + 1) * N * obs.shape[0] * 4 + T * N * (8 + 4 + 4 + act.n * 4))
    if name == "sac_atari":  # a slot per frame: obs, action (int64), reward, termination, age (int64), valid
        return int(state["size"].max()) * args.num_envs * (obs.shape[0] * 4 + 8 + 4 + 4 + 8 + 1)
    pixels = getattr(args, "from_pixels", False)
    vectors = int(np.prod(obs["state"].shape)) if pixels else obs.shape[0]
    columns = 4 if name == "sac_hil_serl" else 2  # r and terminated; HIL-SERL's also the penalty and a person's flag
    row = (2 * vectors + act.shape[0] + columns) * 4 + (name == "sac_hil_serl")  # HIL-SERL's: one byte, `ended`
    frame = int(np.prod(obs["pixels"].shape)) if pixels else 0
    ends = int(state["ended"].sum()) if pixels else 0
    return state["size"] * row + frame * (state["size"] + args.num_envs + ends)


CHECKPOINT_SIZE = {  # a replay 100 times the transitions stored
    "sac_continuous_action": {},
    "sac_hil_serl": {},
    "td3_continuous_action": {},
    "sac_atari": {},
    "a2c": {},
    "acer": dict(total_timesteps=640),
    "sac_hil_serl-pixels": dict(env_id="InvertedPendulum-v5", from_pixels=True, image_size=32),
    "sac_hil_serl-frame-stack": dict(env_id="InvertedPendulum-v5", from_pixels=True, image_size=32, frame_stack=2),
}


@pytest.mark.parametrize("case", list(CHECKPOINT_SIZE))
def test_a_checkpoint_holds_the_transitions_stored_not_the_whole_buffer(in_tmp, case):
    """checkpoint.pt's bytes stay within 1.2 x (stored transitions x bytes per transition) + the
    rest of the checkpoint (networks, optimizers, envs), whatever --buffer-size is: torch.save
    writes a view's whole underlying storage."""
    name = case.split("-")[0]
    module = importlib.import_module(name)
    args = tiny(
        module, checkpoint_freq=200, **({} if name == "a2c" else {"buffer_size": 30_000}), **CHECKPOINT_SIZE[case]
    )
    summary = module.main(args)
    path = f"{summary['run_dir']}/checkpoint.pt"
    checkpoint = torch.load(path, weights_only=False)
    replay = {"acer": "buffer", "a2c": None}.get(name, "rb")
    rest = io.BytesIO()
    torch.save({key: value for key, value in checkpoint.items() if key != replay}, rest)
    stored = stored_replay_bytes(name, args, checkpoint[replay]) if replay else 0
    assert stored or name == "a2c"
    zip_records = 4096  # torch.save's zip: a header and 64-byte alignment per tensor
    assert os.path.getsize(path) <= 1.2 * stored + len(rest.getvalue()) + zip_records, (os.path.getsize(path), stored)


def test_a_different_seed_gives_different_losses(in_tmp):
    import sac_continuous_action as sac

    runs = [scalars(sac.main(tiny(sac, seed=seed, exp_name=f"s{seed}"))["run_dir"]) for seed in (1, 2)]
    assert runs[0]["losses/qf_loss"] != runs[1]["losses/qf_loss"]


# --------------------------------------------------------------------------------------------------
# BAD INPUT: one line, exit code 2, nothing written
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(COMMON_BAD_INPUT))
def test_bad_input_one_line_exit_2_nothing_written(in_tmp, capsys, script, case):
    argv, needle = COMMON_BAD_INPUT[case]
    (in_tmp / "corrupt.pt").write_bytes(b"PK\x03\x04 this is not a checkpoint")
    with pytest.raises(SystemExit) as exit_info:
        script.cli(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert sorted(os.listdir(in_tmp)) == ["corrupt.pt"]


@pytest.mark.parametrize("case", list(TYRO_BAD_INPUT))
def test_what_tyro_cannot_parse_gets_tyro_s_message_exit_2_nothing_written(in_tmp, capsys, script, case):
    argv, needles = TYRO_BAD_INPUT[case]
    with pytest.raises(SystemExit) as exit_info:
        script.cli(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and all(needle in err for needle in needles), err
    assert os.listdir(in_tmp) == []


SQUASHED = ["sac_continuous_action", "sac_hil_serl", "td3_continuous_action"]
BOUNDS = [(-np.inf, np.inf), (-1.0, np.inf)]


@pytest.mark.parametrize(
    "name, low, high", [(n, *b) for n in [*SQUASHED, "a2c"] for b in BOUNDS] + [(n, 1.0, 1.0) for n in SQUASHED]
)
def test_a_box_without_finite_distinct_bounds_is_refused(name, low, high):
    """The scripts that scale or squash actions into their bounds refuse bounds that are infinite
    or empty; a2c.py's Gaussian, infinite ones (it clips to them)."""
    module = importlib.import_module(name)
    obs_space = gym.spaces.Box(-1, 1, (3,))
    with pytest.raises(module.ConfigError, match="finite"):
        module.check_spaces("X-v0", obs_space, gym.spaces.Box(low, high, (1,)))


class KeepsItsActions(gym.Env):
    """Keeps every action it gets; its Box, in `dtype`, is [-0.3, 0.9], bounds float32 misses."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, dtype: str = "float64"):
        self.action_space = gym.spaces.Box(-0.3, 0.9, (1,), np.dtype(dtype))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.actions = []
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.actions.append(np.asarray(action))
        return np.zeros(1, np.float32), 0.0, False, False, {}


gym.register("KeepsItsActions-v0", entry_point=KeepsItsActions)


@pytest.mark.parametrize("name", SQUASHED)
def test_an_action_a_rounding_puts_outside_the_box_reaches_the_env_inside_it(name):
    """bias + scale * tanh(u) at tanh's -1, or a clamp in float32, gives float32(-0.3) < -0.3: the
    scripts' envs clip each action into the Box, in its dtype; the script still reads the Box."""
    module = importlib.import_module(name)
    wrap = getattr(module, "observation_wrappers", None) or module.actions_in_bounds
    for dtype in ("float64", "float16"):
        env = module.make_env(module.Args(env_id="KeepsItsActions-v0", env_kwargs=(f"dtype:{dtype}",)), wrap)()
        env.reset(seed=0)
        for action in (np.float32([-0.3]), np.nextafter(np.float32([0.9]), np.float32(1)), np.float32([0.5])):
            env.step(action)  # below -0.3, above 0.9, inside
        box, kept = env.unwrapped.action_space, env.unwrapped.actions
        assert env.action_space == box and all(action.dtype == box.dtype for action in kept), kept
        np.testing.assert_array_equal(np.concatenate(kept), [box.low[0], box.high[0], np.float32(0.5).astype(dtype)])


class Stained(gym.Wrapper):
    """`base`, whose every info holds `key`."""

    def __init__(self, base: str, key: str):
        super().__init__(gym.make(base))
        self.key = key

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, self.key: np.zeros(1)}


gym.register("Stained-v0", entry_point=Stained)


@pytest.mark.parametrize("key", ["episode", "final_obs", "final_info"])
def test_an_env_whose_infos_hold_gymnasium_s_own_keys_is_refused_before_anything_is_written(
    in_tmp, capsys, script, key
):
    """RecordEpisodeStatistics asserts at an episode's end that "episode" is not yet in the info (a
    traceback mid-run, a run folder left); the vector env's "final_obs" and "final_info" would
    silently replace every s' with the env's own value. The trial env in setup finds them."""
    base = TINY[script.__name__][0].get("env_id", "Pendulum-v1")
    with pytest.raises(SystemExit) as exit_info:
        script.cli([*tiny_argv(script, env_id="Stained-v0"), "--env-kwargs", f"base:{base}", f"key:{key}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: Stained-v0's infos hold ['{key}'], gymnasium's own keys: rename them"), err
    assert os.listdir(in_tmp) == []


@pytest.mark.parametrize("shape", [(2, 2), (0,)])
@pytest.mark.parametrize("name", SQUASHED)
def test_a_box_of_actions_that_is_not_1_d_or_is_empty_is_refused(name, shape):
    """The continuous scripts act with vectors of the Box's first dimension: a (2, 2) Box would get
    actions of the wrong shape, and a (0,) Box has nothing to act on (HIL-SERL's gripper read its
    last dimension: an IndexError), so each is refused with what to do."""
    module = importlib.import_module(name)
    module.check_spaces("X-v0", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (4,)))
    with pytest.raises(
        module.ConfigError, match=re.escape(str(shape)) + ".* needs a 1-D Box of one action or more: .*ActionWrapper"
    ):
        module.check_spaces("X-v0", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, shape))


@pytest.mark.parametrize("name", ["sac_atari", "a2c", "acer"])
def test_discrete_actions_that_do_not_start_at_zero_are_refused(name):
    """The discrete scripts act with indices 0..n-1: a Discrete(n, start=1) space would get its
    actions shifted by one, so it is refused with what to do."""
    module = importlib.import_module(name)
    module.check_spaces("X-v0", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
    with pytest.raises(module.ConfigError, match="start at 1; .* gymnasium.ActionWrapper"):
        module.check_spaces("X-v0", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2, start=1))


def test_wrong_action_space_from_the_shell_is_one_line_that_names_what_to_use(tmp_path, script):
    env_id, hint = TINY[script.__name__][1]
    result = run_cli(script, ["--env-id", env_id], tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and hint in result.stderr, result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "PongNoFrameskip-v4"])
@pytest.mark.parametrize("name", ["sac_continuous_action", "sac_hil_serl", "td3_continuous_action"])
def test_an_atari_id_in_a_continuous_script_is_one_line_that_names_it(tmp_path, name, env_id):
    """The continuous scripts do not register ALE's ids (sac_atari.py, a2c.py and acer.py do): the
    id cannot be made, one line, and no ALE banner comes first."""
    result = run_cli(importlib.import_module(name), ["--env-id", env_id], tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: --env-id {env_id} cannot be made") and result.stderr.count("\n") == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("env_id", ["Pong-v4", "ale_py:Breakout-v0"])
@pytest.mark.parametrize("name", ["sac_atari", "a2c", "acer"])
def test_an_ale_id_that_skips_frames_itself_is_one_line_that_names_the_ids_to_use(tmp_path, name, env_id):
    """ALE's v0 and v4 ids without NoFrameskip skip 2 to 4 frames themselves, which the 4 that the
    Atari scripts skip would multiply: refused in one line that names the two ids to use instead."""
    game = env_id.split(":")[-1][:-3]
    result = run_cli(importlib.import_module(name), ["--env-id", env_id], tmp_path)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert f"use {game}NoFrameskip-v4 or ALE/{game}-v5" in result.stderr, result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "ALE/Pong-v5"])
@pytest.mark.parametrize("name", ["sac_atari", "a2c", "acer"])
def test_a_frameskip_for_an_atari_id_is_one_line(tmp_path, name, env_id):
    """The Atari wrappers skip 4 frames (ALE's own frameskip is set to 1 for ALE/*-v5): a frameskip
    in --env-kwargs, which would multiply them or be overridden unseen, is refused in one line."""
    result = run_cli(importlib.import_module(name), ["--env-id", env_id, "--env-kwargs", "frameskip:4"], tmp_path)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "--env-kwargs frameskip: the Atari wrappers skip 4 frames themselves" in result.stderr, result.stderr
    assert os.listdir(tmp_path) == []


def test_a_missing_package_is_one_line_that_says_what_to_install(in_tmp, capsys, monkeypatch, script):
    """gymnasium's DependencyNotInstalled (pygame for classic control's --capture-video) is passed
    on in the one line for an env that cannot be made, with what it says to install."""

    def make(*args, **kwargs):
        raise gym.error.DependencyNotInstalled(
            'pygame is not installed, run `pip install "gymnasium[classic-control]"`'
        )

    monkeypatch.setattr(gym, "make", make)
    with pytest.raises(SystemExit) as exit_info:
        script.cli(tiny_argv(script))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert "pygame is not installed, run `pip install" in err and os.listdir(in_tmp) == [], err


def test_compile_prints_no_torch_internal_note(tmp_path):
    """--compile runs the optimizer's step through dynamo, which notes once that it ignores the
    step's profiling context, and a CUDA build of torch on a CPU machine notes that it finds no
    CUDA runtime: those torch-internal lines are filtered out (a2c.py here; the filter is the common
    block's)."""
    import a2c

    result = run_cli(
        a2c,
        [
            "--env-id",
            "CartPole-v1",
            "--total-timesteps",
            "200",
            "--num-envs",
            "2",
            "--eval-freq",
            "0",
            "--eval-episodes",
            "1",
            "--log-freq",
            "20",
            "--compile",
            "--no-cuda",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "losses/policy_loss" in scalars(run_dir)  # the compiled update ran, so dynamo had its say
    assert "Profiler record function" not in result.stderr and not re.search(r"^W\d{4} ", result.stderr, re.M), (
        result.stderr
    )


@pytest.mark.parametrize("compiler", ["none", "a broken one"])
def test_compile_without_a_working_cpp_compiler_is_one_line_from_the_shell(tmp_path, script, compiler):
    """$CXX names the compiler inductor uses: one that does not exist, or one that exists and
    fails (`false`), fails the trial compile before the run: one line in inductor's words."""
    cxx = str(tmp_path / "no-such-c++") if compiler == "none" else shutil.which("false")
    result = run_cli(
        script,
        ["--env-id", TINY[script.__name__][0].get("env_id", "Pendulum-v1"), "--compile", "--no-cuda"],
        tmp_path,
        env={**os.environ, "CXX": cxx},
    )
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "--compile needs a working C++ compiler (g++, or $CXX): " in result.stderr, result.stderr
    assert "InvalidCxxCompiler" in result.stderr and cxx in result.stderr, result.stderr
    assert os.listdir(tmp_path) == []


def test_a_bad_mujoco_gl_is_the_one_line_with_no_traceback_after_it(tmp_path):
    """MUJOCO_GL=glx (no such backend) fails the trial env's renderer half-made; its __del__ then
    raised at exit, a traceback after the error line."""
    import sac_continuous_action as sac

    argv = [*tiny_argv(sac, env_id="InvertedPendulum-v5"), "--capture-video"]
    result = run_cli(sac, argv, tmp_path, env={**os.environ, "MUJOCO_GL": "glx"})
    assert result.returncode == 2 and result.stdout == "" and os.listdir(tmp_path) == []
    assert result.stderr.count("\n") == 1 and "MUJOCO_GL must be one of" in result.stderr, result.stderr


@pytest.mark.parametrize("variable", ["IMAGEIO_FFMPEG_EXE", "FFMPEG_BINARY"])
def test_capture_video_without_its_ffmpeg_is_one_line_before_anything_is_written(tmp_path, script, variable):
    """moviepy finds its encoder through imageio-ffmpeg, or through $FFMPEG_BINARY; one that is not
    there is refused before the run starts, not met at the first evaluation as a traceback."""
    tiny = {"env_id": "Pendulum-v1", **TINY[script.__name__][0], "total_timesteps": 200, "eval_episodes": 1}
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in tiny.items()]
    result = run_cli(
        script,
        [*flags, "--capture-video", "--no-cuda"],
        tmp_path,
        env={**os.environ, variable: str(tmp_path / "no-such-ffmpeg")},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--capture-video needs moviepy and its ffmpeg" in result.stderr
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------------------
# IMPORT, --help, SAVED MODELS, VIDEO
# --------------------------------------------------------------------------------------------------
def test_import_does_nothing(tmp_path, script):
    """Importing a script prints and writes nothing and loads none of what only a run needs: ALE,
    MuJoCo, the video encoder, the actor-learner messaging."""
    optional = ["ale_py", "mujoco", "moviepy", "zmq"]
    loaded = f"[m for m in {optional} if m in sys.modules]"
    code = f"import sys; sys.path.insert(0, sys.argv[1]); import {script.__name__}; print({loaded})"
    result = subprocess.run([sys.executable, "-c", code, str(ROOT)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "[]" and result.stderr == "", result
    assert os.listdir(tmp_path) == []


def test_help_lists_every_flag(script):
    result = subprocess.run(
        [sys.executable, script_path(script), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert result.returncode == 0
    for field in script.Args.__dataclass_fields__:
        assert "--" + field.replace("_", "-") in result.stdout, field


SNIPPET_MODELS = {name: {} for name in SCRIPTS} | {  # HIL-SERL's page loads pixel and gripper models too
    "sac_hil_serl-pixels": dict(env_id="InvertedPendulum-v5", from_pixels=True, image_size=16),
    "sac_hil_serl-gripper": dict(env_id="grasp_env:PointGrasp-v0", num_discrete_actions=3),
}


def page_steps(page: str, name: str) -> list:
    """The commands of the bash block(s) that the page's "Saving and loading a model" section gives
    before its load snippet, comments dropped."""
    section = page.split("## Saving and loading a model", 1)[1].split(f"<!-- load-model {name} -->")[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.split("#")[0].strip()]


def new_venv(path):
    """A new virtual environment at path whose third-party packages are this interpreter's (a .pth
    file names its site-packages, where `pip install -r requirements/...` put them), and where no
    script of this repository is importable. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = str(path / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "parent_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


@pytest.mark.parametrize("case", list(SNIPPET_MODELS))
def test_saved_model_loads_and_evaluates_as_the_page_shows_headless(in_tmp, case):
    """The page's snippet, run as written from another directory in a new virtual environment, in
    a new process with no display and no MUJOCO_GL, after the steps the page gives (`pip install -e
    .` from a clone; --no-deps --no-build-isolation added, as the venv already sees the
    dependencies and the test reaches no index), gives the run's evaluation returns. Before those
    steps the snippet's import fails. The gripper's model needs its env's module, `grasp_env`, on
    PYTHONPATH, as the page says; no other model has anything there."""
    module = importlib.import_module(case.split("-")[0])
    summary = module.main(tiny(module, save_model=True, eval_episodes=2, **SNIPPET_MODELS[case]))
    page = (ROOT / "docs" / f"{module.__name__}.md").read_text()
    snippet = page.split(f"<!-- load-model {module.__name__} -->")[1].split("```python")[1].split("```")[0]
    code = snippet.replace("runs/RUN_NAME/model.pt", str(in_tmp / summary["run_dir"] / "model.pt"))
    clone = in_tmp / "clone"  # the files `pip install -e .` reads
    clone.mkdir()
    for name in ["pyproject.toml", "README.md", *(f"{script}.py" for script in SCRIPTS)]:
        shutil.copy(ROOT / name, clone / name)
    python = new_venv(in_tmp / "venv")
    (in_tmp / "elsewhere").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "PYTHONPATH")}
    if "gripper" in case:
        env["PYTHONPATH"] = str(ROOT / "tests")  # grasp_env, the env's module, and nothing of the scripts

    def run_elsewhere(code):
        return subprocess.run(
            [python, "-c", code], cwd=in_tmp / "elsewhere", env=env, capture_output=True, text=True, timeout=600
        )

    before = run_elsewhere(f"import {module.__name__}")  # the snippet's import, before the page's steps
    assert before.returncode == 1 and f"ModuleNotFoundError: No module named '{module.__name__}'" in before.stderr
    steps = page_steps(page, module.__name__)
    assert steps == ["pip install -e ."], steps
    for step in steps:
        argv = [python, "-m", *shlex.split(step), "--no-deps", "--no-build-isolation", "-q"]
        subprocess.run(argv, cwd=clone, env=env, check=True, capture_output=True)
    result = run_elsewhere(code + "\nprint(*returns.tolist())")
    assert result.returncode == 0, result.stderr
    returns = np.array(result.stdout.splitlines()[-1].split(), dtype=float)
    assert returns.shape == (10,)
    # the snippet's evaluation is the script's: the first two of its episodes are the run's final
    # evaluation
    assert returns[:2].mean() == pytest.approx(summary["eval_return"])


def check_capture_video(tmp_path, module, flags, loss_tag: str):
    """--capture-video writes an mp4 of an evaluation episode, in a run whose updates ran (they
    logged `loss_tag`)."""
    result = run_cli(
        module, [*flags, "--eval-episodes", "1", "--log-freq", "20", "--capture-video", "--no-cuda"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert glob.glob(f"{tmp_path}/runs/*/videos/step_*/*.mp4")
    assert scalars(glob.glob(f"{tmp_path}/runs/*")[0])[loss_tag], loss_tag


@pytest.mark.parametrize("name", OFF_POLICY)
def test_smoke_capture_video(tmp_path, name):
    video_env = "BreakoutNoFrameskip-v4" if name == "sac_atari" else "InvertedPendulum-v5"  # no pygame
    check_capture_video(
        tmp_path,
        importlib.import_module(name),
        ["--env-id", video_env, "--total-timesteps", "300", "--learning-starts", "100", "--batch-size", "32"],
        "losses/qf_loss",
    )


# --------------------------------------------------------------------------------------------------
# NON-FINITE FLAGS, THE NaN GUARD, SAVES THAT FAIL
# --------------------------------------------------------------------------------------------------
def test_non_finite_float_flags_are_refused(in_tmp, capsys, script):
    hints = typing.get_type_hints(script.Args)
    floats = [name for name, hint in hints.items() if float in (hint, *typing.get_args(hint))]  # float | None too
    assert floats
    for name, value in [(name, value) for name in floats for value in ("inf", "-inf", "nan")]:
        with pytest.raises(SystemExit) as exit_info:
            script.cli([f"--{name.replace('_', '-')}", value])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "must be finite" in err, (name, value, err)
    assert os.listdir(in_tmp) == []


DIVERGE = {  # flags of a run whose learning rates make it diverge after a checkpoint taken before its first update
    "sac_continuous_action": [
        "--env-id",
        "Pendulum-v1",
        "--learning-starts",
        "500",
        "--batch-size",
        "64",
        "--policy-lr",
        "1e6",
        "--q-lr",
        "1e6",
    ],
    "sac_hil_serl": [
        "--env-id",
        "Pendulum-v1",
        "--learning-starts",
        "500",
        "--batch-size",
        "64",
        "--policy-lr",
        "1e6",
        "--q-lr",
        "1e6",
    ],
    "td3_continuous_action": [
        "--env-id",
        "Pendulum-v1",
        "--learning-starts",
        "500",
        "--batch-size",
        "64",
        "--learning-rate",
        "1e6",
    ],
    "sac_atari": [
        "--env-id",
        "CartPole-v1",
        "--learning-starts",
        "500",
        "--batch-size",
        "64",
        "--update-frequency",
        "1",
        "--policy-lr",
        "1e6",
        "--q-lr",
        "1e6",
    ],
    "a2c": ["--env-id", "CartPole-v1", "--learning-rate", "1e30"],
    "acer": ["--env-id", "CartPole-v1", "--learning-rate", "1e30", "--replay-start", "100"],
}


DIVERGING_RUN = shlex.split(
    "--total-timesteps 3200 --checkpoint-freq 400 --log-freq 40 --eval-freq 0 --eval-episodes 1 --save-model"
)


@pytest.mark.parametrize("name", list(DIVERGE))
def test_a_diverging_run_stops_with_one_line_and_saves_nothing_non_finite(tmp_path, name):
    module = importlib.import_module(name)
    flags = [*DIVERGE[name], *DIVERGING_RUN, "--no-cuda"]
    result = run_cli(module, flags, tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: step ") and "the run diverged" in result.stderr, result.stderr
    assert not glob.glob(f"{tmp_path}/runs/*/model.pt") and not glob.glob(f"{tmp_path}/runs/*/*.tmp")
    checkpoints = glob.glob(f"{tmp_path}/runs/*/checkpoint.pt")
    assert checkpoints or name in ("a2c", "acer")  # the off-policy runs checkpoint before their first update
    for path in checkpoints:  # the last good checkpoint: loadable, finite
        checkpoint = torch.load(path, weights_only=False)
        tensors = [
            t
            for value in checkpoint.values()
            if isinstance(value, dict)
            for t in value.values()
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        ]
        assert tensors and all(t.isfinite().all() for t in tensors)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["sac_continuous_action", "td3_continuous_action"])
def test_a_diverging_captured_run_stops_with_one_line_on_a_gpu(tmp_path, name):
    """The NaN guard on the captured path, where the metrics it reads at --log-freq are the graphs'
    outputs."""
    flags = [*DIVERGE[name], *DIVERGING_RUN, "--compile"]
    result = run_cli(importlib.import_module(name), flags, tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "the run diverged" in result.stderr, (
        result.stderr
    )
    assert not glob.glob(f"{tmp_path}/runs/*/model.pt")


def test_a_failed_save_keeps_the_previous_checkpoint_and_no_temporary_file(in_tmp, monkeypatch, script):
    run = script.Run(tiny(script), None, torch.device("cpu"), "--batch-size")
    try:
        _, obs = run.resume({"net": torch.nn.Linear(2, 2)}, (0,), None)
        path = run.save_checkpoint((10,), obs)

        def disk_full(obj, f):
            f.write(b"half a checkpoint")
            raise OSError(28, "No space left on device")

        with (
            monkeypatch.context() as patch,
            pytest.raises(script.ConfigError, match="No space left on device.*previous"),
        ):
            patch.setattr(torch, "save", disk_full)
            run.save_checkpoint((20,), obs)
        assert "checkpoint.pt.tmp" not in os.listdir(run.dir)
        assert torch.load(path, weights_only=False)["counters"] == (10,)
    finally:
        run.__exit__(None, None, None)


# --------------------------------------------------------------------------------------------------
# RUN DIRECTORIES, FINISHED RUNS, THE STOP MESSAGE, THE PROGRESS LINE
# --------------------------------------------------------------------------------------------------
def tiny_argv(module, **overrides) -> list:
    """tiny()'s fields as command-line flags."""
    fields = {
        **dict(env_id="Pendulum-v1", total_timesteps=300, eval_freq=0, eval_episodes=1, log_freq=50),
        **TINY[module.__name__][0],
        **overrides,
    }
    return [a for key, value in fields.items() for a in (f"--{key.replace('_', '-')}", str(value))] + ["--no-cuda"]


@pytest.mark.parametrize("case", ["runs is a file", "a 300-character name", "a read-only directory"])
def test_a_run_directory_that_cannot_be_written_is_one_line_and_nothing_is_written(in_tmp, capsys, script, case):
    argv = tiny_argv(script)
    if case == "runs is a file":
        (in_tmp / "runs").write_text("")
    elif case == "a 300-character name":
        argv += ["--exp-name", "x" * 300]
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes to read-only directories")
        os.chmod(in_tmp, 0o555)
    try:
        with pytest.raises(SystemExit) as exit_info:
            script.cli(argv)
    finally:
        os.chmod(in_tmp, 0o755)
    err = "".join(line for line in capsys.readouterr().err.splitlines(True) if not line.startswith("note: "))
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert ("shorten --exp-name" if "name" in case else "nothing is written") in err, err
    assert os.listdir(in_tmp) == (["runs"] if case == "runs is a file" else [])


@pytest.mark.parametrize("memory", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["sac_continuous_action", "td3_continuous_action", "sac_atari", "acer"])
def test_a_buffer_beyond_the_machine_s_memory_is_one_line_and_nothing_is_written(
    in_tmp, capsys, monkeypatch, name, memory
):
    """Torch cannot allocate a replay of 10^12 transitions: one line naming --buffer-size, after the
    envs and networks are built but before the run directory is made, so nothing is on disk. On a
    GPU torch raises its OutOfMemoryError instead (raised here by the buffer's constructor, as
    CUDA's allocator words it)."""
    script = importlib.import_module(name)

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 3.64 TiB. GPU 0 has a total capacity "
            "of 79.19 GiB of which 78.61 GiB is free."
        )

    if memory == "cuda":
        monkeypatch.setattr(
            getattr(script, "SegmentBuffer" if name == "acer" else "ReplayBuffer"), "__init__", out_of_memory
        )
    else:
        try:
            torch.empty(4 * 10**12, dtype=torch.uint8)
            pytest.skip("this OS grants a 4 TB allocation (overcommit): a replay that big would not fail at once")
        except RuntimeError:
            pass
    with pytest.raises(SystemExit) as exit_info:
        script.cli(tiny_argv(script, buffer_size=10**12, total_timesteps=10**13))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "out of memory" in err, err
    assert "lower --buffer-size" in err and os.listdir(in_tmp) == []


MEMORY_FLAGS = {
    "sac_continuous_action": "--buffer-size or --batch-size",
    "sac_hil_serl": "--buffer-size or --batch-size (with images, also --image-size)",
    "td3_continuous_action": "--buffer-size or --batch-size",
    "sac_atari": "--buffer-size or --batch-size",
    "a2c": "--num-envs or --num-steps",
    "acer": "--buffer-size, --num-envs or --num-steps",
}


def test_running_out_of_memory_in_training_names_the_flags_that_size_a_step(in_tmp, capsys, monkeypatch, script):
    """A failure to allocate once training runs (a CUDA OOM in an update, raised here where the step
    logs): one line naming the flags that size what the run allocates; exit code 2."""

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.19 GiB of which 1.02 GiB is free."
        )

    monkeypatch.setattr(script.Run, "log", out_of_memory)
    with pytest.raises(SystemExit) as exit_info:
        script.cli(tiny_argv(script))
    err = "".join(line for line in capsys.readouterr().err.splitlines(True) if not line.startswith("note: "))
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err == (
        "error: out of memory (CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        f"total capacity of 79.19 GiB of which 1.02 GiB is free.): lower {MEMORY_FLAGS[script.__name__]}\n"
    ), err


def test_resuming_another_script_s_checkpoint_or_a_model_says_what_the_file_is(in_tmp, capsys):
    """A checkpoint names the script that wrote it, so another script's is refused for what it is,
    before the finished run's --resume-anyway is asked for; so is a model.pt. One written before
    checkpoints named their script is refused as not this script's."""
    import sac_atari
    import td3_continuous_action as td3

    summary = sac_atari.main(tiny(sac_atari, checkpoint_freq=200, save_model=True))  # a finished run
    checkpoint, model = (f"{summary['run_dir']}/{name}" for name in ("checkpoint.pt", "model.pt"))
    unnamed = torch.load(checkpoint, weights_only=False)
    del unnamed["script"]
    torch.save(unnamed, in_tmp / "unnamed.pt")
    for argv, needle in (
        (["--resume", checkpoint], "a file of sac_atari.py, not a checkpoint of td3_continuous_action.py"),
        (["--resume", model], "a file of --save-model, not a checkpoint of td3_continuous_action.py"),
        (["--resume", str(in_tmp / "unnamed.pt"), "--resume-anyway"], "a file of None, not a checkpoint of td3"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            td3.cli(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err


def test_a_finished_run_refuses_resume_unless_told_and_then_runs_again(in_tmp, capsys, script):
    summary = script.cli(tiny_argv(script, checkpoint_freq=250, total_timesteps=600))
    checkpoint = f"{summary['run_dir']}/checkpoint.pt"
    assert os.path.isfile(checkpoint) and os.path.isfile(f"{summary['run_dir']}/finished")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        script.cli(["--resume", checkpoint])
    err, end = capsys.readouterr().err, summary["global_step"]
    assert exit_info.value.code == 2 and err.count("\n") == 1 and f"finished at step {end}" in err, err
    step = torch.load(checkpoint, weights_only=False)["counters"][0]
    assert f"to go on from this checkpoint's step {step:,}, dropping what it logged later" in err and step < end
    resumed = script.cli(["--resume", checkpoint, "--resume-anyway"])
    assert resumed["global_step"] == end and os.path.isfile(f"{summary['run_dir']}/finished")


def test_a_stopped_run_prints_a_command_that_continues_it_from_anywhere(tmp_path):
    import sac_continuous_action as sac

    (tmp_path / "a").mkdir()
    proc = subprocess.Popen(
        [sys.executable, script_path(sac), *tiny_argv(sac, total_timesteps=100_000)],
        cwd=tmp_path / "a",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not glob.glob(f"{tmp_path}/a/runs/*/events.*") and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    command = out.strip().splitlines()[-1]
    assert command.startswith(f"{sys.executable} /") and "--resume /" in command, out
    os.makedirs(tmp_path / "b")
    proc = subprocess.Popen(
        [sys.executable, *command.split()[1:]],
        cwd=tmp_path / "b",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120  # the resumed run opens a second event file beside the first, then handles signals
    while len(glob.glob(f"{tmp_path}/a/runs/*/events.*")) < 2 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT and "resumed" in out, err
    assert os.listdir(tmp_path / "b") == []  # it writes beside its checkpoint


def test_the_progress_line_overwrites_itself_and_shows_the_recent_sps(in_tmp, capsys, monkeypatch, script):
    run = script.Run(tiny(script, log_freq=50), None, torch.device("cpu"), "--batch-size")
    try:
        run.resume({}, (0,), None)
        with monkeypatch.context() as patch:
            patch.setattr(sys.stdout, "isatty", lambda: True)  # a terminal
            now = [100.0]
            patch.setattr(time, "time", lambda: now[0])
            run.last_log, run.last_return, now[0] = (100.0, 0), -1234.5678, 110.0
            run.log({}, {"loss": torch.tensor(1.0)}, 0, 50)  # 50 steps in 10 s
            run.last_return, now[0] = 58.0, 111.0
            run.log({}, {"loss": torch.tensor(1.0)}, 50, 100)  # 50 steps in 1 s: 9 SPS since the start, 50 recently
    finally:
        run.__exit__(None, None, None)
    first, second = capsys.readouterr().out.split("\r")[1:]
    assert "SPS 5 " in first and "SPS 50 " in second
    assert "last return -1234.57 " in first  # two decimals
    assert len(second) >= len(first) and second.rstrip().endswith("58.00")  # nothing of the longer line is left


def test_the_progress_line_before_any_episode_ends_shows_no_return_yet(in_tmp, capsys, script):
    run = script.Run(tiny(script, log_freq=50), None, torch.device("cpu"), "--batch-size")
    try:
        run.resume({}, (0,), None)
        run.log({}, {"loss": torch.tensor(1.0)}, 0, 50)
    finally:
        run.__exit__(None, None, None)
    assert capsys.readouterr().out.rstrip().endswith("last return -")


def test_an_error_after_a_progress_line_starts_a_line_of_its_own(tmp_path):
    """The NaN guard's error comes after the progress line that was on the terminal, on a line of
    its own."""
    module = importlib.import_module("td3_continuous_action")
    flags = [
        *DIVERGE["td3_continuous_action"],
        "--total-timesteps",
        "3200",
        "--log-freq",
        "1",
        "--eval-freq",
        "0",
        "--eval-episodes",
        "1",
        "--no-cuda",
    ]
    result = subprocess.run(
        [sys.executable, script_path(module), *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )  # both streams, as a terminal shows them
    assert result.returncode == 2
    errors = [line for line in result.stdout.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("error: step "), result.stdout[-500:]


def test_odd_characters_of_the_exp_name_and_env_id_become_dashes_in_the_run_folder(in_tmp):
    """A tab or a newline in --exp-name and the ':' of a module-qualified env id make no odd file
    names."""
    import sac_continuous_action as sac

    summary = sac.main(tiny(sac, env_id="gymnasium.envs.classic_control:Pendulum-v1", exp_name="a b\tc\nd/e"))
    name = os.path.basename(summary["run_dir"])
    assert name.startswith("gymnasium.envs.classic_control-Pendulum-v1__a-b-c-d-e__1__"), name


def test_runs_of_one_name_started_in_the_same_second_each_get_a_folder_of_their_own(in_tmp, monkeypatch):
    """A sweep started with `&` names its runs alike to the second: a later run takes the next free
    second's name, and each run keeps its own logs and model.pt."""
    import sac_continuous_action as sac

    monkeypatch.setattr(sac.time, "time", lambda: 1_700_000_000.0)
    dirs = [sac.main(tiny(sac, q_lr=lr, save_model=True))["run_dir"] for lr in (1e-3, 3e-4, 1e-4)]
    names = [os.path.basename(d) for d in dirs]
    assert names == [f"Pendulum-v1__sac_continuous_action__1__{1_700_000_000 + k}" for k in range(3)], names
    for run_dir, lr in zip(dirs, (1e-3, 3e-4, 1e-4)):
        assert len(glob.glob(f"{run_dir}/events.out.tfevents.*")) == 1
        assert torch.load(f"{run_dir}/model.pt", weights_only=False)["args"]["q_lr"] == lr


def test_the_progress_line_in_a_file_is_a_whole_line_at_each_log_interval(tmp_path):
    """Redirected to a file, the progress line comes as whole lines, one per log interval, with no
    carriage returns."""
    import td3_continuous_action as td3

    result = run_cli(td3, tiny_argv(td3, log_freq=100), tmp_path)
    assert result.returncode == 0 and "\r" not in result.stdout, result.stdout
    progress = [line for line in result.stdout.splitlines() if line.startswith("step ") and "SPS" in line]
    assert [line.split()[1] for line in progress] == ["100", "200", "300"], result.stdout


# --------------------------------------------------------------------------------------------------
# A FULL DISK, A DAMAGED CHECKPOINT, FLAGS BESIDE --resume
# --------------------------------------------------------------------------------------------------
class FullDisk(io.RawIOBase):
    """A file that takes `room` bytes, then fails as a full disk does (ENOSPC)."""

    def __init__(self, f, room: int):
        self.f = f
        self.room = room

    def writable(self):
        return True

    def write(self, data):
        if self.room < len(data):
            raise OSError(28, "No space left on device")
        self.room -= len(data)
        return self.f.write(data)


def test_a_save_onto_a_full_disk_is_one_line_removes_its_temporary_file_and_keeps_the_last_checkpoint(
    in_tmp, monkeypatch, script
):
    """torch.save onto a disk that fills up raises its own RuntimeError, which hides the ENOSPC: the
    save still ends in one ConfigError line, no checkpoint.pt.tmp is left and the last good
    checkpoint stays."""
    save = torch.save
    run = script.Run(tiny(script), None, torch.device("cpu"), "--batch-size")
    try:
        _, obs = run.resume({"net": torch.nn.Linear(2, 2)}, (0,), None)
        path = run.save_checkpoint((10,), obs)
        monkeypatch.setattr(torch, "save", lambda obj, f: save(obj, FullDisk(f, 2000)))
        with pytest.raises(script.ConfigError, match="cannot write .*checkpoint.pt.*previous checkpoint"):
            run.save_checkpoint((20,), obs)
        assert "checkpoint.pt.tmp" not in os.listdir(run.dir)
        assert torch.load(path, weights_only=False)["counters"] == (10,)
    finally:
        run.__exit__(None, None, None)


class Breaks(gym.Wrapper):
    """`base`, whose `at`-th step raises, as a robot's dropped link or a simulator's fault would
    (once in a process: an env made after it steps on)."""

    broke = False

    def __init__(self, base: str, at: int):
        super().__init__(gym.make(base))
        self.at = at
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at and not Breaks.broke:
            Breaks.broke = True
            raise OSError("the link to the robot dropped")
        return self.env.step(action)


gym.register("Breaks-v0", entry_point=Breaks)


def test_an_error_mid_run_writes_a_checkpoint_of_what_the_run_holds_and_the_command_to_go_on(
    in_tmp, capsys, monkeypatch, script
):
    """An env that raises at its 250th step, after the updates began: the error ends the run with
    its traceback, after a checkpoint of the replay and networks at the last step's end (HIL-SERL's:
    where the step stands) and the command that continues it, with new episodes, to its end."""
    base = TINY[script.__name__][0].get("env_id", "Pendulum-v1")
    monkeypatch.setattr(Breaks, "broke", False)
    at = 250 // script.Args().num_envs  # each sub-env's steps
    argv = [*tiny_argv(script, env_id="Breaks-v0", total_timesteps=400), "--env-kwargs", f"base:{base}", f"at:{at}"]
    with pytest.raises(OSError, match="the link to the robot dropped"):
        script.cli(argv)
    out = capsys.readouterr().out
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt"))
    command = shlex.join([sys.executable, script_path(script), "--resume", checkpoint])
    assert out.strip().splitlines()[-1] == command, out
    counters = torch.load(checkpoint, weights_only=False)["counters"]
    assert f"ended by an error at step {counters[0]:,}; checkpoint written to " in out, out
    assert 100 < counters[0] < 250 and counters[1] > 0  # updates ran before it
    summary = script.cli(["--resume", checkpoint])
    out = capsys.readouterr().out
    assert f"at step {counters[0]:,}; new episodes start" in out and summary["global_step"] > 300, out
    assert os.path.isfile(os.path.join(os.path.dirname(checkpoint), "finished"))


SIGNALLED_WHILE_SAVED = """
import os, signal
import gymnasium as gym


class Breaks(gym.Wrapper):  # raises at its `at`-th step; pickled after it, it sends its process a SIGINT
    def __init__(self, base: str, at: int):
        super().__init__(gym.make(base))
        self.at, self.steps = at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at:
            raise OSError("the link to the robot dropped")
        return self.env.step(action)

    def __getstate__(self):
        if self.steps >= self.at:
            os.kill(os.getpid(), signal.SIGINT)
        return self.__dict__


gym.register("Breaks-v0", entry_point=Breaks)
"""


def test_a_ctrl_c_before_the_run_handles_signals_exits_130_quietly(in_tmp, capsys, monkeypatch, script):
    """A Ctrl-C while setup checks the flags and makes its trial env, before the run's handlers are
    in place: exit code 130, nothing printed or written (it was a KeyboardInterrupt traceback)."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "setup", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        script.cli(tiny_argv(script))
    assert exit_info.value.code == 130 and capsys.readouterr() == ("", "") and os.listdir(in_tmp) == []


def test_a_ctrl_c_while_an_error_s_checkpoint_is_written_waits_for_it(tmp_path, script):
    """The checkpoint an error leaves is written with the run's signal handlers in place: a Ctrl-C
    then (a person who sees the traceback begin) is acknowledged and the save ends. It was a
    KeyboardInterrupt inside the save, and no checkpoint."""
    (tmp_path / "signalled.py").write_text(SIGNALLED_WHILE_SAVED)
    base = TINY[script.__name__][0].get("env_id", "Pendulum-v1")
    at = 250 // script.Args().num_envs  # each sub-env's steps
    argv = [*tiny_argv(script, env_id="signalled:Breaks-v0", total_timesteps=400), "--env-kwargs", f"base:{base}"]
    result = run_cli(script, [*argv, f"at:{at}"], tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1 and "OSError: the link to the robot dropped" in result.stderr, result.stderr
    assert "KeyboardInterrupt" not in result.stderr and "signal 2: the run stops" in result.stdout, result.stdout
    (checkpoint,) = glob.glob(str(tmp_path / "runs" / "*" / "checkpoint.pt"))
    assert "ended by an error at step" in result.stdout and torch.load(checkpoint, weights_only=False)["envs"]


class NanReward(gym.Wrapper):
    """`base`, whose `at`-th step returns a NaN reward, as a division by zero in a reward would."""

    def __init__(self, base: str, at: int):
        super().__init__(gym.make(base))
        self.at = at
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, float("nan") if self.steps == self.at else reward, terminated, truncated, info


gym.register("NanReward-v0", entry_point=NanReward)


def test_a_nan_reward_from_the_env_is_the_env_s_one_line_not_a_divergence(in_tmp, capsys, script):
    """An env's NaN reward at its 250th step, after the updates began: one line that names the env,
    before the reward is stored (it was "the run diverged ...: lower the rates" a log later), exit
    code 2, and the run's checkpoint kept."""
    base = TINY[script.__name__][0].get("env_id", "Pendulum-v1")
    at = 250 // script.Args().num_envs  # each sub-env's steps
    argv = [*tiny_argv(script, env_id="NanReward-v0", total_timesteps=400), "--env-kwargs", f"base:{base}", f"at:{at}"]
    with pytest.raises(SystemExit) as stop:
        script.cli(argv)
    captured = capsys.readouterr()
    last = captured.err.splitlines()[-1]  # after ACER's note on --total-timesteps
    assert stop.value.code == 2 and re.fullmatch(
        r"error: step [\d,]+: NanReward-v0 returned rewards \[nan(, nan)*\]; fix the env", last
    )
    assert "ended by an error at step" in captured.out and glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt"))


def test_a_checkpoint_damaged_after_it_was_written_is_refused_in_one_line(in_tmp, capsys):
    """4 KB zeroed inside a tensor of a checkpoint: its zip CRC-32 no longer matches, and --resume
    says so instead of resuming with a corrupted critic."""
    import td3_continuous_action as td3

    summary = td3.main(tiny(td3, checkpoint_freq=200, total_timesteps=300))
    path = f"{summary['run_dir']}/checkpoint.pt"
    archive = zipfile.ZipFile(path)
    record = max((name for name in archive.namelist() if "/data/" in name), key=lambda n: archive.getinfo(n).file_size)
    stored = archive.read(record)
    assert len(stored) >= 3 * 4096  # a tensor big enough to damage inside
    data = bytearray(open(path, "rb").read())
    at = data.index(stored[:64]) + len(stored) // 2  # the middle of the record's bytes in the file
    data[at : at + 4096] = bytes(4096)
    open(path, "wb").write(data)
    torch.load(path, weights_only=False)  # torch itself reads the damaged file without a word
    with pytest.raises(SystemExit) as exit_info:
        td3.cli(["--resume", path, "--resume-anyway"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "damaged" in err, err


def test_flags_beside_resume_apply_where_safe_and_the_others_are_named_as_ignored(in_tmp, capsys):
    """A longer --total-timesteps runs a checkpointed run on, and one below its step is refused (it
    ended the run at once, marked finished); --env-id and --learning-starts, which would change the
    run itself, are named in one line as ignored, not silently dropped."""
    import sac_continuous_action as sac

    summary = sac.main(tiny(sac, checkpoint_freq=300, total_timesteps=300))
    path = f"{summary['run_dir']}/checkpoint.pt"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        sac.cli(["--resume", path, "--resume-anyway", "--total-timesteps", "200"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err == "error: --total-timesteps 200 is below the checkpoint's step 300\n"
    argv = ["--resume", path, "--resume-anyway", "--total-timesteps", "500", "--env-id", "Hopper-v5"]
    resumed = sac.cli([*argv, "--learning-starts", "7"])
    out = capsys.readouterr().out
    assert "--resume: --env-id, --learning-starts ignored" in out, out
    assert resumed["global_step"] == 500 and resumed["run_dir"] == os.path.abspath(summary["run_dir"])
    assert torch.load(path, weights_only=False)["args"]["env_id"] == "Pendulum-v1"


# --------------------------------------------------------------------------------------------------
# VIDEO ABOVE THE FRAME SKIP, SIGNALS DURING AN EVALUATION
# --------------------------------------------------------------------------------------------------
def test_an_atari_video_takes_a_frame_per_agent_step_to_the_encoder_and_at_most_video_steps(tmp_path, monkeypatch):
    """The recorder sits above the script's wrappers: one frame per agent step (not one per
    emulator frame, 4 times as many), each handed to the encoder as it comes (none held), and no
    more than VIDEO_STEPS of them."""
    import sac_atari

    monkeypatch.setattr(sac_atari, "VIDEO_STEPS", 30)
    args = sac_atari.Args(env_id="ALE/Breakout-v5")
    env = sac_atari.make_env(args, sac_atari.observation_wrappers, str(tmp_path / "videos"))()
    env.reset(seed=0)
    written = []
    for _ in range(40):
        env.step(1)
        written.append(env.get_wrapper_attr("frames"))
    assert written == [min(2 + i, 30) for i in range(40)], written  # the reset's frame, then one a step
    held = [value for value in vars(env).values() if isinstance(value, list) and value]
    assert held == [] and env.get_wrapper_attr("writer") is not None
    env.close()
    assert os.path.getsize(tmp_path / "videos" / "evaluation.mp4") > 0


def test_a_signal_during_an_evaluation_is_acknowledged_at_once_and_ends_it_with_a_checkpoint(
    in_tmp, capsys, monkeypatch
):
    """SIGTERM while a long evaluation plays: a line at once, no further evaluation step, nothing
    logged of it, and the run stops with a checkpoint and the command to continue."""
    import td3_continuous_action as td3

    evaluate = td3.Run.evaluate
    steps = []

    def signalled(run, policy, global_step, **kwargs):
        def policy_that_signals(obs):
            steps.append(global_step)
            if len(steps) == 50:
                os.kill(os.getpid(), signal.SIGTERM)
            return policy(obs)

        evaluate(run, policy_that_signals, global_step, **kwargs)

    monkeypatch.setattr(td3.Run, "evaluate", signalled)
    summary = td3.main(tiny(td3, total_timesteps=1000, eval_freq=200, eval_episodes=300))
    out = capsys.readouterr().out
    assert len(steps) == 50 and summary["stopped_by"] == signal.SIGTERM and summary["global_step"] == 200
    assert "signal 15: the run stops after this step" in out and "continue with:" in out, out
    assert os.path.isfile(f"{summary['run_dir']}/checkpoint.pt")
    assert "eval/episodic_return" not in scalars(summary["run_dir"])


def test_an_evaluation_a_signal_cut_short_is_made_on_resume_as_the_run_that_never_stopped_made_it(
    in_tmp, monkeypatch, script
):
    """SIGTERM as the second evaluation begins (a preempted job): the resumed run makes
    that evaluation first, of the checkpoint's networks, so its eval/episodic_return points are
    those of a run never stopped (it skipped that one for good)."""
    flags = dict(total_timesteps=600, eval_freq=150, eval_episodes=2)
    whole = script.main(tiny(script, **flags, exp_name="whole"))
    evaluate = script.Run.evaluate
    calls = []

    def signalled(run, policy, global_step):
        calls.append(global_step)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(run, policy, global_step)

    monkeypatch.setattr(script.Run, "evaluate", signalled)
    stopped = script.main(tiny(script, **flags, exp_name="cut"))
    monkeypatch.setattr(script.Run, "evaluate", evaluate)
    assert stopped["stopped_by"] == signal.SIGTERM and stopped["global_step"] == calls[1] < whole["global_step"]
    script.cli(["--resume", f"{stopped['run_dir']}/checkpoint.pt"])
    made = scalars(whole["run_dir"])["eval/episodic_return"]
    # sorted: the two event files of one second and process differ in torch's counter alone, and are
    # read in name order, in which ...9 follows ...10
    assert len(made) >= 3 and sorted(scalars(stopped["run_dir"])["eval/episodic_return"]) == made


def test_a_signal_during_the_final_evaluation_stops_the_run_with_a_checkpoint_that_resumes_to_the_end(
    in_tmp, capsys, monkeypatch
):
    """The final evaluation of an env whose episodes never end would play forever: a signal ends it
    too, with a checkpoint and not marked finished (a grid runner resumes it), and the resumed run
    evaluates and finishes."""
    import td3_continuous_action as td3

    evaluate = td3.Run.evaluate
    steps = []

    def signalled(run, policy, global_step):
        def policy_that_signals(obs):
            steps.append(global_step)
            if len(steps) == 50:
                os.kill(os.getpid(), signal.SIGTERM)
            return policy(obs)

        evaluate(run, policy_that_signals, global_step)

    monkeypatch.setattr(td3.Run, "evaluate", signalled)
    summary = td3.main(tiny(td3, total_timesteps=300, eval_freq=0, eval_episodes=300))
    assert len(steps) == 50 and summary["stopped_by"] == signal.SIGTERM and summary["global_step"] == 300
    assert "continue with:" in capsys.readouterr().out and not os.path.exists(f"{summary['run_dir']}/finished")
    monkeypatch.setattr(td3.Run, "evaluate", evaluate)
    resumed = td3.cli(["--resume", f"{summary['run_dir']}/checkpoint.pt", "--eval-episodes", "1"])
    assert resumed["stopped_by"] is None and resumed["global_step"] == 300 and resumed["eval_return"] is not None
    assert os.path.isfile(f"{summary['run_dir']}/finished")
