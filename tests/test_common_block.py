"""The common block every off-policy continuous script shares, specified once and run against each script: episode
ends, environment snapshots, determinism, checkpoint and resume, bad input, import, --help, saved models, video and
tracking."""

import glob
import importlib
import os
import shutil
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT, scalars

# script -> (fields for a run that reaches ~200 updates in seconds, an env of the wrong action space and the script
# its error points to, the script's own bad inputs)
SCRIPTS = {
    "sac_continuous_action": (
        dict(learning_starts=100),
        ("CartPole-v1", "sac_atari.py"),
        {"zero policy lr": (["--policy-lr", "0"], "--policy-lr"),
         "negative q lr": (["--q-lr", "-0.001"], "--q-lr"),
         "subsample above ensemble": (["--num-critics", "2", "--num-subsample-critics", "3"],
                                      "--num-subsample-critics")},
    ),
    "td3_continuous_action": (
        dict(learning_starts=100),
        ("CartPole-v1", "sac_atari.py"),
        {"zero learning rate": (["--learning-rate", "0"], "--learning-rate"),
         "negative policy noise": (["--policy-noise", "-0.1"], "--policy-noise"),
         "negative noise clip": (["--noise-clip", "-1"], "--noise-clip"),
         "negative exploration noise": (["--exploration-noise", "-0.1"], "--exploration-noise")},
    ),
    "sac_atari": (
        dict(env_id="CartPole-v1", learning_starts=100, update_frequency=1, target_network_frequency=50),
        ("Pendulum-v1", "sac_continuous_action.py"),
        {"zero policy lr": (["--policy-lr", "0"], "--policy-lr"),
         "zero adam eps": (["--adam-eps", "0"], "--adam-eps"),
         "entropy scale above one": (["--target-entropy-scale", "1.5"], "--target-entropy-scale"),
         "zero update frequency": (["--update-frequency", "0"], "--update-frequency"),
         "Atari id without a game": (["--env-id", "ALE/NoSuchGame-v5"], "unknown env id")},
    ),
}
CONTINUOUS = ["sac_continuous_action", "td3_continuous_action"]
COMMON_BAD_INPUT = {
    "wrong action space": None,  # SCRIPTS[name][1]
    "unknown env id": (["--env-id", "NoSuchEnv-v0"], "unknown env id"),
    "batch above buffer": (["--batch-size", "512", "--buffer-size", "256"], "--buffer-size"),
    "learning never starts": (["--learning-starts", "1000", "--total-timesteps", "1000"], "--learning-starts"),
    "zero tau": (["--tau", "0"], "--tau"),
    "tau above one": (["--tau", "1.5"], "--tau"),
    "zero gamma": (["--gamma", "0"], "--gamma"),
    "gamma above one": (["--gamma", "1.01"], "--gamma"),
    "missing checkpoint": (["--resume", "nowhere/checkpoint.pt"], "no such file"),
    "corrupt checkpoint": (["--resume", "corrupt.pt"], "not a readable checkpoint"),
    "unknown flag": (["--no-such-flag", "2"], "Unrecognized options: --no-such-flag"),  # tyro's boxes, cut to one line
    "unparsable value": (["--gamma", "abc"], "Error parsing --gamma"),
    "missing value": (["--gamma"], "Missing value for argument '--gamma'"),
}
BAD_INPUT = [(name, case) for name, (_, _, own) in SCRIPTS.items() for case in [*COMMON_BAD_INPUT, *own]]


@pytest.fixture(params=list(SCRIPTS))
def script(request):
    return importlib.import_module(request.param)


@pytest.fixture(params=CONTINUOUS)
def continuous_script(request):
    return importlib.import_module(request.param)


def tiny_env(module) -> str:
    return SCRIPTS[module.__name__][0].get("env_id", "Pendulum-v1")


def tiny(module, **overrides):
    """A Pendulum run (CartPole for sac_atari) of a few hundred steps that reaches about 200 updates in a few seconds."""
    base = dict(total_timesteps=300, batch_size=32, buffer_size=1_000, eval_freq=0, eval_episodes=1, log_freq=50,
                cuda=False, **{"env_id": "Pendulum-v1", **SCRIPTS[module.__name__][0]})
    return module.Args(**{**base, **overrides})


def script_path(module) -> str:
    return str(ROOT / f"{module.__name__}.py")


def run_cli(module, args, cwd, **kwargs):
    return subprocess.run([sys.executable, script_path(module), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, **kwargs)


def stop_with_sigterm_and_resume(tmp_path, module, flags, checkpoint_freq: int, total: int, name: str) -> None:
    """Run `name`: SIGTERM as soon as its first periodic checkpoint exists (one line, no traceback, a checkpoint), then
    resume it from elsewhere to the end: it writes beside the checkpoint."""
    (tmp_path / name).mkdir()
    proc = subprocess.Popen([sys.executable, script_path(module), *flags, "--checkpoint-freq", str(checkpoint_freq)],
                            cwd=tmp_path / name, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not glob.glob(f"{tmp_path}/{name}/runs/*/checkpoint.pt") and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "checkpoint written" in out and "Traceback" not in err
    checkpoint = glob.glob(f"{tmp_path}/{name}/runs/*/checkpoint.pt")[0]
    assert checkpoint_freq <= torch.load(checkpoint, weights_only=False)["counters"][0] < total
    resumed = run_cli(module, ["--resume", checkpoint], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not (tmp_path / "runs").exists()


def check_sigterm_resume_is_exact(tmp_path, module, flags, checkpoint_freq: int, total: int, model_keys, tags):
    """Runs a and b with the same flags, and run c stopped by SIGTERM at its first checkpoint and resumed, end with equal
    networks (model.pt's `model_keys`) and equal logged `tags`: determinism and exact resume in one."""
    for d in "ab":
        (tmp_path / d).mkdir()
        assert run_cli(module, flags, tmp_path / d).returncode == 0
    stop_with_sigterm_and_resume(tmp_path, module, flags, checkpoint_freq, total, "c")
    models = [torch.load(glob.glob(f"{tmp_path}/{d}/runs/*/model.pt")[0], weights_only=False) for d in "abc"]
    for key in model_keys:
        for name, tensor in models[0][key].items():
            assert torch.equal(tensor, models[1][key][name]) and torch.equal(tensor, models[2][key][name]), name
    logged = [scalars(glob.glob(f"{tmp_path}/{d}/runs/*")[0]) for d in "abc"]
    for tag in tags:
        assert logged[0][tag] == logged[1][tag] == logged[2][tag], tag


# ---------------------------------------------------------------------------------------------------------------------
# EPISODE ENDS
# ---------------------------------------------------------------------------------------------------------------------
def test_final_observations_replaces_reset_rows_only(script):
    envs = script.vector_env([lambda: gym.make("Pendulum-v1", max_episode_steps=5) for _ in range(2)])
    envs.reset(seed=0)
    for _ in range(5):
        next_obs, _, _, truncations, infos = envs.step(envs.action_space.sample())
    assert truncations.all()
    real = script.final_observations(next_obs, infos)
    np.testing.assert_array_equal(real, np.stack(infos["final_obs"]))
    assert not np.allclose(real, next_obs)  # next_obs holds the reset observations
    np.testing.assert_array_equal(script.final_observations(next_obs, {}), next_obs)


@pytest.mark.parametrize("env_id,num_envs,total", [("Pendulum-v1", 2, 460), ("InvertedPendulum-v5", 1, 300)])
def test_stored_transitions_replay_exactly_in_a_fresh_env(in_tmp, continuous_script, env_id, num_envs, total):
    """Every stored (s, a, r, s', terminated) is what a fresh env seeded alike gives; s' at an episode end is the true
    final observation, and no transition runs from a final observation into a reset."""
    script = continuous_script
    summary = script.main(tiny(script, env_id=env_id, num_envs=num_envs, total_timesteps=total,
                               learning_starts=total - 40, checkpoint_freq=total, seed=3))
    checkpoint = torch.load(f"{summary['run_dir']}/checkpoint.pt", weights_only=False)
    obs, actions, rewards, next_obs, terminations = (f.numpy() for f in checkpoint["rb"]["fields"])
    assert len(obs) == total
    ends = {"terminated": 0, "truncated": 0}
    for i in range(num_envs):
        env = gym.make(env_id)
        o, _ = env.reset(seed=3 + i)
        for row in range(i, total, num_envs):
            np.testing.assert_array_equal(obs[row], o.astype(np.float32))
            o, r, terminated, truncated, _ = env.step(actions[row])
            np.testing.assert_array_equal(next_obs[row], o.astype(np.float32))
            assert rewards[row] == np.float32(r) and terminations[row] == float(terminated)
            if terminated or truncated:
                ends["terminated" if terminated else "truncated"] += 1
                o, _ = env.reset()
    if env_id == "Pendulum-v1":
        assert ends == {"terminated": 0, "truncated": 2}  # 200-step time limit, bootstrapped
    else:
        assert ends["terminated"] >= 5 and terminations.sum() == ends["terminated"]


def test_env_snapshot_restores_mujoco_state_exactly(script):
    envs = script.vector_env([script.make_env("Hopper-v5") for _ in range(2)])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        envs.step(rng.uniform(-1, 1, (2, 3)))
    snapshot = script.env_snapshot(envs)
    actions = rng.uniform(-1, 1, (300, 2, 3))
    original = [envs.step(a)[0] for a in actions]
    sub_envs, exact = script.env_restore(snapshot)
    restored_envs = script.vector_env([lambda env=env: env for env in sub_envs])
    restored = [restored_envs.step(a)[0] for a in actions]
    assert exact
    np.testing.assert_array_equal(np.stack(original), np.stack(restored))


def test_replay_buffer_wraps_samples_only_stored_rows_and_round_trips(continuous_script):
    script = continuous_script
    rb = script.ReplayBuffer(capacity=5, obs_dim=2, act_dim=1, device="cpu")
    for start in (0, 3, 6):  # three sub-envs per step: rows 0..8 land at (row mod 5)
        rows = np.arange(start, start + 3, dtype=np.float32)
        rb.add(np.stack([rows, rows], 1), rows[:, None], rows, np.stack([rows, rows], 1) + 0.5, rows % 2)
        if start == 0:
            assert rb.size == 3 and set(rb.sample(1000)[2].tolist()) == {0.0, 1.0, 2.0}  # never an empty row
    assert rb.size == 5 and rb.pos == 9 % 5
    np.testing.assert_array_equal(rb.rewards.numpy(), [5, 6, 7, 8, 4])  # the oldest rows were overwritten
    obs, actions, rewards, next_obs, terminations = rb.sample(64)
    torch.testing.assert_close(obs[:, 0], rewards)  # fields of one transition stay together
    torch.testing.assert_close(next_obs[:, 1], rewards + 0.5)
    torch.testing.assert_close(terminations, rewards % 2)
    copy = script.ReplayBuffer(capacity=5, obs_dim=2, act_dim=1, device="cpu")
    copy.load_state_dict(rb.state_dict())
    for a, b in zip(rb.fields(), copy.fields()):
        assert torch.equal(a, b)
    assert (copy.pos, copy.size) == (rb.pos, rb.size)
    # a checkpoint holds the stored rows only, not the whole preallocated storage
    big = script.ReplayBuffer(capacity=10_000, obs_dim=2, act_dim=1, device="cpu")
    big.add(np.ones((3, 2)), np.ones((3, 1)), np.ones(3), np.ones((3, 2)), np.zeros(3))
    assert [f.untyped_storage().nbytes() for f in big.state_dict()["fields"]] == [3 * 2 * 4, 3 * 4, 3 * 4, 3 * 2 * 4,
                                                                               3 * 4]


def test_flat_parameters_and_fused_adam_step_like_per_layer_adam(continuous_script):
    """flatten_parameters keeps each layer's parameters and gradients as views of one flat tensor through backward,
    a fused Adam step and a Polyak update, and gives the per-layer, unfused result."""
    script = continuous_script
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    torch.manual_seed(0)
    qf, reference, target = script.QEnsemble(envs), script.QEnsemble(envs), script.QEnsemble(envs)
    reference.load_state_dict(qf.state_dict())
    target.load_state_dict(qf.state_dict())
    initial = {name: p.detach().clone() for name, p in qf.named_parameters()}
    flat, target_flat = script.flatten_parameters(qf), script.flatten_parameters(target, grad=False)
    assert flat.numel() == sum(p.numel() for p in reference.parameters()) and target_flat.grad is None
    optimizers = [torch.optim.Adam([flat], lr=1e-2, fused=True), torch.optim.Adam(reference.parameters(), lr=1e-2)]
    for _ in range(3):
        obs, actions, y = torch.randn(16, 3), torch.randn(16, 1), torch.randn(16)
        flat.grad.zero_()
        optimizers[1].zero_grad(set_to_none=True)
        for model, optimizer in zip((qf, reference), optimizers):
            (model(obs, actions) - y).pow(2).mean().backward()
            optimizer.step()
        target_flat.lerp_(flat, 0.5)
    for (name, p), q, t in zip(qf.named_parameters(), reference.parameters(), target.parameters()):
        torch.testing.assert_close(p, q)
        assert not torch.equal(p, initial[name]), name
        assert p.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
        assert p.grad.untyped_storage().data_ptr() == flat.grad.untyped_storage().data_ptr()
        assert t.untyped_storage().data_ptr() == target_flat.untyped_storage().data_ptr()
        assert not torch.equal(t, initial[name]) and not torch.equal(t, p), name  # the Polyak update moved it
    torch.testing.assert_close(flat.grad, torch.cat([q.grad.flatten() for q in reference.parameters()]))


# ---------------------------------------------------------------------------------------------------------------------
# DETERMINISM AND RESUME
# ---------------------------------------------------------------------------------------------------------------------
def test_same_seed_gives_identical_logged_losses(in_tmp, script):
    runs = [scalars(script.main(tiny(script, exp_name=f"run{i}", eval_freq=100))["run_dir"]) for i in range(2)]
    tags = [t for t in runs[0] if t.startswith(("losses/", "eval/", "charts/episodic"))]
    assert len(tags) >= 9
    for tag in tags:
        assert runs[0][tag] == runs[1][tag], tag
    different = scalars(script.main(tiny(script, exp_name="other", seed=2))["run_dir"])
    assert different["losses/qf_loss"] != runs[0]["losses/qf_loss"]


RESUME_FLAGS = ["--total-timesteps", "1500", "--learning-starts", "300", "--batch-size", "64",
                "--eval-freq", "500", "--eval-episodes", "1", "--save-model", "--log-freq", "50", "--no-cuda"]


def test_interrupted_and_resumed_run_ends_identical(tmp_path, script):
    (tmp_path / "a").mkdir()
    flags = ["--env-id", tiny_env(script), *RESUME_FLAGS]
    assert run_cli(script, flags, tmp_path / "a").returncode == 0
    stop_with_sigterm_and_resume(tmp_path, script, flags, 400, 1500, "b")

    a, b = (torch.load(glob.glob(f"{tmp_path}/{d}/runs/*/model.pt")[0], weights_only=False) for d in "ab")
    assert a.keys() == b.keys()
    for key in a:
        if key != "args":
            for name, tensor in (a[key].items() if isinstance(a[key], dict) else [("", a[key])]):
                assert torch.equal(tensor, b[key][name] if name else b[key]), (key, name)
    # One TensorBoard run continues: the logged losses equal the uninterrupted run's at every step.
    logged_a, logged_b = (scalars(os.path.dirname(glob.glob(f"{tmp_path}/{d}/runs/*/model.pt")[0])) for d in "ab")
    for tag in ("losses/qf_loss", "losses/actor_loss", "eval/episodic_return"):
        assert logged_a[tag] == logged_b[tag], tag


# ---------------------------------------------------------------------------------------------------------------------
# BAD INPUT: one line, exit code 2, nothing written
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,case", BAD_INPUT)
def test_bad_input_one_line_exit_2_nothing_written(in_tmp, capsys, name, case):
    module = importlib.import_module(name)
    argv, needle = {**COMMON_BAD_INPUT, "wrong action space": (["--env-id", SCRIPTS[name][1][0]], SCRIPTS[name][1][1]),
                    **SCRIPTS[name][2]}[case]
    (in_tmp / "corrupt.pt").write_bytes(b"PK\x03\x04 this is not a checkpoint")
    with pytest.raises(SystemExit) as exit_info:
        module.cli(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert sorted(os.listdir(in_tmp)) == ["corrupt.pt"]


def test_bad_input_from_the_shell_prints_no_traceback(tmp_path, script):
    env_id, other_script = SCRIPTS[script.__name__][1]
    result = run_cli(script, ["--env-id", env_id], tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and other_script in result.stderr
    assert os.listdir(tmp_path) == []


def test_compile_without_a_cpp_compiler_is_one_line_from_the_shell(tmp_path, continuous_script):
    """inductor looks for $CXX; naming one that does not exist leaves it none, and `--compile` says so up front."""
    result = run_cli(continuous_script, ["--env-id", "Pendulum-v1", "--compile"], tmp_path,
                     env={**os.environ, "CXX": str(tmp_path / "no-such-c++")})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--compile needs a C++ compiler" in result.stderr, result.stderr
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------------------
# --compile UNSET: COMPILED FOR LONG CPU RUNS ONLY
# ---------------------------------------------------------------------------------------------------------------------
def test_cpp_compiler_is_the_one_inductor_finds(continuous_script, tmp_path):
    name = continuous_script.__name__
    code = f"import {name}; print({name}.cpp_compiler())"
    found = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "CXX": cxx}).stdout.strip() for cxx in ("g++", str(tmp_path / "none"))]
    assert found == ["g++" if shutil.which("g++") else "None", "None"]


def test_resolve_compile_compiles_only_long_cpu_runs_unless_told(continuous_script, monkeypatch, capsys):
    script, cpu, cuda = continuous_script, torch.device("cpu"), torch.device("cuda")
    start = script.Args().learning_starts
    long, short = [dict(total_timesteps=start + script.COMPILE_MIN_STEPS - k) for k in (0, 1)]
    monkeypatch.setattr(script, "cpp_compiler", lambda: "g++")
    assert script.resolve_compile(script.Args(**long), cpu) is True
    assert script.resolve_compile(script.Args(**short), cpu) is False
    assert script.resolve_compile(script.Args(**long), cuda) is False  # unmeasured on a GPU: eager unless asked
    assert script.resolve_compile(script.Args(**long, compile=False), cpu) is False
    assert script.resolve_compile(script.Args(**short, compile=True), cpu) is True
    assert script.Args().compile is None and script.resolve_compile(script.Args(), cpu) is True  # the default 1M run
    monkeypatch.setattr(script, "cpp_compiler", lambda: None)
    assert capsys.readouterr().err == ""
    assert script.resolve_compile(script.Args(**long), cpu) is False  # no compiler: eager, with a note
    assert capsys.readouterr().err.startswith("note: no C++ compiler found")
    assert script.resolve_compile(script.Args(compile=True), cuda) is True  # a GPU needs no C++ compiler
    with pytest.raises(script.ConfigError, match=r"--compile needs a C\+\+ compiler"):
        script.resolve_compile(script.Args(compile=True), cpu)


@pytest.mark.parametrize("threshold,compiled", [(100, True), (10_000, False)])
def test_unset_compile_takes_the_compiled_path_past_the_threshold_and_checkpoints_the_choice(
        in_tmp, monkeypatch, continuous_script, threshold, compiled):
    """With the threshold lowered, a run left unset builds the functional (compiled) updates, here run eagerly to save
    the compile time; its checkpoint records the choice, so a resume takes the same path."""
    script = continuous_script
    name = "functional_updates" if hasattr(script, "functional_updates") else "functional_update"
    built, build = [], getattr(script, name)
    monkeypatch.setattr(script, name, lambda *args, **kwargs: built.append(1) or build(*args, **kwargs, compile=False))
    monkeypatch.setattr(script, "COMPILE_MIN_STEPS", threshold)
    monkeypatch.setattr(script, "cpp_compiler", lambda: "g++")
    summary = script.main(tiny(script, checkpoint_freq=300))
    assert summary["critic_updates"] > 100 and len(built) == int(compiled)
    checkpoint = torch.load(f"{summary['run_dir']}/checkpoint.pt", weights_only=False)
    assert checkpoint["args"]["compile"] is compiled

# ---------------------------------------------------------------------------------------------------------------------
# STRUCTURE, DOCUMENTATION, SAVING, VIDEO AND TRACKING
# ---------------------------------------------------------------------------------------------------------------------
def test_import_does_nothing(tmp_path, script):
    code = f"import sys; sys.path.insert(0, sys.argv[1]); import {script.__name__}; print('wandb' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code, str(ROOT)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "False" and result.stderr == ""
    assert os.listdir(tmp_path) == []


def test_saved_model_loads_and_evaluates_as_the_readme_shows(in_tmp, script):
    summary = script.main(tiny(script, save_model=True, eval_episodes=2))
    readme = (ROOT / "README.md").read_text()
    snippet = readme.split(f"<!-- load-model {script.__name__} -->")[1].split("```python")[1].split("```")[0]
    namespace = {}
    exec(snippet.replace("runs/RUN_NAME/model.pt", f"{summary['run_dir']}/model.pt"), namespace)
    returns = namespace["returns"]
    assert returns.shape == (10,)
    # the snippet's evaluation is the script's: the first two of its episodes are the run's final evaluation
    assert returns[:2].mean() == pytest.approx(summary["eval_return"])


def test_help_lists_every_flag_and_the_readme_documents_them(script):
    result = subprocess.run([sys.executable, script_path(script), "--help"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "120"})
    assert result.returncode == 0
    readme = (ROOT / "README.md").read_text()
    options = result.stdout[result.stdout.index("╭"):].strip()  # the usage line above names the script's path
    assert options in readme, "the README's --help block is out of date"
    for field in script.Args.__dataclass_fields__:
        assert "--" + field.replace("_", "-") in result.stdout, field


def check_capture_video_and_track(tmp_path, module, flags):
    """--capture-video writes an mp4 of an evaluation episode; --track logs to W&B (offline) without error."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    result = run_cli(module, [*flags, "--eval-episodes", "1", "--capture-video", "--track", "--no-cuda"], tmp_path,
                     env=env)
    assert result.returncode == 0, result.stderr
    assert glob.glob(f"{tmp_path}/runs/*/videos/step_*/*.mp4")
    assert glob.glob(f"{tmp_path}/wandb/offline-run-*")


def test_smoke_capture_video_and_track(tmp_path, script):
    video_env = "BreakoutNoFrameskip-v4" if script.__name__ == "sac_atari" else "InvertedPendulum-v5"  # no pygame
    check_capture_video_and_track(tmp_path, script, ["--env-id", video_env, "--total-timesteps", "300",
                                                     "--learning-starts", "100", "--batch-size", "32"])
