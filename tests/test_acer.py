"""acer.py: Retrace targets against the paper's forward recursion and hand-worked cases, the
trust-region projection, the policy and Q gradients against a per-sample loss built from
torch.distributions, the average network, the segment buffer, smoke runs that reach on-policy and
replay updates (eager and compiled), the logged losses, the rounded budget, resume, bad input, and
a short CartPole learning run."""

import glob
import os

import gymnasium as gym
import pytest
import torch
from conftest import scalars
from test_common_block import check_capture_video, check_stopped_runs_resume_exactly, run_cli

import acer


def random_segment(T=6, N=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards, q_taken, values = (torch.randn(T, N, generator=g) for _ in range(3))
    dones = (torch.rand(T, N, generator=g) < 0.3).float()
    rho_bar = torch.rand(T, N, generator=g).clamp(max=1.0)
    return rewards, dones, q_taken, values, rho_bar, torch.randn(N, generator=g)


# --------------------------------------------------------------------------------------------------
# RETRACE AND THE TRUST REGION
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_retrace_matches_the_papers_forward_recursion(seed):
    """Q_ret(t) = r_t + gamma (1 - d_t) [rho_bar_{t+1} (Q_ret(t+1) - Q_{t+1}) + V_{t+1}], Q_ret(T-1)
    bootstrapping from V(s_T): written forwards, recursively, one scalar at a time."""
    r, d, q, v, rho, last = random_segment(seed=seed)
    T, N = r.shape
    gamma = 0.97

    def q_ret(t, n):
        if t == T - 1:
            return r[t, n].item() + gamma * (1 - d[t, n].item()) * last[n].item()
        carried = rho[t + 1, n].item() * (q_ret(t + 1, n) - q[t + 1, n].item()) + v[t + 1, n].item()
        return r[t, n].item() + gamma * (1 - d[t, n].item()) * carried

    expected = torch.tensor([[q_ret(t, n) for n in range(N)] for t in range(T)])
    torch.testing.assert_close(acer.retrace_targets(r, d, q, v, rho, last, gamma), expected)
    assert d.sum() > 0


def test_retrace_with_rho_one_and_q_equal_v_is_the_n_step_return():
    r, d, q, _, _, last = random_segment(seed=4)
    T, N = r.shape
    expected = torch.zeros(T, N)
    for n in range(N):
        future = last[n].item()
        for t in reversed(range(T)):
            future = r[t, n].item() + 0.9 * (1 - d[t, n].item()) * future
            expected[t, n] = future
    torch.testing.assert_close(acer.retrace_targets(r, d, q, q, torch.ones(T, N), last, 0.9), expected)


def test_retrace_with_rho_zero_is_the_one_step_target():
    r, d, q, v, _, last = random_segment(seed=5)
    next_values = torch.cat([v[1:], last.unsqueeze(0)])
    torch.testing.assert_close(
        acer.retrace_targets(r, d, q, v, torch.zeros_like(r), last, 0.9), r + 0.9 * (1 - d) * next_values
    )


def test_retrace_hand_worked_three_steps():
    """gamma 0.5, r = (1, 2, 3), Q(s_t, a_t) = (0.5, 1, 2), V = (1, 1.5, 2.5), rho_bar = (0.5, 1,
    0.2), V(s_3) = 4:
        t=2: 3 + 0.5 * 4 = 5;       carry 0.2 * (5 - 2) + 2.5 = 3.1
        t=1: 2 + 0.5 * 3.1 = 3.55;  carry 1.0 * (3.55 - 1) + 1.5 = 4.05
        t=0: 1 + 0.5 * 4.05 = 3.025
    With the episode ending at t=1: t=1: 2 + 0 = 2, carry 1 * (2 - 1) + 1.5 = 2.5; t=0: 1 + 0.5 *
    2.5 = 2.25."""
    column = lambda *x: torch.tensor(x).unsqueeze(1)  # noqa: E731
    r, q, v, rho, last = (
        column(1.0, 2.0, 3.0),
        column(0.5, 1.0, 2.0),
        column(1.0, 1.5, 2.5),
        column(0.5, 1.0, 0.2),
        torch.tensor([4.0]),
    )
    torch.testing.assert_close(
        acer.retrace_targets(r, column(0.0, 0.0, 0.0), q, v, rho, last, 0.5), column(3.025, 3.55, 5.0)
    )
    torch.testing.assert_close(
        acer.retrace_targets(r, column(0.0, 1.0, 0.0), q, v, rho, last, 0.5), column(2.25, 2.0, 5.0)
    )


def test_trust_region_projection():
    g = torch.tensor([[1.0, 0.0, -1.0], [3.0, 1.0, 0.0], [0.5, 0.5, 0.5], [2.0, -2.0, 1.0]])
    k = torch.tensor([[0.1, 0.1, 0.1], [1.0, 0.5, -1.0], [0.0, 0.0, 0.0], [1.0, -1.0, 0.0]])
    delta = 1.0
    projected = acer.trust_region_project(g, k, delta)
    inside = (k * g).sum(-1) <= delta
    assert inside.tolist() == [True, False, True, False]
    torch.testing.assert_close(projected[inside], g[inside])
    torch.testing.assert_close((k * projected).sum(-1)[~inside], torch.full((2,), delta))
    # the correction is along k
    correction = g[~inside] - projected[~inside]
    torch.testing.assert_close(torch.linalg.cross(correction, k[~inside]), torch.zeros(2, 3))


def test_k_is_the_gradient_of_kl_avg_to_pi_with_respect_to_the_probabilities(monkeypatch):
    """The statistics phi of the paper's Sec. 3.3 are the probabilities f = pi(.|s) (baselines too):
    acer_loss projects with k = d KL(pi_avg || f) / df, here autograd's gradient of sum_a pi_avg(a)
    log(pi_avg(a) / f(a)) at f = pi."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    torch.manual_seed(0)
    agent, avg_agent, seen = acer.Agent(envs), acer.Agent(envs), []
    monkeypatch.setattr(acer, "trust_region_project", lambda g, k, delta: seen.append(k) or g)
    segment = cartpole_segment()
    acer.acer_loss(agent, avg_agent, segment, acer.Args())
    with torch.no_grad():
        f = agent(segment["obs"][:5].flatten(0, 1))[0].softmax(-1).view(5, 3, 2).requires_grad_()
        avg = avg_agent(segment["obs"][:5].flatten(0, 1))[0].softmax(-1).view(5, 3, 2)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad((avg * (avg.log() - f.log())).sum(), f)
    torch.testing.assert_close(seen[0], grad)


# --------------------------------------------------------------------------------------------------
# THE LOSS AND THE AVERAGE NETWORK
# --------------------------------------------------------------------------------------------------
def cartpole_segment(T=5, N=3, seed=0, truncate=False):
    g = torch.Generator().manual_seed(seed)
    segment = dict(
        obs=torch.randn(T + 1, N, 4, generator=g),
        actions=torch.randint(0, 2, (T, N), generator=g),
        rewards=torch.ones(T, N),
        dones=(torch.rand(T, N, generator=g) < 0.2).float(),
        mu=torch.rand(T, N, 2, generator=g).softmax(-1),
        final_obs={},
    )
    if truncate:  # an episode truncated at step 2 of env 1: its final observation is kept
        segment["dones"][2, 1] = 1.0
        segment["final_obs"][(2, 1)] = torch.randn(4, generator=g)
    return segment


def reference_loss(agent, segment, args):
    """The ACER loss one sample at a time, with torch.distributions.Categorical, and Q_ret from the
    forward recursion."""
    T, N = segment["actions"].shape
    c, gamma = args.truncation_c, args.gamma
    with torch.no_grad():
        logits, q = agent(segment["obs"])
        pi = logits.softmax(-1)
        v = (pi * q).sum(-1)
        rewards = segment["rewards"].clone()
        for (t, n), final in segment["final_obs"].items():
            final_logits, final_q = agent(final)
            rewards[t, n] += gamma * (final_logits.softmax(-1) * final_q).sum()
        a = segment["actions"]
        rho = pi[:T].gather(-1, a.unsqueeze(-1)).squeeze(-1) / segment["mu"].gather(-1, a.unsqueeze(-1)).squeeze(-1)
        q_taken = q[:T].gather(-1, a.unsqueeze(-1)).squeeze(-1)
        q_ret = acer.retrace_targets(rewards, segment["dones"], q_taken, v[:T], rho.clamp(max=1), v[T], gamma)
    logits, q = agent(segment["obs"])
    policy, q_losses = [], []
    for t in range(T):
        for n in range(N):
            dist = torch.distributions.Categorical(logits=logits[t, n])
            action = int(segment["actions"][t, n])
            objective = min(c, rho[t, n].item()) * dist.log_prob(torch.tensor(action)) * (q_ret[t, n] - v[t, n])
            for b in range(logits.shape[-1]):
                rho_b = pi[t, n, b].item() / segment["mu"][t, n, b].item()
                weight = max(0.0, 1 - c / rho_b) * pi[t, n, b].item()
                objective = objective + weight * dist.log_prob(torch.tensor(b)) * (q[t, n, b].item() - v[t, n])
            policy.append(objective + args.ent_coef * dist.entropy())
            q_losses.append((q_ret[t, n] - q[t, n, action]) ** 2)
    return -torch.stack(policy).mean() + args.q_coef * torch.stack(q_losses).mean()


@pytest.mark.parametrize("truncate", [False, True])
def test_loss_gradient_matches_a_per_sample_reference(truncate):
    """Without the trust region (or with a bound it never reaches) the network's gradient is that of
    the per-sample loss: truncated importance weight, bias correction over all actions, entropy, and
    the Q head's squared error."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    torch.manual_seed(0)
    agent, avg_agent = acer.Agent(envs), acer.Agent(envs)
    with torch.no_grad():
        agent.policy_head.weight.normal_(0, 1)  # policies far from mu, so that both weights are active
    segment = cartpole_segment(truncate=truncate)
    args = acer.Args(truncation_c=1.5, ent_coef=0.05, q_coef=0.7, gamma=0.9)
    reference_grads = torch.autograd.grad(reference_loss(agent, segment, args), list(agent.parameters()))
    for trust_region, max_kl in [(False, 1.0), (True, 1e6)]:
        args.trust_region, args.max_kl = trust_region, max_kl
        loss, metrics = acer.acer_loss(agent, avg_agent, segment, args)
        grads = torch.autograd.grad(loss, list(agent.parameters()))
        for grad, expected in zip(grads, reference_grads):
            torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)
    assert list(metrics) == list(acer.METRICS) and all(value.dim() == 0 for value in metrics.values())
    assert metrics["rho_mean"] > 0 and metrics["avg_policy_kl"] > 0


def test_a_binding_trust_region_changes_only_the_policy_gradient():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    torch.manual_seed(0)
    agent, avg_agent = acer.Agent(envs), acer.Agent(envs)
    with torch.no_grad():
        agent.policy_head.weight.normal_(0, 1)
    segment = cartpole_segment()
    segment["rewards"].fill_(-1.0)  # negative advantages: updates move pi away from pi_avg, k.g > delta on 12 of 15
    grads = {}
    for max_kl in (1e6, 1e-4):
        loss, _ = acer.acer_loss(agent, avg_agent, segment, acer.Args(max_kl=max_kl))
        grads[max_kl] = dict(
            zip([n for n, _ in agent.named_parameters()], torch.autograd.grad(loss, list(agent.parameters())))
        )
    torch.testing.assert_close(grads[1e-4]["q_head.weight"], grads[1e6]["q_head.weight"])
    assert not torch.allclose(grads[1e-4]["policy_head.weight"], grads[1e6]["policy_head.weight"])


def test_update_average_is_an_exponential_moving_average():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent, avg_agent = acer.Agent(envs), acer.Agent(envs)
    before = [p.clone() for p in avg_agent.parameters()]
    acer.update_average(avg_agent, agent, 0.99)
    for old, new, p in zip(before, avg_agent.parameters(), agent.parameters()):
        torch.testing.assert_close(new, 0.99 * old + 0.01 * p.detach())


def test_segment_buffer_keeps_the_newest_segments_and_their_final_observations():
    space = gym.spaces.Box(-1, 1, (4,))
    buffer = acer.SegmentBuffer(3 * 5 * 2 + 7, 5, 2, space, 2, "cpu")  # room for 3 whole segments
    assert buffer.slots == 3
    for k in range(5):
        segment = cartpole_segment(T=5, N=2, seed=k, truncate=True)
        segment["final_obs"] = {(2, 1): torch.full((4,), float(k))}
        buffer.add(segment)
        assert buffer.transitions == min(k + 1, 3) * 10
    stored = {int(buffer.final_obs[key][0]) for key in buffer.final_obs}
    assert stored == {2, 3, 4} and len(buffer.final_obs) == 3
    torch.manual_seed(0)
    seen = set()
    for _ in range(50):
        sample = buffer.sample()
        k = int(sample["final_obs"][(2, 1)][0])
        torch.testing.assert_close(sample["obs"], cartpole_segment(T=5, N=2, seed=k)["obs"])
        seen.add(k)
    assert seen == {2, 3, 4}


def test_segment_buffer_round_trips_through_its_state_dict():
    space = gym.spaces.Box(-1, 1, (4,))
    buffer, restored = (acer.SegmentBuffer(40, 5, 2, space, 2, "cpu") for _ in range(2))
    for k in range(3):
        buffer.add(cartpole_segment(T=5, N=2, seed=k, truncate=True))
    restored.load_state_dict(buffer.state_dict())
    assert (restored.pos, restored.size, restored.transitions) == (buffer.pos, buffer.size, buffer.transitions)
    for name in acer.SegmentBuffer.FIELDS:
        assert torch.equal(getattr(restored, name), getattr(buffer, name)), name
    assert restored.final_obs.keys() == buffer.final_obs.keys()
    for key, value in buffer.final_obs.items():
        assert torch.equal(restored.final_obs[key], value)


# --------------------------------------------------------------------------------------------------
# SMOKE, RESUME, BAD INPUT
# --------------------------------------------------------------------------------------------------
def tiny(**overrides):
    return acer.Args(
        **{
            **dict(
                total_timesteps=800,
                num_envs=4,
                num_steps=5,
                buffer_size=400,
                replay_start=100,
                eval_freq=0,
                eval_episodes=1,
                cuda=False,
                log_freq=20,
            ),
            **overrides,
        }
    )


def test_a_step_that_terminates_as_its_time_limit_truncates_keeps_no_final_observation(in_tmp, monkeypatch):
    """Gymnasium's TimeLimit sets truncated on the last allowed step even when the env terminates
    there (every 5th step of EndsAtTimeLimit-v0): such a step is a termination, and no final
    observation is kept to bootstrap from."""
    segments, add = [], acer.SegmentBuffer.add
    monkeypatch.setattr(acer.SegmentBuffer, "add", lambda self, segment: segments.append(segment) or add(self, segment))
    acer.main(tiny(env_id="EndsAtTimeLimit-v0", total_timesteps=200))
    assert len(segments) == 10 and all(segment["dones"].sum() == 4 for segment in segments)  # 4 envs end once each
    assert all(segment["final_obs"] == {} for segment in segments)


@pytest.mark.parametrize(
    "flags",
    [
        dict(),
        dict(trust_region=False),
        dict(replay_ratio_poisson=True),
        dict(anneal_lr=True, optimizer="adam"),
        dict(replay_ratio=0),
        dict(num_envs=2, save_model=True),
    ],
)
def test_smoke_reaches_on_policy_and_replay_updates(in_tmp, flags):
    summary = acer.main(tiny(**flags))
    iterations = 800 // (5 * flags.get("num_envs", 4))
    assert summary["iterations"] == iterations
    # replay starts once 100 transitions are stored: from the (100 / segment)-th iteration on
    first = -(-100 // (5 * flags.get("num_envs", 4)))
    if flags.get("replay_ratio") == 0:
        assert summary["replay_updates"] == 0
    elif flags.get("replay_ratio_poisson"):
        assert summary["replay_updates"] > 0
    else:
        assert summary["replay_updates"] == 4 * (iterations - first + 1)
    logged = scalars(summary["run_dir"])
    for tag in (
        "losses/policy_loss",
        "losses/q_loss",
        "losses/entropy",
        "losses/avg_policy_kl",
        "losses/rho_mean",
        "charts/replay_transitions",
        "charts/learning_rate",
        "charts/SPS",
        "eval/episodic_return",
    ):
        assert len(logged[tag]) >= 1, tag
    assert max(v for _, v in logged["charts/replay_transitions"]) == 400
    lrs = [v for _, v in logged["charts/learning_rate"]]
    assert (lrs[-1] < lrs[0]) == flags.get("anneal_lr", False)


def test_logged_losses_are_the_latest_updates(in_tmp, monkeypatch):
    """Update n returns n as every metric (its loss is 0); the losses written every 3 iterations (60
    env steps) are those of the latest update, the iteration's last, as CleanRL logs them, not a
    mean over the updates since the last write: 1 update an iteration until 100 transitions are
    stored (iteration 5), 1 on-policy + 4 replayed from then on. The last two of the 40 iterations
    end no interval and are not written."""
    numbers = iter(range(1, 1000))

    def numbered_loss(agent, avg_agent, segment, args):
        zero = sum(p.sum() for p in agent.parameters()) * 0.0
        return zero, dict.fromkeys(acer.METRICS, torch.tensor(float(next(numbers))))

    monkeypatch.setattr(acer, "acer_loss", numbered_loss)
    summary = acer.main(tiny(log_freq=60))
    updates = 0
    expected = []
    for k in range(1, 41):
        updates += 1 if k < 5 else 5
        if k % 3 == 0:
            expected.append((20 * k, float(updates)))
    logged = scalars(summary["run_dir"])
    assert summary["replay_updates"] == 4 * 36 and len(expected) == 13
    for key in acer.METRICS:
        assert logged[f"losses/{key}"] == [(step, pytest.approx(value)) for step, value in expected], key
    assert [step for step, _ in logged["charts/SPS"]] == [step for step, _ in expected]


def test_a_replay_start_past_the_run_s_end_gets_a_note(in_tmp, capsys):
    """--replay-start (10,000 by default) above --total-timesteps: no replayed update ever runs,
    which the run says (it trained on-policy alone, silently)."""
    summary = acer.main(tiny(total_timesteps=200, replay_start=400))
    assert "note: --replay-start 400 is past the run's end: on-policy updates only" in capsys.readouterr().err
    assert summary["replay_updates"] == 0
    acer.main(tiny(total_timesteps=200, replay_start=200))
    assert "note" not in capsys.readouterr().err
    with pytest.raises(acer.ConfigError, match="out of memory"):  # a refused run: its error alone, no note
        acer.main(tiny(total_timesteps=210, replay_start=400, buffer_size=10**11))
    assert "note" not in capsys.readouterr().err


def test_total_timesteps_is_rounded_down_to_whole_segments_and_says_so(in_tmp, capsys):
    assert acer.main(tiny(total_timesteps=819))["global_step"] == 800
    assert "note: --total-timesteps rounded down to 800" in capsys.readouterr().err
    assert acer.main(tiny(total_timesteps=820))["global_step"] == 820
    assert "rounded" not in capsys.readouterr().err


@pytest.mark.slow
def test_compiled_update_reaches_on_policy_and_replay_updates(in_tmp):
    summary = acer.main(tiny(compile=True, total_timesteps=400))
    assert summary["iterations"] == 20 and summary["replay_updates"] == 4 * 16
    logged = scalars(summary["run_dir"])
    assert all(torch.isfinite(torch.tensor(value)) for _, value in logged["losses/q_loss"])
    assert len(logged["losses/q_loss"]) == 20


def test_the_average_network_moves_and_lags(in_tmp):
    summary = acer.main(tiny(save_model=True))
    model = torch.load(glob.glob(f"{summary['run_dir']}/model.pt")[0], weights_only=False)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    torch.manual_seed(1)
    initial = acer.Agent(envs).state_dict()  # main builds the agent first after seeding
    for name in initial:
        assert not torch.equal(model["avg_agent"][name], initial[name]), name
        assert not torch.equal(model["avg_agent"][name], model["agent"][name]), name


def test_smoke_atari_reaches_replay_updates(in_tmp):
    summary = acer.main(
        tiny(
            env_id="BreakoutNoFrameskip-v4",
            total_timesteps=40,
            num_envs=2,
            num_steps=4,
            buffer_size=16,
            replay_start=16,
            replay_ratio=1,
        )
    )
    assert summary["iterations"] == 5 and summary["replay_updates"] == 4


def test_same_seed_gives_identical_logged_losses_and_a_stopped_or_killed_run_resumes_exactly(tmp_path):
    flags = [
        "--total-timesteps",
        "3200",
        "--eval-freq",
        "1600",
        "--eval-episodes",
        "1",
        "--save-model",
        "--no-cuda",
        "--replay-start",
        "800",
        "--buffer-size",
        "1600",
        "--log-freq",
        "320",
    ]
    check_stopped_runs_resume_exactly(
        tmp_path,
        acer,
        flags,
        1000,
        3200,
        ("agent", "avg_agent"),
        ("losses/policy_loss", "losses/q_loss", "losses/rho_mean", "eval/episodic_return"),
        kill=True,
    )


BAD_INPUT = {
    "continuous actions": (["--env-id", "Pendulum-v1"], "a2c.py"),
    "tuple observations": (["--env-id", "Blackjack-v1"], "FlattenObservation"),
    "unknown env id": (["--env-id", "NoSuchEnv-v0"], "unknown env id"),
    "buffer below one segment": (["--buffer-size", "100"], "--buffer-size"),
    "replay never starts": (["--replay-start", "60000"], "--replay-start"),
    "replay start beyond the whole segments the buffer holds": (
        ["--num-envs", "3", "--num-steps", "7", "--buffer-size", "100", "--replay-start", "100"],
        "exceeds the 84 ",
    ),
    "negative replay ratio": (["--replay-ratio", "-1"], "--replay-ratio"),
    "average decay of one": (["--avg-decay", "1"], "--avg-decay"),
    "negative average decay": (["--avg-decay", "-0.1"], "--avg-decay must lie in [0, 1)"),
    "negative q coefficient": (["--q-coef", "-1"], "--q-coef must be non-negative"),
    "negative entropy coefficient": (["--ent-coef", "-0.1"], "--ent-coef must be non-negative"),
    "zero learning rate": (["--learning-rate", "0"], "--learning-rate must be positive"),
    "zero gradient clip": (["--max-grad-norm", "0"], "--max-grad-norm must be positive"),
    "rmsprop decay of one": (["--rms-alpha", "1"], "--rms-alpha must lie in [0, 1)"),
    "zero max kl": (["--max-kl", "0"], "--max-kl"),
    "zero truncation": (["--truncation-c", "0"], "--truncation-c"),
    "budget below one segment": (["--total-timesteps", "100"], "--total-timesteps"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_one_line_exit_2_nothing_written(in_tmp, capsys, case):
    argv, needle = BAD_INPUT[case]
    with pytest.raises(SystemExit) as exit_info:
        acer.cli(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert os.listdir(in_tmp) == []


def test_continuous_env_from_the_shell_points_to_the_right_scripts(tmp_path):
    result = run_cli(acer, ["--env-id", "Pendulum-v1"], tmp_path)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert "sac_continuous_action.py" in result.stderr and "a2c.py" in result.stderr
    assert os.listdir(tmp_path) == []


def test_smoke_capture_video(tmp_path):
    check_capture_video(
        tmp_path,
        acer,
        [
            "--env-id",
            "BreakoutNoFrameskip-v4",
            "--total-timesteps",
            "40",
            "--num-envs",
            "2",
            "--num-steps",
            "5",
            "--buffer-size",
            "20",
            "--replay-start",
            "10",
        ],
        "losses/q_loss",
    )


# --------------------------------------------------------------------------------------------------
# LEARNING
# --------------------------------------------------------------------------------------------------
# CartPole-v1, defaults otherwise (8 envs, T 20, replay ratio 4, trust region on), replay from 2,000
# transitions, one thread, greedy evaluations (10 episodes) at 15k and at the end (29,920 steps),
# seeds 1-5 measured:
#   15k: 134.6, 60.1, 171.4, 46.1, 54.0     end: 231.8, 159.8, 141.1, 120.3, 140.6
#   best: 120.3 ... 231.8
# The worst seed's best evaluation was 120.3; untrained greedy policies score 9 to 30.
def test_learns_cartpole(in_tmp):
    summary = acer.main(acer.Args(seed=1, total_timesteps=30_000, replay_start=2_000, eval_freq=15_000, cuda=False))
    evaluations = [v for _, v in scalars(summary["run_dir"])["eval/episodic_return"]]
    assert summary["replay_updates"] > 0 and len(evaluations) == 2 and max(evaluations) > 80, evaluations


@pytest.mark.parametrize("argv", [["--log-interval", "2"], ["--gamma", "abc"], ["--gamma"]])
def test_what_tyro_cannot_parse_gets_tyro_s_message_naming_the_flag(in_tmp, capsys, argv):
    """A removed flag, a value that is no float, a missing value: tyro's message, exit code 2."""
    with pytest.raises(SystemExit) as exit_info:
        acer.cli(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and argv[0] in err, err
    assert os.listdir(in_tmp) == []
