"""Specification of td3_continuous_action.py: target policy smoothing checked statistically, the clipped double-Q
target, the actor, smoke runs of its flags that reach both updates, and a short learning run. The common block
(episode ends, resume, bad input, ...) is specified in test_common_block.py."""

import math
import os
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import scalars

import td3_continuous_action as td3

LOW, HIGH = [-2.0, 0.0, 10.0], [5.0, 0.5, 10.1]  # asymmetric bounds, scales 3.5, 0.25 and 0.05


def fake_envs(low, high, obs_dim=3):
    """The two attributes Actor and QEnsemble read from a vector env."""
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        single_action_space=gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32)),
    )


def tiny(**overrides) -> td3.Args:
    base = dict(env_id="Pendulum-v1", total_timesteps=300, learning_starts=100, batch_size=32, buffer_size=1_000,
                eval_freq=0, eval_episodes=1, log_freq=50, cuda=False)
    return td3.Args(**{**base, **overrides})


def clipped_normal_variance(sigma: float, c: float) -> float:
    """Var[clip(X, -c, c)] for X ~ N(0, sigma^2): sigma^2 (1 - 2 Phi(-k) - 2 k phi(k)) + 2 c^2 Phi(-k), k = c / sigma."""
    k = c / sigma
    tail = 0.5 * (1 + math.erf(-k / math.sqrt(2)))
    density = math.exp(-k * k / 2) / math.sqrt(2 * math.pi)
    return sigma**2 * (1 - 2 * tail - 2 * k * density) + 2 * c**2 * tail


# ---------------------------------------------------------------------------------------------------------------------
# MATH
# ---------------------------------------------------------------------------------------------------------------------
def test_smoothing_noise_is_independent_scaled_and_clipped():
    torch.manual_seed(0)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    scale, bias = (high - low) / 2, (high + low) / 2
    n = 200_000
    centre = bias.expand(n, 3).contiguous()  # at the centre the bounds never bind, so only the noise clip acts
    noise = (td3.smoothed_target_actions(centre, scale, low, high, policy_noise=0.2, noise_clip=0.5) - centre) / scale
    # scaled by the action range: in units of the scale every dimension has the same clipped-normal spread
    expected_std = math.sqrt(clipped_normal_variance(0.2, 0.5))
    for d in range(3):
        assert noise[:, d].std().item() == pytest.approx(expected_std, rel=0.01)
        assert noise[:, d].mean().abs().item() < 0.002
    # clipped at c = noise_clip * scale, and clipped as often as N(0, 0.2^2) leaves [-0.5, 0.5] (2 Phi(-2.5) = 1.24%)
    assert noise.abs().max().item() <= 0.5 + 1e-5
    at_clip = (noise.abs() > 0.5 - 1e-4).float().mean().item()
    assert at_clip == pytest.approx(2 * 0.5 * (1 + math.erf(-2.5 / math.sqrt(2))), rel=0.05)
    # independent per dimension and per sample: no correlation between dimensions or between neighbouring samples
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


# ---------------------------------------------------------------------------------------------------------------------
# SMOKE: every boolean flag in both states reaches both updates
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("flag", ["torch_deterministic", "cuda", "save_model"])
def test_smoke_boolean_flags_reach_updates(in_tmp, flag, value):
    summary = td3.main(tiny(**{flag: value}))
    # steps 100..300 bring 201 critic updates; every second one an actor update and the target updates
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 100
    logged = scalars(summary["run_dir"])
    for tag in ["losses/qf1_values", "losses/qf2_values", "losses/qf1_loss", "losses/qf2_loss", "losses/qf_loss",
                "losses/actor_loss", "charts/SPS", "charts/episodic_return", "charts/episodic_length",
                "eval/episodic_return"]:
        assert tag in logged, tag
    assert os.path.exists(f"{summary['run_dir']}/model.pt") == (flag == "save_model" and value)


def test_smoke_vector_envs_and_policy_frequency(in_tmp):
    args = tiny(num_envs=2, policy_frequency=3, exploration_noise=0.5, checkpoint_freq=300)
    summary = td3.main(args)
    # iterations whose step count reaches learning_starts: global_step = 100, 102, ..., 300 -> 101 iterations
    assert summary["critic_updates"] == 202 and summary["actor_updates"] == 202 // 3
    checkpoint = torch.load(f"{summary['run_dir']}/checkpoint.pt", weights_only=False)
    actions = checkpoint["rb"]["fields"][1]
    assert actions.abs().max() <= 2.0 and (actions.abs() == 2.0).any()  # exploration noise clipped to the bounds
    target, online = checkpoint["actor_target"], checkpoint["actor"]
    assert all(not torch.equal(target[k], online[k]) for k in target if k.startswith("fc"))  # Polyak, not a copy


@pytest.mark.slow
def test_smoke_compile(in_tmp):
    summary = td3.main(tiny(compile=True))
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 100


# ---------------------------------------------------------------------------------------------------------------------
# LEARNING
# ---------------------------------------------------------------------------------------------------------------------
def test_learns_pendulum(in_tmp):
    """Pendulum-v1, 7,000 env steps (1,000 random), final evaluation without noise over 10 episodes."""
    summary = td3.main(td3.Args(env_id="Pendulum-v1", total_timesteps=7_000, learning_starts=1_000, eval_freq=0,
                                eval_episodes=10, cuda=False, seed=1))
    # Measured on this machine (2-core CPU, torch 2.13.0 CPU, 1 thread), final eval at 7,000 steps, seeds 1-5:
    #   -182.38, -300.31, -326.87, -223.19, -304.07   (at 1,000 steps, still random: -1,318 to -1,637)
    # Again after the speed work (fused Adam, multiply-and-sum output layer):
    #   -209.59, -220.24, -215.10, -221.39, -303.58
    # Seed 1 is asserted; the threshold sits below the worst of the five seeds.
    assert summary["eval_return"] > -600
