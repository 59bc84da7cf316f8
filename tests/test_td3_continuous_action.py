"""Specification of td3_continuous_action.py: target policy smoothing checked statistically, the
clipped double-Q target, the actor, its eager and compiled updates against plain autograd, its own
bad input, smoke runs of its flags that reach both updates, and a short learning run. The common
block (episode ends, resume, bad input, ...) is specified in test_common_block.py."""

import copy
import glob
import math
import os

import pytest
import torch
from conftest import TINY_CONTINUOUS, fake_envs, scalars

import td3_continuous_action as td3

LOW, HIGH = [-2.0, 0.0, 10.0], [5.0, 0.5, 10.1]  # asymmetric bounds, scales 3.5, 0.25 and 0.05


def tiny(**overrides) -> td3.Args:
    return td3.Args(**{**TINY_CONTINUOUS, **overrides})


def clipped_normal_variance(sigma: float, c: float) -> float:
    """Var[clip(X, -c, c)] for X ~ N(0, sigma^2): sigma^2 (1 - 2 Phi(-k) - 2 k phi(k)) + 2 c^2
    Phi(-k), k = c / sigma."""
    k = c / sigma
    tail = 0.5 * (1 + math.erf(-k / math.sqrt(2)))
    density = math.exp(-k * k / 2) / math.sqrt(2 * math.pi)
    return sigma**2 * (1 - 2 * tail - 2 * k * density) + 2 * c**2 * tail


# --------------------------------------------------------------------------------------------------
# MATH
# --------------------------------------------------------------------------------------------------
def test_smoothing_noise_is_independent_scaled_and_clipped():
    torch.manual_seed(0)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    scale, bias = (high - low) / 2, (high + low) / 2
    n = 200_000
    centre = bias.expand(n, 3).contiguous()  # at the centre the bounds never bind, so only the noise clip acts
    noise = (td3.smoothed_target_actions(centre, scale, low, high, policy_noise=0.2, noise_clip=0.5) - centre) / scale
    # scaled by the action range: in units of the scale every dimension has the same clipped-normal
    # spread
    expected_std = math.sqrt(clipped_normal_variance(0.2, 0.5))
    for d in range(3):
        assert noise[:, d].std().item() == pytest.approx(expected_std, rel=0.01)
        assert noise[:, d].mean().abs().item() < 0.002
    # clipped at c = noise_clip * scale, and clipped as often as N(0, 0.2^2) leaves [-0.5, 0.5] (2
    # Phi(-2.5) = 1.24%)
    assert noise.abs().max().item() <= 0.5 + 1e-5
    at_clip = (noise.abs() > 0.5 - 1e-4).float().mean().item()
    assert at_clip == pytest.approx(2 * 0.5 * (1 + math.erf(-2.5 / math.sqrt(2))), rel=0.05)
    # independent per dimension and per sample: no correlation between dimensions or between
    # neighbouring samples
    corr = torch.corrcoef(noise.T)
    assert (corr - torch.eye(3)).abs().max().item() < 0.01
    assert torch.corrcoef(torch.stack([noise[:-1, 0], noise[1:, 0]]))[0, 1].abs().item() < 0.01


def test_target_actions_always_lie_within_the_bounds():
    torch.manual_seed(0)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    scale = (high - low) / 2
    at_edges = torch.cat([low.expand(50_000, 3), high.expand(50_000, 3)])
    actions = td3.smoothed_target_actions(at_edges, scale, low, high, policy_noise=0.5, noise_clip=1.0)
    assert (actions >= low).all() and (actions <= high).all()
    assert (actions == low).any() and (actions == high).any()  # the bound clip is active, not a coincidence


def test_termination_masks_the_bootstrap():
    rewards = torch.tensor([1.0, 1.0])
    terminations = torch.tensor([1.0, 0.0])  # row 1: a truncation is stored as not terminated
    next_q = torch.tensor([[10.0, 10.0], [8.0, 12.0]])  # (critics, batch)
    # row 0: y = r; row 1: y = r + gamma * min(10, 12)
    torch.testing.assert_close(td3.td3_target(rewards, terminations, next_q, gamma=0.9), torch.tensor([1.0, 10.0]))


def test_actor_respects_asymmetric_bounds():
    torch.manual_seed(0)
    actor = td3.Actor(fake_envs(LOW, HIGH))
    actions = actor(torch.randn(4096, 3) * 100)
    assert (actions >= torch.tensor(LOW)).all() and (actions <= torch.tensor(HIGH)).all()
    assert (actions[:, 0] < -1.9).any() and (actions[:, 0] > 4.9).any()  # the whole range is reachable


def test_actor_loss_uses_critic_one_and_sends_no_gradient_into_the_critics():
    torch.manual_seed(0)
    envs = fake_envs(LOW, HIGH)
    actor, qf = td3.Actor(envs), td3.QEnsemble(envs)
    obs = torch.randn(16, 3)
    loss = td3.compute_loss_pi(actor, qf, obs)
    torch.testing.assert_close(loss, -qf(obs, actor(obs))[0].mean())
    loss.backward()
    assert all(p.grad is None for p in qf.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())


def td3_nets(seed: int = 0):
    """Actor, critics and their targets as `main` builds them."""
    torch.manual_seed(seed)
    envs = fake_envs(LOW, HIGH)
    actor, actor_target, qf, qf_target = td3.Actor(envs), td3.Actor(envs), td3.QEnsemble(envs), td3.QEnsemble(envs)
    actor_target.load_state_dict(actor.state_dict())
    qf_target.load_state_dict(qf.state_dict())
    actor_target.requires_grad_(False)
    qf_target.requires_grad_(False)
    return actor, actor_target, qf, qf_target


def run_updates(update, batches, policy_frequency=2):
    """Per-update metrics of `update(batch, actor_step)`, reseeding torch before each (the smoothing
    noise)."""
    logged = []
    for i, batch in enumerate(batches):
        torch.manual_seed(100 + i)
        metrics = update(batch, (i + 1) % policy_frequency == 0)
        logged.append({k: v.clone() for k, v in metrics.items()})  # a captured graph's next replay overwrites them
    return logged


def autograd_update(actor, actor_target, qf, qf_target, args):
    """The updates written the plain autograd way, one tensor at a time, with torch.optim.Adam: the
    reference."""
    q_optimizer = torch.optim.Adam(qf.parameters(), lr=args.learning_rate, foreach=False)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate, foreach=False)

    def update(batch, actor_step):
        loss, metrics = td3.compute_loss_q(
            actor_target, qf, qf_target, batch, args.gamma, args.policy_noise, args.noise_clip
        )
        q_optimizer.zero_grad()
        loss.backward()
        q_optimizer.step()
        if not actor_step:
            return metrics
        actor_loss = td3.compute_loss_pi(actor, qf, batch[0])
        actor_optimizer.zero_grad()
        actor_loss.backward()
        actor_optimizer.step()
        with torch.no_grad():
            for target, online in ((qf_target, qf), (actor_target, actor)):
                for p_target, p in zip(target.parameters(), online.parameters()):
                    p_target.lerp_(p, args.tau)
        return {**metrics, "actor_loss": actor_loss.detach()}

    return update


def main_adam(net, args):
    """An optimizer as `main` makes it: fused Adam, its learning rate a tensor on the net's
    device."""
    lr = torch.tensor(args.learning_rate, device=next(net.parameters()).device)
    return torch.optim.Adam(net.parameters(), lr=lr, fused=True)


def one_update(update_critic, update_actor):
    """`update(batch, actor_step)`: `td3_updates`'s critic step, then, when `actor_step`, its actor
    step on the batch's states, as `main` calls them."""

    def update(batch, actor_step):
        metrics = update_critic(batch)
        return {**metrics, **update_actor(batch[0])} if actor_step else metrics

    return update


def main_update(nets, args, compiled: bool):
    """`update` as `main` builds it, on fused Adam optimizers with tensor learning rates:
    `td3_updates`'s, eager or through `compiled`."""
    actor, actor_target, qf, qf_target = nets
    optimizers = [main_adam(net, args) for net in (qf, actor)]
    updates = td3.td3_updates(actor, actor_target, qf, qf_target, *optimizers, args)[:2]
    return one_update(*(td3.compiled(list(updates), torch.device("cpu")) if compiled else updates))


def random_batches(n: int, size: int = 64):
    torch.manual_seed(7)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    return [
        (
            torch.randn(size, 3),
            low + (high - low) * torch.rand(size, 3),
            torch.randn(size),
            torch.randn(size, 3),
            (torch.rand(size) < 0.1).float(),
        )
        for _ in range(n)
    ]


def assert_same_training(nets, other_nets, logged, other_logged, rtol, atol):
    """The same metrics at every update, and the same parameters at the end, to float rounding:
    `atol` for the metrics and ten times it for the parameters, where Adam's division by sqrt(v)
    magnifies the rounding of a near-zero gradient element (seen: one weight of 131,072 off by
    2.8e-6 after 8 updates at learning rate 0.01)."""
    for step, (metrics, other) in enumerate(zip(logged, other_logged)):
        assert metrics.keys() == other.keys(), step
        for key in metrics:
            torch.testing.assert_close(
                metrics[key],
                other[key],
                rtol=rtol,
                atol=atol,
                msg=lambda m, key=key, step=step: f"{key} at update {step}: {m}",
            )
    for net, other in zip(nets, other_nets):
        for (name, p), q in zip(net.named_parameters(), other.parameters()):
            torch.testing.assert_close(
                p.detach(), q.detach(), rtol=rtol, atol=10 * atol, msg=lambda m, name=name: f"{name}: {m}"
            )


@pytest.mark.parametrize("path", ["eager", "compiled"])
def test_updates_match_autograd_one_tensor_at_a_time(path):
    """`td3_updates` (fused Adam, one Polyak kernel), eager and through `compiled`, against the
    plain autograd reference: the same metrics at every update (the actor's loss is computed after
    this update's critic step, which a stale critic would change) and the same networks, targets
    included, after 8 updates at a learning rate large enough to move them."""
    torch._dynamo.reset()
    args = td3.Args(learning_rate=0.01, tau=0.1)
    batches = random_batches(8)
    reference = td3_nets()
    logged = run_updates(autograd_update(*reference, args), batches)
    nets = td3_nets()
    update = main_update(nets, args, compiled=path == "compiled")
    assert_same_training(nets, reference, run_updates(update, batches), logged, rtol=1e-4, atol=1e-5)
    actor, actor_target, qf, qf_target = nets
    assert not torch.equal(actor.fc1.weight, td3_nets()[0].fc1.weight)  # the networks did move
    assert not torch.equal(actor_target.fc1.weight, actor.fc1.weight)  # Polyak, not a copy


def test_a_compiled_run_resumed_where_an_actor_step_comes_first_trains_as_the_run_that_never_stopped():
    """A resumed compiled run compiles its updates anew, in the order its first updates come. From
    a state after one critic update, compiled afresh on copies (a resumed process), the next 11
    updates (critic every update, actor every other, from the second) end bit for bit where the run
    that compiled once ends. (When the actor's step was a branch of one update function, its two
    graphs came out different with the order they were built in, and this failed.)"""
    args, batches = td3.Args(learning_rate=3e-3), random_batches(12)

    def train(objs, calls):  # compiled afresh, as a new process compiles
        torch._dynamo.reset()
        updates = td3.td3_updates(*objs, args)[:2]
        update_critic, update_actor = td3.compiled(list(updates), torch.device("cpu"))
        for i in calls:
            torch.manual_seed(100 + i)
            update_critic(batches[i])
            if i % 2 == 1:
                update_actor(batches[i][0])

    def built():
        nets = td3_nets()
        return [*nets, *(main_adam(net, args) for net in (nets[2], nets[0]))]

    reference, stopped = built(), built()
    train(reference, range(12))
    train(stopped, range(1))
    resumed = copy.deepcopy(stopped)  # networks and optimizers, as a checkpoint restores them
    train(resumed, range(1, 12))
    for net, other in zip(resumed[:4], reference[:4]):
        for p, q in zip(net.parameters(), other.parameters()):
            assert torch.equal(p, q)
    assert not torch.equal(resumed[0].fc1.weight, td3_nets()[0].fc1.weight)  # the actor did move


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_captured_update_matches_the_eager_one_on_a_gpu(monkeypatch):
    """On a GPU, from the same networks and batches, 100 updates: captured (compiled, then CUDA
    graphs) equal to the compiled update uncaptured, and to the eager update to float tolerance;
    acting too."""
    args, batches = td3.Args(), [tuple(x.cuda() for x in b) for b in random_batches(100, size=256)]
    results = []
    for path in ("eager", "compiled", "captured"):
        monkeypatch.setattr(td3, "CUDA_GRAPHS", path == "captured")
        torch._dynamo.reset()  # closures of one code object: each path compiles anew
        nets = [net.cuda() for net in td3_nets()]
        optimizers = [main_adam(net, args) for net in nets[2::-2]]
        update_critic, update_actor, act = td3.td3_updates(*nets, *optimizers, args)
        if path != "eager":
            update_critic, update_actor, act = td3.compiled(
                [update_critic, update_actor, act], nets[0].fc1.weight.device
            )
        logged = run_updates(one_update(update_critic, update_actor), batches)
        torch.manual_seed(0)
        results.append((nets, logged, torch.stack([act(batches[0][0]).clone() for _ in range(5)])))
    (eager, eager_logged, eager_actions), (compiled, compiled_logged, compiled_actions), captured = results
    assert_same_training(captured[0], compiled, captured[1], compiled_logged, rtol=0, atol=0)
    assert torch.equal(captured[2], compiled_actions)
    assert_same_training(captured[0], eager, captured[1], eager_logged, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(captured[2], eager_actions, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------------------
# BAD INPUT: one line, exit code 2, nothing written
# --------------------------------------------------------------------------------------------------
BAD_INPUT = {
    "batch above buffer": (["--batch-size", "512", "--buffer-size", "256"], "--buffer-size"),
    "buffer below num envs": (["--num-envs", "4", "--batch-size", "2", "--buffer-size", "3"], "--buffer-size"),
    "learning never starts": (["--learning-starts", "1000", "--total-timesteps", "1000"], "--learning-starts"),
    "learning starts below batch": (["--learning-starts", "100", "--batch-size", "256"], "--learning-starts"),
    "zero batch": (["--batch-size", "0"], "--batch-size"),
    "zero tau": (["--tau", "0"], "--tau"),
    "tau above one": (["--tau", "1.5"], "--tau"),
    "zero gamma": (["--gamma", "0"], "--gamma"),
    "gamma above one": (["--gamma", "1.01"], "--gamma"),
    "zero learning rate": (["--learning-rate", "0"], "--learning-rate"),
    "negative policy noise": (["--policy-noise", "-0.1"], "--policy-noise"),
    "negative noise clip": (["--noise-clip", "-1"], "--noise-clip"),
    "negative exploration noise": (["--exploration-noise", "-0.1"], "--exploration-noise"),
    "zero policy frequency": (["--policy-frequency", "0"], "--policy-frequency"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_one_line_exit_2_nothing_written(in_tmp, capsys, case):
    argv, needle = BAD_INPUT[case]
    with pytest.raises(SystemExit) as exit_info:
        td3.cli(["--env-id", "Pendulum-v1", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert os.listdir(in_tmp) == []


# --------------------------------------------------------------------------------------------------
# SMOKE: every boolean flag in both states reaches both updates
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("flag", ["save_model"])  # --cuda: --no-cuda is every other test's, --cuda the GPU test's
def test_smoke_boolean_flags_reach_updates(in_tmp, flag, value):
    summary = td3.main(tiny(**{flag: value}))
    # steps 100..300 bring 201 critic updates; every second one an actor update and the target
    # updates
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 100
    logged = scalars(summary["run_dir"])
    for tag in [
        "losses/qf1_values",
        "losses/qf2_values",
        "losses/qf1_loss",
        "losses/qf2_loss",
        "losses/qf_loss",
        "losses/actor_loss",
        "charts/SPS",
        "charts/episodic_return",
        "charts/episodic_length",
        "eval/episodic_return",
    ]:
        assert tag in logged, tag
    assert [step for step, _ in logged["losses/qf_loss"]] == [100, 150, 200, 250, 300]  # every --log-freq env steps
    assert os.path.exists(f"{summary['run_dir']}/model.pt") == (flag == "save_model" and value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_smoke_reaches_updates_on_a_gpu(in_tmp):
    """--cuda, the default, trains on the GPU where there is one: the updates run and the networks
    they trained are there."""
    summary = td3.main(tiny(cuda=True, save_model=True))
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 100
    model = torch.load(f"{summary['run_dir']}/model.pt", weights_only=False)
    assert all(x.is_cuda for net in ("actor", "qf") for x in model[net].values())


def test_smoke_vector_envs_and_policy_frequency(in_tmp):
    args = tiny(num_envs=2, policy_frequency=3, exploration_noise=0.5, checkpoint_freq=300)
    summary = td3.main(args)
    # iterations whose step count reaches learning_starts: global_step = 100, 102, ..., 300 -> 101
    # iterations
    assert summary["critic_updates"] == 202 and summary["actor_updates"] == 202 // 3
    checkpoint = torch.load(f"{summary['run_dir']}/checkpoint.pt", weights_only=False)
    actions = checkpoint["rb"]["storage"][:, 3]  # Pendulum: columns obs (3), action (1), reward, next obs, terminated
    assert actions.abs().max() <= 2.0 and (actions.abs() == 2.0).any()  # exploration noise clipped to the bounds
    target, online = checkpoint["actor_target"], checkpoint["actor"]
    assert all(not torch.equal(target[k], online[k]) for k in target if k.startswith("fc"))  # Polyak, not a copy
    assert all(not torch.equal(checkpoint["qf_target"][k], checkpoint["qf"][k]) for k in checkpoint["qf"])


@pytest.mark.slow
def test_smoke_compile(in_tmp):
    summary = td3.main(tiny(compile=True, checkpoint_freq=300))
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 100
    assert "losses/actor_loss" in scalars(summary["run_dir"])
    checkpoint = torch.load(f"{summary['run_dir']}/checkpoint.pt", weights_only=False)
    assert checkpoint["args"]["compile"] is True
    assert int(checkpoint["q_optimizer"]["state"][0]["step"]) == 201  # Adam stepped on the optimizers' own state
    assert int(checkpoint["actor_optimizer"]["state"][0]["step"]) == 100


@pytest.mark.slow
def test_compiled_run_stopped_and_resumed_ends_identical(tmp_path):
    """--compile keeps Adam's state in the optimizers, so a checkpoint resumes the compiled path
    exactly."""
    from test_common_block import run_cli, stop_and_resume

    flags = [
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "1500",
        "--learning-starts",
        "300",
        "--batch-size",
        "64",
        "--eval-freq",
        "500",
        "--eval-episodes",
        "1",
        "--save-model",
        "--log-freq",
        "50",
        "--no-cuda",
        "--compile",
    ]
    (tmp_path / "a").mkdir()
    assert run_cli(td3, flags, tmp_path / "a").returncode == 0
    stop_and_resume(tmp_path, td3, flags, 400, 1500, "b")
    a, b = (torch.load(glob.glob(f"{tmp_path}/{d}/runs/*/model.pt")[0], weights_only=False) for d in "ab")
    for key in ("actor", "qf"):
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), (key, name)


# --------------------------------------------------------------------------------------------------
# LEARNING
# --------------------------------------------------------------------------------------------------
def test_learns_pendulum(in_tmp):
    """Pendulum-v1, 7,000 env steps (1,000 random), final evaluation without noise over 10
    episodes."""
    summary = td3.main(
        td3.Args(
            env_id="Pendulum-v1",
            total_timesteps=7_000,
            learning_starts=1_000,
            eval_freq=0,
            eval_episodes=10,
            cuda=False,
            seed=1,
        )
    )
    # Final evaluation at 7,000 steps, one thread, seeds 1-5: -294.30, -206.91, -216.21, -379.38,
    # -194.07 (at 1,000 steps, still random: -1,318 to -1,637). Seed 1 is asserted; the threshold
    # sits below the worst of the five seeds.
    assert summary["eval_return"] > -600
