"""Specification of the --compile path of sac_continuous_action.py and td3_continuous_action.py: `adam_` and
`clip_grad_norm` against torch's own, and SAC's functional updates against the same updates written with autograd
and torch.optim.Adam, run eagerly and compiled (TD3's are specified in test_td3_continuous_action.py)."""

import glob
import math

import pytest
import torch
from test_td3_continuous_action import HIGH, LOW, assert_same_training, fake_envs, random_batches

import sac_continuous_action as sac
import td3_continuous_action as td3


@pytest.mark.parametrize("module", [sac, td3], ids=["sac", "td3"])
def test_adam_matches_torch_optim_adam(module):
    """20 steps of changing gradients, against torch.optim.Adam's single-tensor arithmetic."""
    torch.manual_seed(0)
    reference = [torch.randn(5, 3, requires_grad=True), torch.randn(7, requires_grad=True)]
    params = [p.detach().clone() for p in reference]
    exp_avgs, exp_avg_sqs = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    optimizer = torch.optim.Adam(reference, lr=0.01, betas=(0.8, 0.99), eps=1e-6, foreach=False)
    step_size, bias_correction2_sqrt = torch.zeros(()), torch.zeros(())
    for t in range(1, 21):
        grads = [torch.randn_like(p) * 10 ** (t % 3) for p in params]  # magnitudes that change, as in training
        for p, grad in zip(reference, grads):
            p.grad = grad.clone()
        optimizer.step()
        step_size.fill_(0.01 / (1 - 0.8**t))
        bias_correction2_sqrt.fill_(math.sqrt(1 - 0.99**t))
        module.adam_(params, grads, exp_avgs, exp_avg_sqs, step_size, bias_correction2_sqrt, (0.8, 0.99), 1e-6)
    for p, expected in zip(params, reference):
        torch.testing.assert_close(p, expected.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(max_norm):
    """Scaled when the joint norm exceeds max_norm (0.5), untouched when it does not (100)."""
    torch.manual_seed(0)
    grads = [torch.randn(4, 3), torch.randn(3)]
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
    clipped = sac.clip_grad_norm(grads, max_norm)
    for p, g in zip(params, clipped):
        torch.testing.assert_close(g, p.grad)
    assert torch.equal(clipped[0], grads[0]) == (max_norm == 100.0)


def sac_nets(num_critics: int, seed: int = 0):
    torch.manual_seed(seed)
    envs = fake_envs(LOW, HIGH)
    actor, qf, qf_target = sac.Actor(envs), sac.QEnsemble(envs, num_critics), sac.QEnsemble(envs, num_critics)
    qf_target.load_state_dict(qf.state_dict())
    qf_target.requires_grad_(False)
    return actor, qf, qf_target, torch.zeros(1, requires_grad=True)


def sac_optimizers(actor, qf, log_alpha, args, **kwargs):
    """As `main` lays them out: log alpha in a second parameter group of the actor's optimizer."""
    q_optimizer = torch.optim.Adam(qf.parameters(), lr=args.q_lr, **kwargs)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr, **kwargs)
    if args.autotune:
        actor_optimizer.add_param_group({"params": [log_alpha], "lr": args.q_lr})
    else:
        log_alpha.data.fill_(math.log(args.alpha))
    return q_optimizer, actor_optimizer


def sac_autograd_updates(actor, qf, qf_target, log_alpha, args, target_entropy):
    """SAC's updates written the plain autograd way, with torch.optim.Adam and clip_grad_norm_: the reference."""
    q_optimizer, actor_optimizer = sac_optimizers(actor, qf, log_alpha, args, foreach=False)
    num_subsample = args.num_subsample_critics or args.num_critics

    def step(optimizer, loss, params):
        optimizer.zero_grad()
        log_alpha.grad = None
        loss.backward()
        if args.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(params), args.grad_clip_norm, foreach=False)
        optimizer.step()

    def update_critic(batch, update_target):
        loss, metrics = sac.compute_loss_q(actor, qf, qf_target, batch, log_alpha.exp().detach(), args.gamma,
                                           args.backup_entropy, num_subsample)
        step(q_optimizer, loss, qf.parameters())
        if update_target:
            with torch.no_grad():
                for p_target, p in zip(qf_target.parameters(), qf.parameters()):
                    p_target.lerp_(p, args.tau)
        return metrics

    def update_actor(obs):
        alpha = log_alpha.exp().detach()
        actor_loss, log_prob = sac.compute_loss_pi(actor, qf, obs, alpha)
        metrics = {"actor_loss": actor_loss.detach(), "alpha": alpha[0], "entropy": -log_prob.mean()}
        loss = actor_loss
        if args.autotune:
            alpha_loss = sac.compute_loss_alpha(log_alpha, log_prob, target_entropy)
            metrics["alpha_loss"] = alpha_loss.detach()
            loss = actor_loss + alpha_loss
        step(actor_optimizer, loss, actor.parameters())
        return metrics
    return update_critic, update_actor


def run_sac_updates(update_critic, update_actor, batches):
    """A critic update every batch, the target every other one, an actor update every other one (reseeding torch
    before each, for the policy's noise and the critics' subsampling); the metrics of each."""
    logged = []
    for i, batch in enumerate(batches):
        torch.manual_seed(100 + i)
        metrics = update_critic(batch, i % 2 == 0)
        if i % 2 == 1:
            metrics = {**metrics, **update_actor(batch[0])}
        logged.append(metrics)
    return logged


SAC_CASES = {"defaults": {}, "fixed alpha, clipping, 3 critics subsampled to 2":
             dict(autotune=False, grad_clip_norm=1.0, num_critics=3, num_subsample_critics=2, backup_entropy=False)}


@pytest.mark.parametrize("case", list(SAC_CASES))
def test_sac_functional_updates_match_autograd_updates(case):
    """The same metrics at every update (the actor's loss is computed after this step's critic update, which a stale
    critic would change) and the same networks and log alpha after 8 updates, at learning rates that move them."""
    args = sac.Args(policy_lr=0.01, q_lr=0.01, tau=0.1, **SAC_CASES[case])
    batches = random_batches(8)
    reference = sac_nets(args.num_critics)
    logged = run_sac_updates(*sac_autograd_updates(*reference, args, -3.0), batches)
    nets = sac_nets(args.num_critics)
    updates = sac.functional_updates(*nets, *sac_optimizers(nets[0], nets[1], nets[3], args), args, -3.0,
                                     compile=False)
    assert_same_training(nets[:3], reference[:3], run_sac_updates(*updates, batches), logged, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(nets[3], reference[3], rtol=1e-5, atol=1e-6)
    assert (nets[3].item() == pytest.approx(math.log(0.2))) != args.autotune  # log alpha tuned, or fixed alpha
    assert not torch.equal(nets[0].fc1.weight, sac_nets(args.num_critics)[0].fc1.weight)  # the networks did move


def test_sac_compiled_updates_match_the_same_updates_eager():
    args = sac.Args()
    batches = random_batches(6, size=256)
    results = []
    for compile in (False, True):
        nets = sac_nets(args.num_critics)
        updates = sac.functional_updates(*nets, *sac_optimizers(nets[0], nets[1], nets[3], args), args, -3.0,
                                         compile=compile)
        results.append((nets, run_sac_updates(*updates, batches)))
    (eager_nets, eager_logged), (compiled_nets, compiled_logged) = results
    assert_same_training(compiled_nets[:3], eager_nets[:3], compiled_logged, eager_logged, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("module", [sac, td3], ids=["sac", "td3"])
def test_compiled_run_stopped_and_resumed_ends_identical(tmp_path, module):
    """--compile keeps Adam's state in the optimizers, so a checkpoint resumes the compiled path exactly."""
    from test_common_block import RESUME_FLAGS, run_cli, stop_with_sigterm_and_resume

    flags = ["--env-id", "Pendulum-v1", *RESUME_FLAGS, "--compile"]
    (tmp_path / "a").mkdir()
    assert run_cli(module, flags, tmp_path / "a").returncode == 0
    stop_with_sigterm_and_resume(tmp_path, module, flags, 400, 1500, "b")
    a, b = (torch.load(glob.glob(f"{tmp_path}/{d}/runs/*/model.pt")[0], weights_only=False) for d in "ab")
    for key in ("actor", "qf"):
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), (key, name)
