"""--compile runs the update a reader edits: each edit a researcher is likely to make (another
optimizer or its settings, a learning-rate schedule, a new network method, a new loss term, a new
trainable tensor) trains the same compiled as eager. The edits are applied here to the scripts' own
functions and classes, as a researcher would make them in the file. Each compiled run is counted
(`Compilations`): torch.compile built graphs, built them all in the first updates (no recompile
per update) and every update ran through them, so these tests fail where nothing compiles."""

import importlib
import inspect
import re
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import SCRIPTS, TINY_CONTINUOUS, fake_cuda_graphs, fake_envs, scalars

import sac_continuous_action as sac
import td3_continuous_action as td3

LOW, HIGH = [-2.0, 0.0, 10.0], [5.0, 0.5, 10.1]
UPDATES = 100
EDITS = [
    "AdamW with weight decay for every optimizer, amsgrad for the actor's",
    "a new actor method calling a layer",
    "behaviour cloning",
    "a Lagrange multiplier in the actor's optimizer",
    "SGD with momentum",
    "a second parameter group",
    "a learning-rate schedule",
]


class Compilations:
    """torch.compile, counted, as the scripts call it (whatever torch.compile is when this is made),
    but for setup's trial compile: `graphs`, the graphs dynamo hands to inductor, torch.compile's
    default backend (one per stretch of a function between graph breaks, and one more per
    recompilation); `runs`, the runs of those graphs; `calls`, (graphs, runs) at the end of each
    call of a compiled function."""

    def __init__(self, monkeypatch):
        self.graphs, self.runs, self.calls = 0, 0, []
        compile_fn, inductor = torch.compile, torch._dynamo.lookup_backend("inductor")

        def backend(graph_module, example_inputs):
            self.graphs += 1
            compiled_graph = inductor(graph_module, example_inputs)

            def run(*inputs):
                self.runs += 1
                return compiled_graph(*inputs)

            return run

        def counted(fn, **settings):
            if fn.__qualname__ == "setup.<locals>.<lambda>":  # setup's trial compile, before the run: not counted
                return compile_fn(fn, **settings)
            compiled_fn = compile_fn(fn, backend=backend, **settings)

            def call(*args, **kwargs):
                out = compiled_fn(*args, **kwargs)
                self.calls.append((self.graphs, self.runs))
                return out

            return call

        torch._dynamo.reset()  # each test's functions compile anew, through this backend
        monkeypatch.setattr(torch, "compile", counted)

    def check(self, calls: int, settled_by: int) -> None:
        """Assert that compiled functions were called `calls` times, that graphs were built, all of
        them by the end of call `settled_by` (each flag value and the optimizers' first steps have
        their own), and that every call ran at least one of them."""
        assert len(self.calls) == calls, len(self.calls)
        assert self.graphs > 0, "torch.compile built no graph"
        built = [graphs for graphs, _ in self.calls]
        assert built[settled_by - 1] == self.graphs, f"graphs built at each call: {built}"
        runs = [0] + [runs for _, runs in self.calls]
        assert all(after > before for before, after in zip(runs, runs[1:])), f"graph runs at each call: {runs[1:]}"


def edited(module, name: str, *replacements):
    """`module.<name>` with each (old, new) of `replacements` made in its source: a researcher's
    edit of the file."""
    source = inspect.getsource(getattr(module, name))
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    namespace = dict(vars(module))
    exec(compile(source, module.__file__, "exec"), namespace)
    return namespace[name]


def named(**nets) -> dict:
    return {f"{key}.{name}": p for key, net in nets.items() for name, p in net.named_parameters()}


def random_batches(n: int, size: int = 32, device: str = "cpu"):
    generator = torch.Generator().manual_seed(7)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    return [
        tuple(
            x.to(device)
            for x in (
                torch.randn(size, 3, generator=generator),
                low + (high - low) * torch.rand(size, 3, generator=generator),
                torch.randn(size, generator=generator),
                torch.randn(size, 3, generator=generator),
                (torch.rand(size, generator=generator) < 0.1).float(),
            )
        )
        for _ in range(n)
    ]


def optimizers(edit: str, critic, actor, others: list, lr: float, device: str = "cpu") -> list:
    """The critics' and the actor's optimizers, then one for each tensor of `others` (SAC's log
    alpha): as `main` makes them (fused Adam, each learning rate a tensor of its own), or as the
    edit makes them."""

    def adam(params, **settings):
        return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), fused=True, **settings)

    def adamw(params, **settings):
        return torch.optim.AdamW(params, lr=torch.tensor(lr, device=device), weight_decay=0.1, fused=True, **settings)

    if edit == EDITS[0]:
        return [adamw(critic.parameters()), adamw(actor.parameters(), amsgrad=True), *(adamw([x]) for x in others)]
    actor_params = actor.parameters()
    if edit == EDITS[5]:  # the output layers at three times the body's learning rate, with other betas
        body = [p for name, p in actor.named_parameters() if name.startswith(("fc1", "fc2"))]
        heads = [p for name, p in actor.named_parameters() if not name.startswith(("fc1", "fc2"))]
        heads = {"params": heads, "lr": torch.tensor(3 * lr, device=device), "betas": (0.8, 0.99)}
        actor_params = [{"params": body}, heads]
    critic_optimizer = adam(critic.parameters())
    if edit == EDITS[4]:
        critic_optimizer = torch.optim.SGD(critic.parameters(), lr=torch.tensor(lr, device=device), momentum=0.9)
    return [critic_optimizer, adam(actor_params), *(adam([x]) for x in others)]


def schedules(edit: str, optimizers: list) -> list:
    """The learning-rate schedules of the edit that adds them, each stepped every other update:
    each learning rate decayed linearly to 0 over the UPDATES updates (torch's LambdaLR, which
    changes a tensor learning rate in place)."""
    if edit != EDITS[6]:
        return []
    return [torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 - 2 * k / UPDATES) for optimizer in optimizers]


def sac_training(edit: str, path: str, monkeypatch, device: str = "cpu") -> dict:
    """UPDATES critic updates (the target every other one) and an actor update every other one, on
    `edit`, on `path` (eager, compiled, or on a GPU captured: compiled, then CUDA graphs); {name:
    (initial, final)} of every trained tensor."""
    torch.manual_seed(0)
    args = sac.Args(q_lr=3e-3, policy_lr=3e-3)
    envs = fake_envs(LOW, HIGH)
    actor, qf = sac.Actor(envs).to(device), sac.QEnsemble(envs).to(device)
    qf_target = sac.target_of(qf, sac.QEnsemble(envs).to(device))
    log_alpha = torch.zeros(1, device=device, requires_grad=True)
    q_optimizer, actor_optimizer, alpha_optimizer = optimizers(edit, qf, actor, [log_alpha], 3e-3, device)
    lr_schedules = schedules(edit, [q_optimizer, actor_optimizer, alpha_optimizer])
    trained = {**named(qf=qf, qf_target=qf_target, actor=actor), "log_alpha": log_alpha}
    loss_pi = sac.compute_loss_pi
    if edit == EDITS[1]:  # a method that calls the layers itself, and an L2 penalty on the mean action through it

        def mean_action(self, obs):
            return self.fc_mean(F.relu(self.fc2(F.relu(self.fc1(obs)))))

        def penalised(actor, qf, obs, alpha):
            loss, log_prob = loss_pi(actor, qf, obs, alpha)
            return loss + 0.1 * actor.mean_action(obs).pow(2).mean(), log_prob

        monkeypatch.setattr(sac.Actor, "mean_action", mean_action, raising=False)
        monkeypatch.setattr(sac, "compute_loss_pi", penalised)
    if edit == EDITS[3]:  # a multiplier trained by the actor's optimizer, on a bound on the mean action's size
        lagrange = torch.zeros((), device=device, requires_grad=True)
        actor_optimizer.add_param_group({"params": [lagrange], "lr": 1e-2})
        trained["lagrange"] = lagrange

        def constrained(actor, qf, obs, alpha):
            loss, log_prob = loss_pi(actor, qf, obs, alpha)
            return loss + lagrange * (actor(obs)[0].pow(2).mean() - 1.0), log_prob

        monkeypatch.setattr(sac, "compute_loss_pi", constrained)
    updates = sac.sac_updates
    if edit == EDITS[2]:  # update_actor(obs, actions): J_pi + 2.5 ||tanh(mean(s)) scaled - a||^2 (TD3+BC's term)
        updates = edited(
            sac,
            "sac_updates",
            ("def update_actor(obs):", "def update_actor(obs, actions):"),
            (
                "        loss, log_prob = compute_loss_pi(actor, qf, obs, alpha)\n",
                "        loss, log_prob = compute_loss_pi(actor, qf, obs, alpha)\n"
                "        loss = loss + 2.5 * (actor.get_action(obs)[2] - actions).pow(2).mean()\n",
            ),
        )
    initial = {name: p.detach().clone() for name, p in trained.items()}
    update_critic, update_actor, _ = updates(
        actor, qf, qf_target, log_alpha, q_optimizer, actor_optimizer, alpha_optimizer, args, -3.0
    )
    if path != "eager":
        monkeypatch.setattr(sac, "CUDA_GRAPHS", path == "captured")
        optimizers_stepped = [q_optimizer, actor_optimizer, alpha_optimizer]
        update_critic, update_actor = sac.compiled(
            [update_critic, update_actor], torch.device(device), optimizers_stepped
        )
    for i, batch in enumerate(random_batches(UPDATES, device=device)):
        torch.manual_seed(100 + i)
        update_critic(batch, i % 2 == 0)
        if i % 2 == 1:
            update_actor(*batch[:2]) if edit == EDITS[2] else update_actor(batch[0])
            for schedule in lr_schedules:
                schedule.step()
    assert_captured(path, [update_critic, update_actor])
    return {name: (initial[name], p.detach()) for name, p in trained.items()}


def assert_captured(path: str, functions: list) -> None:
    """On the captured path, each function ran at least 9 calls in 10 as a CUDA graph it recorded
    (the rest are each graph's warm-up calls, and the first call, before the compiled optimizer step
    set its parameter groups' `capturable`, a signature of its own)."""
    for function in functions if path == "captured" else []:
        assert isinstance(function, sac.Captured | td3.Captured), "nothing was captured"
        calls = sum(graph["calls"] for graph in function.graphs.values())
        replayed = sum(graph["calls"] - function.warmup for graph in function.graphs.values() if "graph" in graph)
        assert replayed >= 0.9 * calls, f"{replayed} of {calls} calls ran as a recorded graph"


def td3_training(edit: str, path: str, monkeypatch, device: str = "cpu") -> dict:
    """UPDATES updates, the actor's and the targets' every other one, on `edit`, on `path`;
    {name: (initial, final)}."""
    torch.manual_seed(0)
    args = td3.Args(learning_rate=3e-3)
    envs = fake_envs(LOW, HIGH)
    actor, qf = td3.Actor(envs).to(device), td3.QEnsemble(envs).to(device)
    actor_target, qf_target = td3.Actor(envs).to(device), td3.QEnsemble(envs).to(device)
    for target, net in ((actor_target, actor), (qf_target, qf)):
        target.load_state_dict(net.state_dict())
        target.requires_grad_(False)
    q_optimizer, actor_optimizer = optimizers(edit, qf, actor, [], args.learning_rate, device)
    lr_schedules = schedules(edit, [q_optimizer, actor_optimizer])
    trained = named(qf=qf, qf_target=qf_target, actor=actor, actor_target=actor_target)
    loss_pi = td3.compute_loss_pi
    if edit == EDITS[1]:  # a method that calls the layers itself, and a penalty on the pre-tanh action through it

        def pre_tanh(self, obs):
            return self.fc_mu(F.relu(self.fc2(F.relu(self.fc1(obs)))))

        monkeypatch.setattr(td3.Actor, "pre_tanh", pre_tanh, raising=False)
        monkeypatch.setattr(
            td3,
            "compute_loss_pi",
            lambda actor, qf, obs: loss_pi(actor, qf, obs) + 0.1 * actor.pre_tanh(obs).pow(2).mean(),
        )
    if edit == EDITS[3]:  # a multiplier trained by the actor's optimizer toward a bound on the action's size
        lagrange = torch.zeros((), device=device, requires_grad=True)
        actor_optimizer.add_param_group({"params": [lagrange], "lr": 1e-2})
        trained["lagrange"] = lagrange
        monkeypatch.setattr(
            td3,
            "compute_loss_pi",
            lambda actor, qf, obs: loss_pi(actor, qf, obs) + lagrange * (actor(obs).pow(2).mean() - 1.0),
        )
    update_fn = td3.td3_updates
    if edit == EDITS[2]:  # TD3+BC (arXiv:2106.06860): update_actor(obs, actions), J_pi + 2.5 ||mu(s) - a||^2
        update_fn = edited(
            td3,
            "td3_updates",
            ("def update_actor(obs):", "def update_actor(obs, actions):"),
            (
                "actor_loss = compute_loss_pi(actor, qf, obs)\n",
                "actor_loss = compute_loss_pi(actor, qf, obs) + 2.5 * (actor(obs) - actions).pow(2).mean()\n",
            ),
        )
    initial = {name: p.detach().clone() for name, p in trained.items()}
    updates = update_fn(actor, actor_target, qf, qf_target, q_optimizer, actor_optimizer, args)[:2]
    update_critic, update_actor = updates
    if path != "eager":
        monkeypatch.setattr(td3, "CUDA_GRAPHS", path == "captured")
        update_critic, update_actor = td3.compiled(list(updates), torch.device(device), [q_optimizer, actor_optimizer])
    for i, batch in enumerate(random_batches(UPDATES, device=device)):
        torch.manual_seed(100 + i)
        update_critic(batch)
        if i % 2 == 1:
            update_actor(*batch[:2]) if edit == EDITS[2] else update_actor(batch[0])
            for schedule in lr_schedules:
                schedule.step()
    assert_captured(path, [update_critic, update_actor])
    return {name: (initial[name], p.detach()) for name, p in trained.items()}


def relative_distance(run: dict, other: dict) -> float:
    """The largest, over the tensors both runs train, of ||x - x_other|| / ||x_other - x_initial||:
    how far two runs ended apart, in units of how far training moved them. A norm, not an
    element-wise bound: the rounding of compiled kernels differs from eager's, and Adam's division
    by sqrt(v) magnifies it where a gradient element is near zero."""
    return max(
        float((run[name][1] - other[name][1]).norm() / (other[name][1] - other[name][0]).norm())
        for name in run.keys() & other.keys()
    )


def trained(training, edit: str, path: str, device: str = "cpu") -> dict:
    with pytest.MonkeyPatch.context() as monkeypatch:  # each run patches the module anew
        return training(edit, path, monkeypatch, device)


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("training", [sac_training, td3_training], ids=["sac", "td3"])
def test_an_edit_trains_the_same_compiled_as_eager(monkeypatch, training, edit):
    """After 100 updates from the same networks and batches, every trained tensor (networks,
    targets, log alpha, a new multiplier) ends where eager training ends it, to float rounding,
    while leaving the edit out would not; the compiled updates ran through graphs torch.compile
    built in the first two updates of each kind (a schedule's new learning rates recompile
    nothing). Measured (relative_distance): compiled from eager 1.6e-6 to 4.5e-3 over the
    fourteen cases; without the edit, 0.13 to 26."""
    compilations = Compilations(monkeypatch)
    eager = trained(training, edit, "eager")
    compiled = trained(training, edit, "compiled")
    if training is sac_training:  # the critic's two flag values and the actor's first updates, then their second
        compilations.check(calls=UPDATES * 3 // 2, settled_by=4)
    else:  # the critic's first update, then the critic's and the actor's second
        compilations.check(calls=UPDATES * 3 // 2, settled_by=3)
    assert compiled.keys() == eager.keys()
    assert relative_distance(compiled, eager) < 0.03
    assert relative_distance(trained(training, "none", "eager"), eager) > 0.1  # the edit changes training


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("training", [sac_training, td3_training], ids=["sac", "td3"])
def test_an_edit_trains_the_same_compiled_and_captured_as_eager_on_a_gpu(training, edit):
    """On a GPU, the same 100 updates of each edit: compiled, and captured (the compiled functions
    recorded as CUDA graphs and replayed, which `assert_captured` checks), each end where eager
    training ends, to float rounding."""
    eager = trained(training, edit, "eager", "cuda")
    for path in ("compiled", "captured"):
        torch._dynamo.reset()
        run = trained(training, edit, path, "cuda")
        assert run.keys() == eager.keys()
        assert relative_distance(run, eager) < 0.03, path


def sgd_with_momentum(original):
    return lambda params, lr, **settings: torch.optim.SGD(params, lr=lr, momentum=0.9)


def a_second_group(original):  # the output layers at three times the body's learning rate
    def make(params, lr, *settings):
        params = list(params)
        return original([{"params": params[:-4]}, {"params": params[-4:], "lr": 3 * lr}], lr, *settings)

    return make


UPDATE_CALLS = {"sac_atari": 301, "a2c": 20, "acer": 20 + 4 * 16}  # the updates of those runs of 400 steps
OTHER_SCRIPTS = {  # script: (the optimizer torch.optim names, its edit, flags of a run that reaches its updates)
    "sac_atari": (
        "Adam",
        lambda original: lambda params, **settings: torch.optim.AdamW(params, weight_decay=0.1, **settings),
        dict(env_id="CartPole-v1", learning_starts=100, batch_size=32, buffer_size=1_000, update_frequency=1),
    ),
    "a2c": ("RMSprop", sgd_with_momentum, dict(env_id="CartPole-v1", num_envs=4, num_steps=5)),
    "acer": (
        "RMSprop",
        a_second_group,
        dict(env_id="CartPole-v1", num_envs=4, num_steps=5, buffer_size=400, replay_start=100),
    ),
}


def saved_model(module, args) -> torch.Tensor:
    """Every float tensor of the model.pt a run of `args` saves, flattened into one."""
    model = torch.load(f"{module.main(args)['run_dir']}/model.pt", weights_only=False)
    tensors = [x for value in model.values() for x in (value.values() if isinstance(value, dict) else [value])]
    return torch.cat([x.flatten() for x in tensors if torch.is_tensor(x) and x.is_floating_point()])


@pytest.mark.parametrize("name", list(OTHER_SCRIPTS))
def test_an_edited_optimizer_trains_the_same_compiled_as_eager_in_the_other_scripts(in_tmp, monkeypatch, name):
    """sac_atari.py (AdamW with weight decay for all three optimizers, the temperature's too),
    a2c.py (SGD with momentum) and acer.py (a second parameter group): the model of a compiled run
    of 400 steps ends where the eager one does, to float rounding, and the edit moved it; every
    update ran through graphs built at the first two."""
    module = importlib.import_module(name)
    optimizer, edit, flags = OTHER_SCRIPTS[name]
    args = module.Args(**flags, total_timesteps=400, eval_freq=0, eval_episodes=1, cuda=False, save_model=True)
    plain = saved_model(module, replace(args, exp_name="plain"))
    monkeypatch.setattr(torch.optim, optimizer, edit(getattr(torch.optim, optimizer)))
    eager = saved_model(module, replace(args, exp_name="eager"))
    compilations = Compilations(monkeypatch)
    compiled = saved_model(module, replace(args, exp_name="compiled", compile=True))
    compilations.check(calls=UPDATE_CALLS[name], settled_by=2)
    assert float((compiled - eager).norm() / (eager - plain).norm()) < 0.03


SCHEDULES = {  # script: flags of a run of 100 updates or more, its learning rate annealed
    "a2c": dict(env_id="CartPole-v1", num_envs=4, num_steps=5, total_timesteps=2_000),
    "acer": dict(env_id="CartPole-v1", num_envs=4, num_steps=5, total_timesteps=500, buffer_size=400, replay_start=100),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_an_annealed_learning_rate_compiles_once_and_trains_as_eager(in_tmp, monkeypatch, capfd, name):
    """`--compile --anneal-lr` end to end: the compiled update's graphs are all built at its first
    two calls and every update runs through them, each with its own learning rate (a tensor the
    graphs read, which --anneal-lr changes in place; a float would recompile RMSprop.step at each
    new value until dynamo's limit, and warn), with no warning from dynamo; the losses logged at
    every update are eager's to float rounding."""
    module = importlib.import_module(name)
    args = module.Args(**SCHEDULES[name], anneal_lr=True, log_freq=20, eval_freq=0, eval_episodes=1, cuda=False)
    eager = scalars(module.main(replace(args, exp_name="eager"))["run_dir"])
    compilations = Compilations(monkeypatch)
    capfd.readouterr()
    summary = module.main(replace(args, exp_name="compiled", compile=True))
    err = capfd.readouterr().err
    compiled = scalars(summary["run_dir"])
    updates = summary.get("updates", summary.get("iterations", 0) + summary.get("replay_updates", 0))
    assert updates >= 100
    compilations.check(calls=updates, settled_by=2)
    assert not re.search(r"^W\d{4} |recompile", err, re.M), err
    learning_rates = [value for _, value in compiled["charts/learning_rate"]]
    assert learning_rates == sorted(learning_rates, reverse=True) and learning_rates[-1] < 0.1 * args.learning_rate
    for tag in ("losses/policy_loss", "losses/entropy", "charts/learning_rate"):
        assert len(compiled[tag]) == len(eager[tag]) == summary["global_step"] // 20, tag
        for (step, value), (eager_step, eager_value) in zip(compiled[tag], eager[tag]):
            assert step == eager_step and value == pytest.approx(eager_value, rel=1e-3, abs=1e-5), (tag, step)


@pytest.mark.parametrize("script", [sac, td3], ids=["sac", "td3"])
def test_captured_records_a_graph_per_call_signature_and_replays_on_copies(monkeypatch, script):
    """`Captured`: each value of a flag and each input shape, dtype or stride has its own graph (3
    warm-up calls, a recording, then replays on the latest inputs copied into the recorded ones,
    whose strides are the first inputs': a column block of a row); the side stream is made once."""
    replays, calls = fake_cuda_graphs(monkeypatch), []
    streams = []
    stream = torch.cuda.Stream
    monkeypatch.setattr(torch.cuda, "Stream", lambda: streams.append(1) or stream())

    def fn(batch, flag: bool):
        calls.append(flag)
        return {"sum": batch[0]["x"].sum() + batch[1]}

    captured, rows = script.Captured(fn), torch.randn(4, 6)
    for i in range(12):
        captured(({"x": (rows + i)[:, :3]}, torch.tensor(float(i))), i % 2 == 0)
    assert calls == [True, False] * 4 and len(replays) == 6 and len(captured.graphs) == 2 and len(streams) == 1
    recorded = {key[1][-1]: graph["inputs"] for key, graph in captured.graphs.items()}
    assert recorded[True][0].stride() == (6, 1) and torch.equal(recorded[True][0], (rows + 10)[:, :3])
    assert recorded[False][1] == 11.0
    for other in (torch.randn(1, 3), torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3)):  # shape, dtype, stride
        captured(({"x": other}, torch.tensor(0.0)), True)
    assert len(captured.graphs) == 5 and len(replays) == 6  # each a graph of its own, warming up: no replay yet


@pytest.mark.parametrize("script", [sac, td3], ids=["sac", "td3"])
def test_captured_replays_a_learning_rate_changed_in_place_and_records_a_float_s_values(monkeypatch, script):
    """`Captured` with the optimizer its function steps: a learning rate that is a tensor, changed
    in place (as main makes it and torch's schedulers change it), keeps its one graph, whose replays
    read the tensor; set to a float, or to another tensor, it is baked into a graph of its own,
    recorded anew, never a replay of a graph recorded with the value before."""
    replays = fake_cuda_graphs(monkeypatch)
    x = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([x], lr=torch.tensor(0.1))

    def step(batch):
        optimizer.zero_grad()
        (x * batch).sum().backward()
        optimizer.step()
        return x.detach()

    captured = script.Captured(step, [optimizer])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 / (k + 1))
    for _ in range(6):
        captured(torch.ones(3))
        schedule.step()
    assert len(captured.graphs) == 1 and len(replays) == 3  # 3 warm-up calls, then a replay at each call
    for lr in (0.05, torch.tensor(0.05), 0.02):
        optimizer.param_groups[0]["lr"] = lr
        for _ in range(5):
            captured(torch.ones(3))
    assert len(captured.graphs) == 4 and len(replays) == 3 + 3 * 2  # each value 3 warm-up calls of its own


DEFAULT_RUNS = {  # script: flags of a short run that reaches its updates
    **dict.fromkeys(["sac_continuous_action", "sac_hil_serl", "td3_continuous_action"], TINY_CONTINUOUS),
    **{
        name: dict(flags, total_timesteps=400, eval_freq=0, eval_episodes=1, cuda=False)
        for name, (*_, flags) in OTHER_SCRIPTS.items()
    },
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_compile_is_off_unless_asked(in_tmp, monkeypatch, name):
    """Every script runs the functions as written unless --compile is given: the flag is off by
    default, and a run with it off that reaches the updates compiles nothing."""
    module = importlib.import_module(name)
    assert module.Args().compile is False
    compilations = Compilations(monkeypatch)
    summary = module.main(module.Args(**DEFAULT_RUNS[name]))
    assert summary.get("critic_updates", summary.get("updates", summary.get("iterations"))) > 0
    assert compilations.calls == [] and compilations.graphs == 0


def test_compile_stays_off_on_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args, _, device = sac.setup(sac.Args(env_id="Pendulum-v1"), sac.check_args, sac.check_spaces)
    assert device.type == "cuda" and args.compile is False
