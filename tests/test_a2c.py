"""a2c.py: n-step returns and GAE against brute-force loops and SB3's RolloutBuffer, truncation
bootstrapping, smoke runs of every flag that reach updates, resume, bad input, and short CartPole
learning runs with both advantages."""

import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import scalars
from test_common_block import check_capture_video, check_stopped_runs_resume_exactly

import a2c


def random_rollout(T=7, N=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards, values, last_values = (
        torch.randn(T, N, generator=g),
        torch.randn(T, N, generator=g),
        torch.randn(N, generator=g),
    )
    dones = (torch.rand(T, N, generator=g) < 0.3).float()
    return rewards, values, dones, last_values


# --------------------------------------------------------------------------------------------------
# MATH
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_nstep_returns_and_gae_match_brute_force_loops(seed):
    rewards, values, dones, last_values = random_rollout(seed=seed)
    T, N = rewards.shape
    gamma, lam = 0.97, 0.9
    returns, advantages = torch.zeros(T, N), torch.zeros(T, N)
    for n in range(N):
        for t in range(T):
            # R_t = sum of discounted rewards until the episode ends or the rollout does, then
            # V(s_T) if it did not end
            ret, discount, ended = 0.0, 1.0, False
            for k in range(t, T):
                ret += discount * rewards[k, n]
                discount *= gamma
                if dones[k, n]:
                    ended = True
                    break
            returns[t, n] = ret + (0.0 if ended else discount * last_values[n])
            # A_t = sum_k (gamma * lambda)^(k-t) delta_k, stopping after the step that ends the
            # episode
            adv, weight = 0.0, 1.0
            for k in range(t, T):
                next_value = last_values[n] if k == T - 1 else values[k + 1, n]
                adv += weight * (rewards[k, n] + gamma * (1 - dones[k, n]) * next_value - values[k, n])
                if dones[k, n]:
                    break
                weight *= gamma * lam
            advantages[t, n] = adv
    torch.testing.assert_close(a2c.nstep_returns(rewards, dones, last_values, gamma), returns)
    torch.testing.assert_close(a2c.gae_advantages(rewards, values, dones, last_values, gamma, lam), advantages)


def test_gae_with_lambda_one_is_nstep_returns_minus_values():
    rewards, values, dones, last_values = random_rollout(seed=5)
    torch.testing.assert_close(
        a2c.gae_advantages(rewards, values, dones, last_values, 0.99, 1.0),
        a2c.nstep_returns(rewards, dones, last_values, 0.99) - values,
    )


def test_gae_matches_sb3_rollout_buffer():
    from stable_baselines3.common.buffers import RolloutBuffer

    rewards, values, dones, last_values = random_rollout(T=6, N=4, seed=7)
    T, N = rewards.shape
    buffer = RolloutBuffer(
        T, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), "cpu", gae_lambda=0.95, gamma=0.99, n_envs=N
    )
    # SB3 marks the first step of an episode (episode_starts[t] = dones[t-1]) and takes the last
    # dones separately
    episode_starts = torch.cat([torch.zeros(1, N), dones[:-1]])
    for t in range(T):
        buffer.add(
            np.zeros((N, 2), np.float32),
            np.zeros((N, 1)),
            rewards[t].numpy(),
            episode_starts[t].numpy(),
            values[t],
            torch.zeros(N),
        )
    buffer.compute_returns_and_advantage(last_values, dones[-1].numpy())
    ours = a2c.gae_advantages(rewards, values, dones, last_values, 0.99, 0.95)
    np.testing.assert_allclose(ours.numpy(), buffer.advantages, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((ours + values).numpy(), buffer.returns, rtol=1e-5, atol=1e-6)


def test_truncation_bootstraps_from_the_final_value_and_termination_does_not():
    rewards = torch.tensor([1.0, 1.0, 1.0])
    truncations = torch.tensor([0.0, 1.0, 0.0])  # env 0 steps on, env 1 is truncated, env 2 terminates
    final_values = torch.tensor([50.0, 10.0, 30.0])
    bootstrapped = a2c.bootstrap_truncations(rewards, truncations, final_values, 0.9)
    torch.testing.assert_close(bootstrapped, torch.tensor([1.0, 1.0 + 0.9 * 10.0, 1.0]))
    # both ends stop the return there: nothing of the next episode (reward 100, value 1000) flows
    # back
    dones = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    returns = a2c.nstep_returns(
        torch.stack([bootstrapped, torch.full((3,), 100.0)]), dones, torch.full((3,), 1000.0), 0.9
    )
    torch.testing.assert_close(returns[0], torch.tensor([1.0 + 0.9 * (100 + 0.9 * 1000), 10.0, 1.0]))


def test_a_step_that_terminates_as_its_time_limit_truncates_is_not_bootstrapped(in_tmp, monkeypatch):
    """Gymnasium's TimeLimit sets truncated on the last allowed step even when the env terminates
    there (every 5th step of EndsAtTimeLimit-v0): such a step is a termination, and gets no gamma *
    V(final obs)."""
    bootstrapped = []
    monkeypatch.setattr(a2c, "bootstrap_truncations", lambda r, tr, *rest: bootstrapped.append(int(tr.sum())) or r)
    assert a2c.main(tiny(env_id="EndsAtTimeLimit-v0", total_timesteps=100))["global_step"] == 100
    assert bootstrapped == [0] * 5  # each 5th of the 25 steps of the 4 envs: no truncation is left to bootstrap


def test_gae_of_a_one_step_one_env_rollout_trains_without_standardizing(in_tmp):
    """One advantage a rollout has no standard deviation: it is left as it is (SB3), not made
    nan."""
    summary = a2c.main(tiny(num_envs=1, num_steps=1, advantage="gae", total_timesteps=40, log_freq=1))
    losses = [value for _, value in scalars(summary["run_dir"])["losses/policy_loss"]]
    assert len(losses) == 40 and all(math.isfinite(value) for value in losses)


def test_continuous_policy_log_prob_is_of_the_unclipped_sample():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    agent = a2c.Agent(envs, shared=False)
    obs = torch.randn(5, 3)
    actions = torch.tensor([[-7.0], [-2.5], [0.0], [2.5], [7.0]])  # outside Pendulum's [-2, 2] at both ends
    mean = agent.actor_head(agent.actor_trunk(obs))
    log_prob, entropy = agent.log_prob_entropy(mean, actions)
    reference = torch.distributions.Normal(mean, agent.log_std.exp())
    torch.testing.assert_close(log_prob, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))


def test_categorical_log_prob_and_entropy_match_torch_distributions():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = a2c.Agent(envs, shared=True)
    logits = torch.randn(6, 2) * 3
    actions = torch.tensor([0, 1, 1, 0, 1, 0])
    log_prob, entropy = agent.log_prob_entropy(logits, actions)
    reference = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(log_prob, reference.log_prob(actions))
    torch.testing.assert_close(entropy, reference.entropy())


def test_act_samples_from_the_policy():
    """Gumbel-max draws follow softmax(logits): frequencies within 5 standard errors over 40k draws
    per state; Box draws have the Gaussian's mean and std. V(s) is the critic's value."""
    torch.manual_seed(0)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = a2c.Agent(envs, shared=False)
    with torch.no_grad():
        agent.actor_head.weight.normal_(0, 0.3)  # spread the probabilities away from 1/2
    obs = torch.randn(4, 4).repeat(10_000, 1)
    actions, values = agent.act(obs)
    logits, expected_values = agent(obs[:4])
    frequency = actions.view(10_000, 4).float().mean(0)
    p = logits.softmax(-1)[:, 1].detach()
    assert ((frequency - p).abs() < 5 * (p * (1 - p) / 10_000).sqrt() + 1e-6).all(), (frequency, p)
    assert p.max() - p.min() > 0.2 and 0.02 < p.min() and p.max() < 0.98
    torch.testing.assert_close(values[:4], expected_values.detach())

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    agent = a2c.Agent(envs, shared=False)
    with torch.no_grad():
        agent.log_std.fill_(-0.7)
    obs = torch.randn(1, 3).repeat(40_000, 1)
    actions, _ = agent.act(obs)
    mean = agent.actor_head(agent.actor_trunk(obs[:1])).detach()
    assert abs(actions.mean() - mean.item()) < 0.01 and abs(actions.std() - np.exp(-0.7)) < 0.01


def test_logged_losses_are_the_latest_updates(in_tmp, monkeypatch):
    """Update n returns n as every metric (its loss is 0); the losses written every 4 updates (80
    env steps) are those of the update just made, 4, 8, ..., 20, as CleanRL logs them, not a mean
    over the updates since the last write."""
    numbers = iter(range(1, 1000))

    def numbered_loss(agent, obs, actions, advantages, value_targets, vf_coef, ent_coef):
        zero = sum(p.sum() for p in agent.parameters()) * 0.0
        return zero, dict.fromkeys(("policy_loss", "value_loss", "entropy"), torch.tensor(float(next(numbers))))

    monkeypatch.setattr(a2c, "compute_loss", numbered_loss)
    summary = a2c.main(tiny(log_freq=80))
    logged = scalars(summary["run_dir"])
    assert summary["updates"] == 20
    for tag in ("losses/policy_loss", "losses/value_loss", "losses/entropy"):
        assert logged[tag] == [(80 * k, 4.0 * k) for k in range(1, 6)], tag
    assert [step for step, _ in logged["losses/explained_variance"]] == [80 * k for k in range(1, 6)]


def test_what_is_written_every_4_updates_is_every_4th_of_what_is_written_every_update(tmp_path):
    """Same seed: each losses/* value written every 4 updates (80 env steps) is the one written at
    that step by a run that writes after every update."""
    runs = {}
    for interval in (1, 4):
        os.chdir(tmp_path)
        summary = a2c.main(tiny(log_freq=20 * interval, exp_name=f"interval{interval}"))
        runs[interval] = scalars(summary["run_dir"])
    for tag in ("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/explained_variance"):
        assert len(runs[1][tag]) == 20 and runs[4][tag] == runs[1][tag][3::4], tag
    assert len(runs[4]["charts/SPS"]) == 5


# --------------------------------------------------------------------------------------------------
# SMOKE, RESUME, BAD INPUT
# --------------------------------------------------------------------------------------------------
def tiny(**overrides):
    return a2c.Args(
        **{
            **dict(total_timesteps=400, num_envs=4, num_steps=5, eval_freq=0, eval_episodes=1, cuda=False, log_freq=20),
            **overrides,
        }
    )


@pytest.mark.parametrize(
    "flags",
    [
        dict(advantage="nstep"),
        dict(advantage="gae"),
        dict(advantage="gae", norm_adv=False),
        dict(shared_network=True),
        dict(anneal_lr=True, optimizer="adam"),
        dict(num_envs=2, save_model=True),
        dict(env_id="Pendulum-v1"),
        dict(env_id="Pendulum-v1", shared_network=True, advantage="gae"),
    ],
)
def test_smoke_reaches_updates(in_tmp, flags):
    summary = a2c.main(tiny(**flags))
    assert summary["updates"] == 400 // (5 * flags.get("num_envs", 4))
    logged = scalars(summary["run_dir"])
    for tag in (
        "losses/policy_loss",
        "losses/value_loss",
        "losses/entropy",
        "losses/explained_variance",
        "charts/learning_rate",
        "charts/SPS",
        "eval/episodic_return",
    ):
        assert len(logged[tag]) >= 1, tag
    lrs = [v for _, v in logged["charts/learning_rate"]]
    assert (lrs[-1] < lrs[0]) == flags.get("anneal_lr", False)


def test_smoke_atari_reaches_updates(in_tmp):
    summary = a2c.main(tiny(env_id="BreakoutNoFrameskip-v4", total_timesteps=40, num_envs=2, shared_network=True))
    assert summary["updates"] == 4


def test_same_seed_gives_identical_logged_losses_and_a_stopped_or_killed_run_resumes_exactly(tmp_path):
    flags = [
        "--total-timesteps",
        "3000",
        "--eval-freq",
        "1000",
        "--eval-episodes",
        "1",
        "--save-model",
        "--no-cuda",
        "--advantage",
        "gae",
        "--log-freq",
        "200",
    ]
    check_stopped_runs_resume_exactly(
        tmp_path,
        a2c,
        flags,
        400,
        3000,
        ("agent",),
        ("losses/policy_loss", "losses/value_loss", "eval/episodic_return"),
        kill=True,
    )


BAD_INPUT = {  # this script's flags; the common ones are in test_common_block.py
    "no steps per rollout": (["--num-steps", "0"], "--num-steps"),
    "budget below one rollout": (["--total-timesteps", "10"], "--total-timesteps"),
    "lambda above one": (["--gae-lambda", "1.5"], "--gae-lambda"),
    "negative lambda": (["--gae-lambda", "-0.1"], "--gae-lambda must lie in [0, 1]"),
    "negative value coefficient": (["--vf-coef", "-1"], "--vf-coef must be non-negative"),
    "zero gradient clip": (["--max-grad-norm", "0"], "--max-grad-norm must be positive"),
    "zero optimizer epsilon": (["--optimizer-eps", "0"], "--optimizer-eps must be positive"),
    "rmsprop decay of one": (["--rms-alpha", "1"], "--rms-alpha must lie in [0, 1)"),
    "zero learning rate": (["--learning-rate", "0"], "--learning-rate"),
    "gamma above one": (["--gamma", "1.01"], "--gamma"),
    "negative entropy coefficient": (["--ent-coef", "-0.1"], "--ent-coef"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_one_line_exit_2_nothing_written(in_tmp, capsys, case):
    argv, needle = BAD_INPUT[case]
    with pytest.raises(SystemExit) as exit_info:
        a2c.cli(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert os.listdir(in_tmp) == []


def test_saved_model_loads_and_evaluates_as_the_readme_shows(in_tmp):
    from conftest import ROOT

    summary = a2c.main(tiny(save_model=True, eval_episodes=2, shared_network=True))
    page = (ROOT / "docs" / "a2c.md").read_text()
    snippet = page.split("<!-- load-model a2c -->")[1].split("```python")[1].split("```")[0]
    namespace = {}
    exec(snippet.replace("runs/RUN_NAME/model.pt", f"{summary['run_dir']}/model.pt"), namespace)
    assert namespace["returns"].shape == (10,)
    assert namespace["returns"][:2].mean() == pytest.approx(summary["eval_return"])


def test_smoke_capture_video(tmp_path):
    check_capture_video(
        tmp_path,
        a2c,
        ["--env-id", "InvertedPendulum-v5", "--total-timesteps", "80", "--num-envs", "2"],
        "losses/policy_loss",
    )


def test_smoke_capture_video_of_a_classic_control_env(tmp_path):
    """CartPole draws its frames with pygame, which the video set (and so the dev set) installs."""
    check_capture_video(
        tmp_path, a2c, ["--env-id", "CartPole-v1", "--total-timesteps", "80", "--num-envs", "2"], "losses/policy_loss"
    )


# --------------------------------------------------------------------------------------------------
# LEARNING
# --------------------------------------------------------------------------------------------------
# CartPole-v1, defaults otherwise (8 envs, 5 steps, RMSprop 7e-4), one thread, greedy evaluations
# (10 episodes) every 25k steps, seeds 1-5:
#   nstep  25k: 434.9, 412.8, 444.1, 271.7, 473.5   50k: 500.0, 185.3, 500.0, 345.9, 334.5
#          (100k: 90.3 ... 500.0)
#   gae    25k: 247.9, 193.6, 500.0, 147.1, 499.2   50k: 492.0, 500.0, 500.0,  77.9, 198.6
#          (100k: 189.8, 45.4, ...)
# A2C's greedy policy swings between evaluations (gae seed 2: 500.0 at 75k, 45.4 at 100k), so the
# test asserts the best of the two evaluations in 50k steps, the maximum-over-training protocol of
# the TD3 paper. The worst seed's best was 147.1; untrained greedy policies score 9 to 30.
@pytest.mark.parametrize("advantage", ["nstep", "gae"])
def test_learns_cartpole(in_tmp, advantage):
    summary = a2c.main(a2c.Args(seed=1, total_timesteps=50_000, advantage=advantage, eval_freq=25_000, cuda=False))
    evaluations = [v for _, v in scalars(summary["run_dir"])["eval/episodic_return"]]
    assert len(evaluations) == 2 and max(evaluations) > 100, evaluations


# InvertedPendulum-v5 (Box actions), --advantage gae, defaults otherwise, one thread, greedy
# evaluations (10 episodes) every 10k steps, seeds 1-5 measured (10k, 20k, ..., 80k):
#   seed 1: 130.4, 377.1, 163.6,  114.9, 1000.0,  409.7, 1000.0, 1000.0
#   seed 2:  97.6, 214.2, 1000.0, 388.9, 1000.0, 1000.0, 1000.0, 1000.0
#   seed 3: 234.9, 174.5, 247.0, 1000.0, 1000.0, 1000.0,  997.9, 1000.0
#   seed 4:  61.0, 111.2, 266.0,  173.8, 1000.0, 1000.0, 1000.0, 1000.0
#   seed 5:  93.0, 188.2, 419.8,  115.2,  124.1, 1000.0, 1000.0, 1000.0
# The greedy policy swings between evaluations (seed 1: 1000.0 at 50k, 409.7 at 60k), so one
# evaluation at 50k fails seed 5 (124.1), and seed 1 on another CPU (44.1). The test asserts the
# best of the eight evaluations in 80k steps (the TD3 paper's maximum over training): every seed's
# best was 1000.0, first reached at 30k to 60k; before that no evaluation passed 419.8, and
# untrained greedy policies score 24.1 to 26.0. Seeds 6-10 first reached 1000.0 at 50k, 30k, 30k,
# 50k and 70k (seed 10: 638.4 at 50k, 64.4 at 60k), best 1000.0 each.
def test_learns_inverted_pendulum(in_tmp):
    summary = a2c.main(
        a2c.Args(
            env_id="InvertedPendulum-v5", seed=1, total_timesteps=80_000, advantage="gae", eval_freq=10_000, cuda=False
        )
    )
    evaluations = [v for _, v in scalars(summary["run_dir"])["eval/episodic_return"]]
    assert len(evaluations) == 8 and max(evaluations) > 500, evaluations


def test_an_unknown_advantage_gets_tyro_s_message_naming_the_choices(in_tmp, capsys):
    with pytest.raises(SystemExit) as exit_info:
        a2c.cli(["--advantage", "td"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--advantage" in err and "nstep" in err and "gae" in err, err
    assert os.listdir(in_tmp) == []
