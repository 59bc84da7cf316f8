"""Specification of sac_hil_serl.py's robot learning: image and Dict observations (the encoders,
DrQ's shift, the image replay, frame stacks, frozen and pretrained CNNs), offline and mixed data,
the discrete gripper, their bad input, exact resume, and learning runs. Its SAC core is the same
text as sac_continuous_action.py's (test_sac_hil_serl's first test checks it) and is specified in
test_sac_continuous_action.py; the common block in test_common_block.py."""

import glob
import inspect
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, TINY_CONTINUOUS, fake_envs, scalars
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

import sac_continuous_action
import sac_hil_serl as sac


def tiny(**overrides) -> sac.Args:
    return sac.Args(**{**TINY_CONTINUOUS, **overrides})


def offline_buffer(args: sac.Args, encoder=None):
    """The demo buffer a run with these flags makes of its --offline-data."""
    env = sac.make_env(args, wrap=sac.observation_wrappers)()
    data = sac.robot_learning_setup(args, env.observation_space, env.action_space)
    return sac.demo_buffer(args, data, env.observation_space, env.action_space.shape[0], "cpu", encoder)


# --------------------------------------------------------------------------------------------------
# THE SAC CORE, SHARED WITH sac_continuous_action.py
# --------------------------------------------------------------------------------------------------
SHARED = [
    "tanh_gaussian_log_prob",
    "soft_q_target",
    "subsample_critics",
    "compute_loss_pi",
    "compute_loss_alpha",
    "polyak_update",
    "optimizer_step",
    "sac_updates",
    "target_of",
]


@pytest.mark.parametrize("name", SHARED)
def test_the_sac_core_is_the_same_text_as_sac_continuous_action_s(name):
    """The math, the losses and the updates that both SAC scripts hold, read as written: an edit to
    one is made in the other (the networks, the replay and the critic loss differ: here they read
    images and the gripper)."""
    assert inspect.getsource(getattr(sac, name)) == inspect.getsource(getattr(sac_continuous_action, name))


def test_smoke_a_state_run_reaches_updates(in_tmp):
    summary = sac.main(tiny())
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 200


# --------------------------------------------------------------------------------------------------
# IMAGE AND DICT OBSERVATIONS, OFFLINE DATA
# --------------------------------------------------------------------------------------------------
PIXELS = dict(env_id="InvertedPendulum-v5", from_pixels=True, image_size=16)
DICT_SPACE = gym.spaces.Dict(
    {
        "pixels": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
        "state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
    }
)


def dict_envs():
    return SimpleNamespace(single_observation_space=DICT_SPACE, single_action_space=gym.spaces.Box(-1, 1, (2,)))


def dict_batch(n: int = 8):
    obs = {"pixels": torch.rand(n, 3, 16, 16), "state": torch.randn(n, 3)}
    next_obs = {k: v + 0.1 for k, v in obs.items()}
    return obs, torch.rand(n, 2) * 2 - 1, torch.randn(n), next_obs, torch.zeros(n), torch.zeros(n)


def grad_norm(module) -> float:
    return sum(float(p.grad.abs().sum()) for p in module.parameters() if p.grad is not None)


@pytest.mark.parametrize("shared", [True, False])
def test_encoder_gradients_follow_the_shared_encoder_rule(shared):
    """Shared: J_pi puts exactly zero gradient on the encoder, J_Q a non-zero one. Not shared: the
    actor's own encoder gets J_pi's gradient, and the critics' encoder none of it."""
    torch.manual_seed(0)
    qf, qf_target = sac.QEnsemble(dict_envs()), sac.QEnsemble(dict_envs())
    actor = sac.Actor(dict_envs(), qf.encoder if shared else None)
    assert (actor.encoder is None) == shared and not any(p is q for p in actor.parameters() for q in qf.parameters())
    obs = dict_batch()[0]
    sac.compute_loss_pi(actor, qf, obs, torch.tensor(0.2))[0].backward()
    assert grad_norm(qf.encoder) == 0 and grad_norm(qf) == 0
    assert shared or grad_norm(actor.encoder) > 0
    sac.compute_loss_q(actor, qf, qf_target, dict_batch(), torch.tensor(0.2), 0.99, True, 2)[0].backward()
    assert grad_norm(qf.encoder) > 0


def test_spatial_embedding_equals_a_loop_and_drops_out_only_in_gradient_steps():
    """e[b, c, k] = sum_{h, w} x[b, c, h, w] * W[c, h, w, k], flattened channel-major to (B, C K)
    (HIL-SERL's SpatialLearnedEmbeddings), against a loop; dropout (p 0.1) only where gradients are
    on."""
    torch.manual_seed(0)
    pool, maps = sac.SpatialEmbedding(3, 4, 5), torch.randn(2, 3, 4, 5)
    with torch.no_grad():
        out = pool(maps)
        expected = torch.zeros(2, 3 * sac.SPATIAL_FEATURES)
        for b in range(2):
            for c in range(3):
                for k in range(sac.SPATIAL_FEATURES):
                    expected[b, c * sac.SPATIAL_FEATURES + k] = sum(
                        float(maps[b, c, h, w] * pool.kernel[c, h, w, k]) for h in range(4) for w in range(5)
                    )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    dropped = pool(maps.repeat(250, 1, 1, 1))  # with gradients: about 10% zeros, the rest scaled by 1 / 0.9
    assert 0.07 < float((dropped == 0).float().mean()) < 0.13
    scaled = out.repeat(250, 1) / 0.9
    torch.testing.assert_close(dropped[dropped != 0], scaled[dropped != 0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weights", [False, True])
def test_a_frozen_cnn_gets_no_gradient_and_its_pooling_and_head_do(tmp_path, weights):
    path = str(tmp_path / "resnet10.pt")
    torch.save(sac.ResNet10(3).state_dict(), path)
    qf = sac.QEnsemble(dict_envs(), pooling="spatial", frozen=True, weights=path if weights else None)
    qf_target = sac.QEnsemble(dict_envs(), pooling="spatial", frozen=True, weights=path if weights else None)
    actor = sac.Actor(dict_envs(), qf.encoder)
    sac.compute_loss_q(actor, qf, qf_target, dict_batch(), torch.tensor(0.2), 0.99, True, 2)[0].backward()
    cnn, rest = qf.encoder.cnns["pixels"], qf.encoder.heads["pixels"]
    assert all(p.grad is None and not p.requires_grad for p in cnn.parameters())
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in rest.parameters())


def helper2424_names(state: dict, wrapped: bool = True) -> dict:
    """Our ResNet-10's state dict in helper2424/resnet10's names, as its modeling_resnet.py makes
    them: the blocks under `encoder.`, and (in its versions since the JAX-style layers) each block
    convolution's weight under `.conv`, each GroupNorm's under `.group_norm`."""
    renamed = {}
    for key, value in state.items():
        key = re.sub(r"^stages\.", "encoder.stages.", key)
        if wrapped and key != "embedder.0.weight":
            conv = re.search(r"(conv\d|shortcut\.0)\.weight$", key)
            key = (
                re.sub(r"\.weight$", ".conv.weight", key)
                if conv
                else re.sub(r"\.(weight|bias)$", r".group_norm.\1", key)
            )
        renamed[key] = value
    return renamed


@pytest.mark.parametrize("wrapped", [True, False])
def test_resnet10_loads_helper2424_s_state_dict_and_refuses_one_of_other_shapes(tmp_path, wrapped):
    """A file in helper2424/resnet10's names (LeRobot's HIL-SERL encoder) loads into the encoder
    exactly: 4,905,792 parameters, that repository's count; one made for other images is refused
    with one line naming the flag."""
    torch.manual_seed(3)
    ours = {key: torch.randn_like(v) for key, v in sac.ResNet10(3).state_dict().items()}
    theirs = helper2424_names(ours, wrapped)
    assert ("encoder.stages.3.shortcut.1.group_norm.bias" in theirs) == wrapped
    assert "encoder.stages.0.norm1.weight" in theirs or wrapped
    torch.save(theirs, tmp_path / "resnet10.pt")
    encoder = sac.Encoder(DICT_SPACE, weights=str(tmp_path / "resnet10.pt"))
    loaded = encoder.cnns["pixels"].state_dict()
    assert loaded.keys() == ours.keys() and all(torch.equal(loaded[k], ours[k]) for k in ours)
    assert sum(v.numel() for v in loaded.values()) == 4_905_792
    torch.save(sac.ResNet10(6).state_dict(), tmp_path / "six.pt")
    sac.check_encoder_weights(str(tmp_path / "resnet10.pt"), 3)  # checked before the networks are made
    with pytest.raises(sac.ConfigError, match="--image-encoder-weights .*six.pt: no ResNet-10 for 3-channel images"):
        sac.check_encoder_weights(str(tmp_path / "six.pt"), 3)


def test_the_resnet10_pads_as_jax_s_same_pads_the_odd_pixel_at_the_bottom_and_right():
    """A 3 x 3, stride-2 max pool padded 'SAME': on an even size n its windows are [2i, 2i + 2], cut
    at the edge, where torch's padding=1 centres them on 2i; on an odd size the two agree."""
    for n in range(5, 13):
        x = torch.arange(n * n, dtype=torch.float32).reshape(1, 1, n, n)  # rising along rows and columns
        out = F.max_pool2d(sac.same_padded(x, 3, 2, -math.inf), 3, 2)
        if n % 2:
            assert torch.equal(out, F.max_pool2d(x, 3, 2, padding=1)), n
        else:
            last = [min(2 * i + 2, n - 1) for i in range(n // 2)]  # each window's largest row and column
            assert torch.equal(out[0, 0], x[0, 0][last][:, last]), n


def test_cached_features_equal_the_frozen_cnn_on_the_stored_frames():
    """Stored once per frame, s and s' alike, across episode ends; sampled in place of the
    images."""
    torch.manual_seed(0)
    encoder, encoded = sac.Encoder(DICT_SPACE, frozen=True), []
    cnn = encoder.cnns["pixels"]
    cnn.register_forward_hook(lambda module, inputs, output: encoded.append(len(inputs[0])))
    rb = sac.ImageReplayBuffer(40, DICT_SPACE, 2, 1, "cpu", augment=True, encoder=encoder)
    frames = np.random.default_rng(0).integers(0, 256, (31, 1, 16, 16, 3), dtype=np.uint8)
    for t in range(30):
        rb.add(
            {"pixels": frames[t], "state": np.zeros((1, 3))},
            np.zeros((1, 2)),
            np.zeros(1),
            {"pixels": frames[t + 1], "state": np.zeros((1, 3))},
            np.zeros(1),
            np.array([t % 10 == 9]),
        )
    assert sum(encoded) == 30 + 3  # each row's s', and the s of the rows that begin an episode (0, 10, 20)
    with torch.no_grad():
        expected = cnn(sac.to_tensors({"pixels": frames[:, 0]}, "cpu")["pixels"]).flatten(1)
    torch.testing.assert_close(rb.frames["pixels/features"][:31], expected, rtol=1e-5, atol=1e-6)
    obs, _, _, next_obs, _, _ = rb.sample(64)
    assert "pixels" not in obs and obs["pixels/features"].shape == (64, expected.shape[1])
    stored = {tuple(x.round(decimals=4).tolist()) for x in expected}
    assert all(
        tuple(x.round(decimals=4).tolist()) in stored
        for x in torch.cat([obs["pixels/features"], next_obs["pixels/features"]])
    )


def test_random_shift_moves_each_image_by_at_most_the_pad_and_repeats_the_border():
    torch.manual_seed(0)
    images = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    shifted = sac.random_shift(images, pad=2)
    padded = torch.nn.functional.pad(images, (2,) * 4, mode="replicate")
    for i in range(2):  # brute force: each output is one of the 25 crops of its padded image
        crops = [padded[i, :, y : y + 8, x : x + 8] for y in range(5) for x in range(5)]
        assert any(torch.equal(shifted[i], crop) for crop in crops)


def test_image_replay_returns_what_the_env_gave_across_episode_ends_and_wrap_around():
    env_args = sac.Args(**PIXELS)
    envs = gym.vector.SyncVectorEnv(
        [sac.make_env(env_args, wrap=sac.observation_wrappers)] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    rb = sac.ImageReplayBuffer(50, envs.single_observation_space, 1, 2, "cpu", augment=False)
    obs, _ = envs.reset(seed=0)
    seen, ends = set(), 0
    for _ in range(80):  # InvertedPendulum's random episodes end within a few dozen steps
        actions = envs.action_space.sample()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real = sac.final_observations(next_obs, infos)
        rb.add(obs, actions, rewards, real, terminations, terminations | truncations)
        seen |= {(obs["pixels"][i].tobytes(), real["pixels"][i].tobytes(), float(actions[i, 0])) for i in range(2)}
        ends, obs = ends + int((terminations | truncations).sum()), next_obs
    assert ends > 2 and rb.size == 50
    o, a, r, o2, t, _ = rb.sample(500)
    to_bytes = lambda x: (x * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()  # noqa: E731
    pairs = {
        (p.tobytes(), q.tobytes(), float(v)) for p, q, v in zip(to_bytes(o["pixels"]), to_bytes(o2["pixels"]), a[:, 0])
    }
    assert pairs <= seen and len(pairs) > 30
    data = sac.replay_arrays(rb)  # --save-replay's arrays hold the same transitions
    assert (
        len(data["actions"]) == 48
        and {
            (p.tobytes(), q.tobytes(), float(v))
            for p, q, v in zip(data["obs/pixels"], data["next_obs/pixels"], data["actions"][:, 0])
        }
        <= seen
    )


NUMBERED = gym.spaces.Dict(pixels=gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), state=gym.spaces.Box(-1, 300, (1,)))


def numbered(ids) -> dict:
    """Observations of NUMBERED whose every pixel and whose state hold the observation's number, one
    per sub-env."""
    ids = np.asarray(ids)
    return {
        "pixels": np.broadcast_to(ids[:, None, None, None], (len(ids), 4, 4, 3)).astype(np.uint8),
        "state": ids[:, None].astype(np.float32),
    }


def test_image_replay_never_pairs_a_row_with_a_later_frame_when_its_size_is_no_multiple_of_num_envs():
    """3 sub-envs in 10 rows: the rows' s' frames reach slots 0 and 1 before the buffer is full;
    what is sampled or saved of every row, at every fill, is its own s and s' (each frame holds its
    transition's number, as the state does)."""
    rb = sac.ImageReplayBuffer(10, NUMBERED, 1, 3, "cpu", augment=False)
    torch.manual_seed(0)
    for t in range(8):
        ids = np.arange(3 * t, 3 * t + 3)
        rb.add(numbered(ids), np.zeros((3, 1)), np.zeros(3), numbered(ids + 3), np.zeros(3), np.zeros(3, dtype=bool))
        o, _, _, o2, _, _ = rb.sample(200)
        data = sac.replay_arrays(rb)
        for pixels, state in (
            (o["pixels"] * 255, o["state"]),
            (o2["pixels"] * 255, o2["state"]),
            (data["obs/pixels"], data["obs/state"]),
            (data["next_obs/pixels"], data["next_obs/state"]),
        ):
            assert (
                torch.as_tensor(pixels, dtype=torch.float32).round().flatten(1).T == torch.as_tensor(state)[:, 0]
            ).all(), t
        size = min(3 * t + 3, 10)
        assert len(data["actions"]) == size - min(max(size + 3 - 10, 0), 3)  # all but the rows that lost their s


def test_image_replay_restored_lets_the_next_rows_start_new_episodes():
    """A resume that cannot restore its envs resets them: the first rows after it hold the new s,
    not the s' before."""
    rb, restored = (sac.ImageReplayBuffer(20, NUMBERED, 1, 2, "cpu", augment=False) for _ in range(2))
    for t in range(3):
        rb.add(
            numbered([2 * t, 2 * t + 1]),
            np.zeros((2, 1)),
            np.zeros(2),
            numbered([2 * t + 2, 2 * t + 3]),
            np.zeros(2),
            np.array([False, t == 1]),
        )
    restored.load_state_dict(rb.state_dict())
    restored.add(
        numbered([100, 101]), np.zeros((2, 1)), np.zeros(2), numbered([102, 103]), np.zeros(2), np.zeros(2, dtype=bool)
    )  # the envs were reset: s is 100, 101, not the s' 6, 7 stored before
    data = sac.replay_arrays(restored)
    np.testing.assert_array_equal(data["obs/pixels"][:, 0, 0, 0], data["obs/state"][:, 0])
    np.testing.assert_array_equal(data["next_obs/pixels"][:, 0, 0, 0], data["next_obs/state"][:, 0])
    np.testing.assert_array_equal(data["obs/state"][:, 0], [0, 1, 2, 3, 4, 5, 100, 101])


def test_image_replay_holds_about_one_frame_per_transition():
    """Memory per image transition, measured as resident memory: about one frame, not two."""
    space = gym.spaces.Dict({"pixels": gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)})
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")  # noqa: E731
    frame, n = 84 * 84 * 3, 4_000
    before = rss()
    rb = sac.ImageReplayBuffer(n, space, 1, 1, "cpu", augment=False)
    frames = np.random.default_rng(0).integers(0, 256, (2, 1, 84, 84, 3), dtype=np.uint8)
    for t in range(n):
        rb.add(
            {"pixels": frames[t % 2]},
            np.zeros((1, 1)),
            np.zeros(1),
            {"pixels": frames[1 - t % 2]},
            np.zeros(1),
            np.array([t % 200 == 199]),
        )  # an episode end every 200 steps
    per_transition = (rss() - before) / n
    assert 0.9 * frame < per_transition < 1.2 * frame, per_transition / frame


def test_smoke_pixels_reach_updates_and_log_every_metric(in_tmp):
    summary = sac.main(tiny(**PIXELS, save_model=True))
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 200
    logged = scalars(summary["run_dir"])
    for tag in [
        "losses/qf1_values",
        "losses/qf2_values",
        "losses/qf1_loss",
        "losses/qf2_loss",
        "losses/qf_loss",
        "losses/actor_loss",
        "losses/alpha",
        "losses/entropy",
        "losses/alpha_loss",
        "charts/SPS",
        "charts/episodic_return",
        "charts/episodic_length",
        "eval/episodic_return",
    ]:
        assert tag in logged, tag
    model = torch.load(f"{summary['run_dir']}/model.pt", weights_only=False)
    assert any(key.startswith("encoder.cnns.pixels") for key in model["qf"])
    assert not any(key.startswith("encoder") for key in model["actor"])  # shared: the actor holds no encoder


def test_frame_stack_holds_the_last_k_frames_oldest_first_and_pads_a_new_episode_with_its_first():
    plain, stacked = (sac.make_env(sac.Args(**PIXELS, frame_stack=k), wrap=sac.observation_wrappers)() for k in (1, 3))
    assert stacked.observation_space["pixels"].shape == (16, 16, 9)
    frames, ends, done = [], 0, True
    for t in range(100):  # InvertedPendulum's random episodes end within a few dozen steps
        if done:
            (obs, _), (obs3, _), done = plain.reset(seed=t), stacked.reset(seed=t), False
            frames = [obs["pixels"]] * 3
        else:
            action = plain.action_space.sample()
            (obs, _, term, trunc, _), (obs3, *_) = plain.step(action), stacked.step(action)
            frames, done = frames[1:] + [obs["pixels"]], term or trunc
            ends += done
        assert np.array_equal(obs3["pixels"], np.concatenate(frames, axis=-1)) and np.array_equal(
            obs3["state"], obs["state"]
        )
    assert ends >= 2


@pytest.mark.parametrize(
    "flags",
    [
        dict(shared_encoder=False),
        dict(augment=False),
        dict(frame_stack=2),
        dict(image_pooling="spatial"),
        dict(freeze_image_encoder=True),
        dict(freeze_image_encoder=True, image_pooling="spatial", compile=True),
    ],
)
def test_smoke_pixel_options_reach_updates(in_tmp, flags):
    summary = sac.main(tiny(**PIXELS, **flags))
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 200


def test_smoke_a_frozen_encoder_with_the_gripper_reaches_updates(in_tmp):
    """The gripper's critic reads the critics' encoder: with --freeze-image-encoder, the replay's
    cached features."""
    summary = sac.main(
        tiny(
            env_id="Reacher-v5",
            from_pixels=True,
            image_size=16,
            num_discrete_actions=3,
            freeze_image_encoder=True,
            save_model=True,
        )
    )
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 200
    model = torch.load(glob.glob("runs/*/model.pt")[0], weights_only=False)
    assert "discrete_qf" in model and not any("encoder" in key for key in model["discrete_qf"])  # shared, not its own


@pytest.mark.parametrize("pixels", [False, True])
def test_saved_replay_loads_back_exactly(in_tmp, pixels):
    path = str(in_tmp / "replay.npz")
    sac.main(tiny(**(PIXELS if pixels else {}), save_replay=path))
    with np.load(path) as f:
        saved = dict(f)
    assert len(saved["actions"]) == 300 and ("obs/pixels" in saved) == pixels
    offline = offline_buffer(tiny(**(PIXELS if pixels else {}), offline_data=path))
    again = sac.replay_arrays(offline)
    assert saved.keys() == again.keys() and all(np.array_equal(saved[k], again[k]) for k in saved)
    if pixels:  # consecutive transitions share their frame: about one stored frame per transition
        assert int(offline.ended[: offline.size].sum()) < 300 // 2


def test_a_replay_that_cannot_be_written_leaves_no_partial_file(in_tmp, monkeypatch):
    def disk_full(file, **arrays):
        file.write(b"part of a replay")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sac.np, "savez", disk_full)
    with pytest.raises(sac.ConfigError, match="cannot write .*replay.npz .*No space left.*other files are kept"):
        sac.main(tiny(save_replay=str(in_tmp / "replay.npz")))
    assert not (in_tmp / "replay.npz").exists() and not (in_tmp / "replay.npz.tmp").exists()


def test_save_replay_through_a_link_writes_the_file_it_points_to_and_keeps_the_link(in_tmp):
    (in_tmp / "data").mkdir()
    (in_tmp / "replay.npz").symlink_to(in_tmp / "data" / "replay.npz")  # a file still to come
    sac.main(tiny(save_replay=str(in_tmp / "replay.npz")))
    assert (in_tmp / "replay.npz").is_symlink() and len(np.load(in_tmp / "data" / "replay.npz")["rewards"]) > 0


def test_an_empty_replay_writes_no_save_replay_file_and_a_file_there_is_refused(in_tmp, capsys):
    """A run with no env step (pure offline training, or a run stopped at its start) has nothing
    for --save-replay and writes no file; a file already at that path (a person's takeovers,
    perhaps) is refused before anything is written, and kept."""
    sac.main(tiny(save_replay=str(in_tmp / "replay.npz")))
    sac.main(tiny(total_timesteps=0, offline_data="replay.npz", offline_steps=10, save_replay="empty.npz"))
    assert not (in_tmp / "empty.npz").exists()
    assert f"the replay is empty: {os.path.realpath('empty.npz')} is not written" in capsys.readouterr().out
    (in_tmp / "older.npz").write_bytes(b"an older replay")
    with pytest.raises(sac.ConfigError, match="older.npz exists .*pass another file name, or remove it"):
        sac.main(tiny(save_replay="older.npz", exp_name="again"))
    assert (in_tmp / "older.npz").read_bytes() == b"an older replay" and not glob.glob("runs/*again*")


def test_pure_offline_training_evaluates_and_saves(in_tmp):
    path = str(in_tmp / "replay.npz")
    sac.main(tiny(save_replay=path))
    summary = sac.main(tiny(total_timesteps=0, offline_data=path, offline_steps=100, save_model=True, exp_name="off"))
    assert summary["global_step"] == 0 and summary["critic_updates"] == 100 and summary["actor_updates"] == 100
    assert summary["eval_return"] is not None and os.path.exists(f"{summary['run_dir']}/model.pt")
    assert [step for step, _ in scalars(summary["run_dir"])["losses/qf_loss"]] == [-50, 0]


def test_the_offline_phase_logs_its_own_steps_and_a_stop_in_it_resumes_there(in_tmp, capsys, monkeypatch):
    """Offline losses at steps -150 ... 0 and online ones from the first online update on (no
    offline value repeated before it); SPS is positive throughout; a stop at offline update 100 of
    200 says so, not "at step 0", as does its resume, and its checkpoint resumes there to the
    networks of a run never stopped."""
    path = str(in_tmp / "replay.npz")
    sac.main(tiny(save_replay=path))
    flags = dict(offline_data=path, offline_steps=200, total_timesteps=400, learning_starts=200, save_model=True)
    whole = sac.main(tiny(**flags, exp_name="whole"))
    logged = scalars(whole["run_dir"])
    assert [step for step, _ in logged["losses/qf_loss"]] == [-150, -100, -50, 0, 200, 250, 300, 350, 400]
    assert min(value for _, value in logged["charts/SPS"]) > 0
    log = sac.Run.log

    def stop_at_offline_update_100(self, infos, metrics, previous_step, global_step):
        log(self, infos, metrics, previous_step, global_step)
        self.stop_signal += [15] if global_step == -100 else []

    monkeypatch.setattr(sac.Run, "log", stop_at_offline_update_100)
    stopped = sac.main(tiny(**flags, exp_name="stopped"))
    out = capsys.readouterr().out
    assert "stopped by signal 15 in the offline phase after offline update 100 of 200; checkpoint written" in out
    checkpoint = f"{stopped['run_dir']}/checkpoint.pt"
    assert torch.load(checkpoint, weights_only=False)["counters"] == (0, 100, 100, 100)
    monkeypatch.setattr(sac.Run, "log", log)
    resumed = sac.cli(["--resume", checkpoint])
    out = capsys.readouterr().out
    assert (
        f"resumed {os.path.abspath(stopped['run_dir'])} in the offline phase after offline update 100 of 200\n" in out
    )
    assert resumed["critic_updates"] == whole["critic_updates"]
    models = [torch.load(f"{run['run_dir']}/model.pt", weights_only=False) for run in (whole, resumed)]
    assert all(torch.equal(p, q) for p, q in zip(models[0]["actor"].values(), models[1]["actor"].values()))


def test_a_run_with_relative_file_flags_resumes_from_another_directory(tmp_path, monkeypatch):
    """--offline-data and --save-replay are stored as absolute paths: the printed command continues
    the run from anywhere, reading the same data and writing the replay where the run was
    started."""
    from test_common_block import stop_and_resume

    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path / "data")
    sac.main(tiny(save_replay=str(tmp_path / "data" / "pendulum.npz")))
    flags = [
        "--env-id",
        "Pendulum-v1",
        "--offline-data",
        "../data/pendulum.npz",
        "--save-replay",
        "out.npz",
        "--total-timesteps",
        "800",
        "--learning-starts",
        "200",
        "--batch-size",
        "32",
        "--eval-episodes",
        "1",
        "--log-freq",
        "50",
        "--no-cuda",
    ]
    stop_and_resume(tmp_path, sac, flags, 400, 800, "c")  # resumed from tmp_path, not from c
    with np.load(tmp_path / "c" / "out.npz") as replay:
        assert len(replay["actions"]) == 800
    assert not (tmp_path / "out.npz").exists()


def test_an_error_from_the_shell_is_one_line_where_a_library_warns_first(tmp_path):
    """gymnasium warns that PointGrasp-v0 has no rgb_array render mode before it fails: the warning
    is not shown."""
    from test_common_block import run_cli

    result = run_cli(sac, ["--env-id", "grasp_env:PointGrasp-v0", "--from-pixels"], tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert (
        result.stderr
        == "error: --from-pixels: grasp_env:PointGrasp-v0 does not render: its constructor takes no render_mode\n"
    )
    assert os.listdir(tmp_path) == []


def test_offline_ratio_splits_each_batch():
    online, offline = (sac.ReplayBuffer(100, 1, 1, "cpu") for _ in range(2))
    for rb, value in ((online, 1.0), (offline, -1.0)):
        rb.add(np.full((64, 1), value), np.zeros((64, 1)), np.zeros(64), np.zeros((64, 1)), np.zeros(64), np.zeros(64))
    for ratio, expected in ((0.5, 32), (0.25, 16), (0.0, 0), (1.0, 64)):
        obs = sac.MixedReplay(online, offline, ratio).sample(64)[0]
        assert int((obs == -1).sum()) == expected


BAD_INPUT = {  # this script's flags; the common ones are in test_common_block.py
    "missing offline data": (["--offline-data", "nowhere.npz"], "nowhere.npz: no such file"),
    "corrupt offline data": (["--offline-data", "corrupt.npz"], "not a readable .npz"),
    "offline data that is text": (["--offline-data", "notes.txt"], "notes.txt: not an .npz (numpy's zip of .npy"),
    "offline data lacking an array": (
        ["--offline-data", "norewards.npz"],
        "does not fit Pendulum-v1: it lacks the array rewards; it needs these arrays: actions (N, 1), rewards (N), "
        "terminations (N), obs (N, 3), next_obs (N, 3)",
    ),
    "offline data with an array of no use": (
        ["--offline-data", "extra.npz"],
        "does not fit Pendulum-v1: it holds an array foo that these observations lack; it needs these arrays",
    ),
    "offline data of another env": (
        ["--env-id", "InvertedPendulum-v5", "--offline-data", "pendulum.npz"],
        "does not fit InvertedPendulum-v5",
    ),
    "offline data of another action dimension": (
        ["--env-id", "Pendulum-v1", "--offline-data", "wide.npz"],
        "actions of shape (3, 2)",
    ),
    "pixels from an env that takes no frame size": (
        ["--from-pixels"],
        "--from-pixels: Pendulum-v1 takes no frame size: its constructor has no width and height",
    ),
    "offline ratio above one": (["--offline-data", "pendulum.npz", "--offline-ratio", "1.5"], "--offline-ratio"),
    "offline steps without data": (["--offline-steps", "10"], "needs --offline-data"),
    "offline data never drawn": (
        ["--offline-data", "pendulum.npz", "--offline-ratio", "0"],
        "--offline-ratio 0 draws nothing from --offline-data, and no --offline-steps train on it",
    ),
    "negative offline steps": (["--offline-steps", "-1"], "--offline-steps must be non-negative"),
    "gripper epsilon above one": (["--gripper-epsilon", "1.5"], "--gripper-epsilon must lie in [0, 1]"),
    "zero gripper learning rate": (["--discrete-q-lr", "0"], "--discrete-q-lr must be positive"),
    "an empty demo buffer": (["--demo-buffer-size", "0"], "--demo-buffer-size"),
    "a demo buffer of one transition": (["--demo-buffer-size", "1"], "--demo-buffer-size must be at least 2"),
    "save replay into a missing directory": (["--save-replay", "nowhere/replay.npz"], "--save-replay"),
    "frame stack without pixels": (["--frame-stack", "2"], "--frame-stack"),
    "a gripper of one command": (
        ["--env-id", "grasp_env:PointGrasp-v0", "--num-discrete-actions", "1"],
        "--num-discrete-actions",
    ),
    "a gripper on a one-dimensional action space": (["--num-discrete-actions", "3"], "one action dimension"),
    "offline gripper values off the grid": (
        ["--env-id", "grasp_env:PointGrasp-v0", "--offline-data", "grasp.npz", "--num-discrete-actions", "3"],
        "one of the 3 gripper commands",
    ),
    "tiny images": (["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-size", "8"], "--image-size"),
    "images beyond the renderer": (
        ["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-size", "100000"],
        "--image-size",
    ),
    "pixels from an env that does not render": (
        ["--env-id", "grasp_env:PointGrasp-v0", "--from-pixels"],
        "PointGrasp-v0 does not render: its constructor takes no render_mode",
    ),
    "offline data with a NaN reward": (["--offline-data", "nan.npz"], "rewards row 1 holds nan"),
    "offline actions outside the bounds": (["--offline-data", "far.npz"], "actions row 2 holds [200.]"),
    "offline terminations neither 0 nor 1": (["--offline-data", "half.npz"], "terminations row 0 holds 0.5"),
    "offline interventions neither 0 nor 1": (["--offline-data", "taken.npz"], "interventions row 1 holds -3.0"),
    "save replay onto the offline data": (
        ["--offline-data", "pendulum.npz", "--save-replay", "pendulum.npz"],
        "would overwrite the --offline-data file",
    ),
    "save replay onto the offline data through a link": (
        ["--offline-data", "link.npz", "--save-replay", "pendulum.npz"],
        "would overwrite the --offline-data file",
    ),
    "save replay as a directory": (["--save-replay", "."], "is a directory"),
    "save replay onto a file there": (
        ["--save-replay", "pendulum.npz"],
        "pendulum.npz exists (a replay saved before, a person's takeovers perhaps): pass another file name",
    ),
    "a learner address without its scheme": (
        ["--role", "actor", "--learner-address", "127.0.0.1:5555"],
        "--learner-address must read tcp://HOST:PORT (or ipc://PATH), not 127.0.0.1:5555",
    ),
    "learning never starts": (["--learning-starts", "1000", "--total-timesteps", "1000"], "--learning-starts"),
    "too few critics": (["--num-critics", "1"], "--num-critics"),
    "no subsampled critics": (["--num-subsample-critics", "0"], "--num-subsample-critics must lie in [1, "),
    "a buffer of fewer rows than twice the envs": (
        ["--num-envs", "3", "--buffer-size", "5", "--batch-size", "2", "--learning-starts", "2"],
        "twice --num-envs (3)",
    ),
    "offline actions of no shape": (["--offline-data", "scalar.npz"], "actions of shape ()"),
    "offline rewards that are no numbers": (["--offline-data", "text.npz"], "rewards of dtype <U1"),
    "a frozen encoder with no images": (
        ["--freeze-image-encoder"],
        "--freeze-image-encoder needs images: add --from-pixels",
    ),
    "an image size with no images": (["--image-size", "32"], "--image-size needs images: add --from-pixels"),
    "no augmentation with no images": (["--no-augment"], "--no-augment needs images"),
    "a gripper's flags with no gripper": (
        ["--gripper-epsilon", "0.3", "--discrete-q-lr", "0.01"],
        "--gripper-epsilon, --discrete-q-lr: the gripper's, unused without --num-discrete-actions",
    ),
    "a split run's flags in a local run": (
        ["--learner-address", "tcp://10.0.0.2:5555", "--outbox-size", "50"],
        "--learner-address, --outbox-size: for a learner and its actors apart, not --role local: add --role",
    ),
    "an actor's flags given to the learner": (
        ["--role", "learner", "--control-hz", "5"],
        "--control-hz: an actor's, unused by --role learner: give them to the actors",
    ),
    "spatial pooling without a shared encoder": (
        ["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-pooling", "spatial", "--no-shared-encoder"],
        "--image-pooling spatial needs --shared-encoder",
    ),
    "encoder weights of other shapes": (
        ["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-encoder-weights", "six.pt"],
        "six.pt: no ResNet-10 for 3-channel images",
    ),
    "missing encoder weights": (
        ["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-encoder-weights", "nowhere.pt"],
        "nowhere.pt: no such file or directory",
    ),
    "encoder weights that are text": (
        ["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-encoder-weights", "notes.txt"],
        "notes.txt is not a torch state dict (no file torch.save wrote)",
    ),
    "encoder weights that are a tensor": (
        ["--env-id", "InvertedPendulum-v5", "--from-pixels", "--image-encoder-weights", "tensor.pt"],
        "tensor.pt holds a Tensor, not a state dict",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_one_line_exit_2_nothing_written(in_tmp, capsys, case):
    (in_tmp / "corrupt.npz").write_bytes(b"PK\x03\x04 not an npz")
    data = {
        "obs": np.zeros((3, 3), np.float32),
        "actions": np.zeros((3, 1), np.float32),
        "rewards": np.zeros(3),
        "next_obs": np.zeros((3, 3), np.float32),
        "terminations": np.zeros(3),
    }
    np.savez(in_tmp / "pendulum.npz", **data)
    np.savez(in_tmp / "wide.npz", **{**data, "actions": np.zeros((3, 2), np.float32)})
    grasp = {
        **data,
        "obs": np.zeros((3, 6), np.float32),
        "next_obs": np.zeros((3, 6), np.float32),
        "actions": np.array([[0, 0, -1], [0, 0, 0.5], [0, 0, 1]], np.float32),
    }  # 0.5: no command of K = 3
    np.savez(in_tmp / "grasp.npz", **grasp)
    np.savez(in_tmp / "nan.npz", **{**data, "rewards": np.array([0, np.nan, 0])})
    np.savez(in_tmp / "far.npz", **{**data, "actions": np.array([[0], [2], [200]], np.float32)})  # bounds [-2, 2]
    np.savez(in_tmp / "half.npz", **{**data, "terminations": np.array([0.5, 0, 1])})
    np.savez(in_tmp / "taken.npz", **data, interventions=np.array([1, -3, 0.0]))
    np.savez(in_tmp / "scalar.npz", **{**data, "actions": np.array(0.0)})
    np.savez(in_tmp / "text.npz", **{**data, "rewards": np.array(["a", "b", "c"])})
    torch.save(sac.ResNet10(6).state_dict(), in_tmp / "six.pt")  # for 6-channel images: 2 stacked frames
    torch.save(torch.zeros(3), in_tmp / "tensor.pt")
    (in_tmp / "notes.txt").write_text("some words, no arrays\n")
    np.savez(in_tmp / "norewards.npz", **{key: x for key, x in data.items() if key != "rewards"})
    np.savez(in_tmp / "extra.npz", **data, foo=np.zeros(3))
    os.symlink("pendulum.npz", in_tmp / "link.npz")
    before = sorted(os.listdir(in_tmp))
    argv, needle = BAD_INPUT[case]
    with pytest.raises(SystemExit) as exit_info:
        sac.cli(["--env-id", "Pendulum-v1", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err
    assert sorted(os.listdir(in_tmp)) == before


@pytest.mark.parametrize("rows, noted", [(100, True), (128, False)])
def test_offline_data_below_a_batch_s_share_is_noted(in_tmp, capsys, rows, noted):
    """RLPD's batches draw round(batch_size * ratio) demos once the demo buffer holds that many: a
    file of fewer, with no person to add to it, would never be drawn, and a note says so."""
    data = dict(obs=np.zeros((rows, 3), np.float32), actions=np.zeros((rows, 1), np.float32), rewards=np.zeros(rows))
    np.savez(in_tmp / "few.npz", **data, next_obs=data["obs"], terminations=np.zeros(rows))
    flags = ["--env-id", "Pendulum-v1", "--total-timesteps", "300", "--learning-starts", "256", "--batch-size", "256"]
    sac.cli([*flags, "--offline-data", "few.npz", "--eval-episodes", "1", "--no-cuda"])
    note = f"note: --offline-data gives the demo buffer {rows} transitions; a batch draws 128 (--batch-size x"
    assert (note in capsys.readouterr().err) == noted


def test_a_resume_needs_no_offline_file_and_takes_a_new_address_and_control_rate(in_tmp, capsys):
    """The checkpoint holds the demo buffer, so --resume runs with the --offline-data file gone; a
    resumed learner or actor may move to another address and pace (they were ignored), and a local
    run, which uses neither, refuses them in one line."""
    rows = 64
    data = dict(obs=np.zeros((rows, 3), np.float32), actions=np.zeros((rows, 1), np.float32), rewards=np.zeros(rows))
    np.savez(in_tmp / "off.npz", **data, next_obs=data["obs"], terminations=np.zeros(rows))
    flags = ["--env-id", "Pendulum-v1", "--total-timesteps", "300", "--learning-starts", "100", "--batch-size", "32"]
    first = sac.cli(
        [*flags, "--offline-data", "off.npz", "--checkpoint-freq", "200", "--eval-episodes", "1", "--no-cuda"]
    )
    os.remove(in_tmp / "off.npz")
    checkpoint = f"{first['run_dir']}/checkpoint.pt"
    moved = ["--learner-address", "tcp://127.0.0.1:6001", "--network-timeout", "5", "--control-hz", "20"]
    with pytest.raises(SystemExit) as exit_info:
        sac.cli(["--resume", checkpoint, "--resume-anyway", "--total-timesteps", "400", *moved])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--control-hz: for a learner and its actors apart, not --role local" in err
    as_learner = dict(learner_address="tcp://127.0.0.1:6001", network_timeout=5.0, control_hz=20.0)
    recorded = torch.load(checkpoint, weights_only=False)["args"]  # the run's flags, but for these
    args, _ = sac.load_checkpoint(sac.Args(**{**recorded, "resume": checkpoint, "resume_anyway": True, **as_learner}))
    assert {key: getattr(args, key) for key in as_learner} == as_learner and "ignored" not in capsys.readouterr().out
    resumed = sac.cli(["--resume", checkpoint, "--resume-anyway", "--total-timesteps", "400"])
    assert resumed["global_step"] == 400
    saved = torch.load(checkpoint, weights_only=False)  # written at step 400
    assert saved["counters"][0] == 400 and saved["demo"]["size"] == rows


@pytest.mark.parametrize("shape", [(8, 8, 3), (3, 12, 12), (40, 15, 3)])
def test_an_env_s_image_under_16_pixels_a_side_is_refused_naming_image_size(shape):
    """DrQ's convolutions need 16 pixels a side (a smaller image was a traceback at the first
    forward pass); --image-size resizes it."""
    actions = gym.spaces.Box(-1, 1, (2,))
    sac.robot_learning_setup(tiny(), gym.spaces.Dict(image=gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)), actions)
    with pytest.raises(sac.ConfigError, match=r"images \['image'\] are under 16 pixels a side.*--image-size 16"):
        sac.robot_learning_setup(tiny(), gym.spaces.Dict(image=gym.spaces.Box(0, 255, shape, np.uint8)), actions)


@pytest.mark.parametrize(
    "space", [gym.spaces.Box(0, 1, (16, 16, 3), np.float32), gym.spaces.Box(0, 255, (16,), np.uint8)]
)
def test_an_image_key_neither_uint8_nor_3d_is_refused(space):
    with pytest.raises(sac.ConfigError, match="neither vector Boxes nor 3-d uint8 images"):
        sac.check_spaces("X-v0", gym.spaces.Dict({"image": space}), gym.spaces.Box(-1, 1, (1,)))


LOSSES = ("losses/qf_loss", "losses/actor_loss", "eval/episodic_return")


def check_resume_is_exact(tmp_path, flags: list, checkpoint_freq: int, total: int, tags=LOSSES, models=()) -> None:
    """test_common_block's check_stopped_runs_resume_exactly of a run of `flags` to `total` env
    steps that evaluates one episode, saves its model and logs every 50 steps: stopped at its first
    checkpoint and resumed, it ends with the networks (actor, qf, log_alpha and `models`) and the
    logged `tags` of a run never stopped."""
    from test_common_block import check_stopped_runs_resume_exactly

    flags = [*flags, "--total-timesteps", str(total), "--eval-episodes", "1", "--save-model", "--log-freq", "50"]
    models = ("actor", "qf", "log_alpha", *models)
    check_stopped_runs_resume_exactly(tmp_path, sac, flags, checkpoint_freq, total, models, tags)


def test_a_run_with_offline_data_resumes_exactly(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path / "data")
    sac.main(tiny(save_replay=str(tmp_path / "replay.npz")))
    flags = ["--env-id", "Pendulum-v1", "--offline-data", str(tmp_path / "replay.npz"), "--offline-steps", "100"]
    flags += ["--learning-starts", "200", "--batch-size", "32", "--eval-freq", "400", "--no-cuda"]
    check_resume_is_exact(tmp_path, flags, 400, 800)


def stop_at(monkeypatch, step: int):
    """Runs in this process stop as by SIGTERM once they have logged `step` (offline steps: 1 - N,
    ..., 0); returns the Run.log to restore."""
    log = sac.Run.log

    def stop(self, infos, metrics, previous_step, global_step):
        log(self, infos, metrics, previous_step, global_step)
        self.stop_signal += [15] if global_step == step else []

    monkeypatch.setattr(sac.Run, "log", stop)
    return log


def test_a_frozen_resnet_is_stored_once_and_a_checkpoint_holding_it_twice_resumes_exactly(in_tmp, monkeypatch):
    """A frozen CNN has no target to track: the target critics read the critics' own, so a
    checkpoint holds its weights once (the same storage under qf and qf_target) and model.pt once.
    A checkpoint holding a copy under qf_target (as ones written before did) is larger by the CNN's
    bytes and resumes, as the new one does, to the networks of a run never stopped."""
    torch.manual_seed(0)
    torch.save(sac.ResNet10(3).state_dict(), in_tmp / "resnet10.pt")
    flags = dict(
        **PIXELS,
        freeze_image_encoder=True,
        image_encoder_weights=str(in_tmp / "resnet10.pt"),
        total_timesteps=400,
        learning_starts=200,
        save_model=True,
    )
    whole = sac.main(tiny(**flags, exp_name="whole"))
    log = stop_at(monkeypatch, 300)
    stopped = sac.main(tiny(**flags, exp_name="stopped"))
    monkeypatch.setattr(sac.Run, "log", log)
    checkpoint = f"{stopped['run_dir']}/checkpoint.pt"
    saved = torch.load(checkpoint, weights_only=False)
    cnn = [key for key in saved["qf"] if key.startswith("encoder.cnns.")]
    assert len(cnn) == len(sac.ResNet10(3).state_dict())
    assert all(saved["qf_target"][key].data_ptr() == saved["qf"][key].data_ptr() for key in cnn)  # stored once
    model = torch.load(f"{whole['run_dir']}/model.pt", weights_only=False)
    assert model.keys() == {"actor", "qf", "log_alpha", "args"} and not any("cnns" in key for key in model["actor"])
    twice = f"{in_tmp}/twice/checkpoint.pt"  # the form written before: a copy of the frozen CNN under qf_target
    os.makedirs(os.path.dirname(twice))
    torch.save({**saved, "qf_target": {k: v.clone() for k, v in saved["qf_target"].items()}}, twice)
    cnn_bytes = sum(saved["qf"][key].nbytes for key in cnn)
    assert os.path.getsize(twice) - os.path.getsize(checkpoint) == pytest.approx(cnn_bytes, rel=0.01)
    for path in (checkpoint, twice):
        resumed = sac.cli(["--resume", path])
        assert resumed["critic_updates"] == whole["critic_updates"]
        models = [torch.load(f"{run['run_dir']}/model.pt", weights_only=False) for run in (whole, resumed)]
        for key in ("actor", "qf"):
            torch.testing.assert_close(models[1][key], models[0][key], rtol=0, atol=0)


@pytest.mark.parametrize(
    "env_id,frame_stack,more",
    [
        ("Reacher-v5", "2", []),
        ("InvertedPendulum-v5", "1", []),
        ("InvertedPendulum-v5", "1", ["--freeze-image-encoder", "--image-pooling", "spatial"]),
    ],
)
def test_a_pixel_run_resumes_exactly(tmp_path, env_id, frame_stack, more):
    """Each env is made anew by make_env and given its saved state: gymnasium's own unpickling would
    rebuild InvertedPendulum-v5 with shifted constructor arguments, and it would render no more. The
    cached features of a frozen encoder are saved and restored with the frames."""
    flags = ["--env-id", env_id, "--from-pixels", "--image-size", "16", "--frame-stack", frame_stack, *more]
    flags += ["--learning-starts", "200", "--batch-size", "32", "--eval-freq", "300", "--no-cuda"]
    check_resume_is_exact(tmp_path, flags, 300, 600)


# --------------------------------------------------------------------------------------------------
# A DISCRETE GRIPPER (--num-discrete-actions)
# --------------------------------------------------------------------------------------------------
GRASP = dict(env_id="grasp_env:PointGrasp-v0", num_discrete_actions=3)


def test_the_grasp_task_grasps_only_on_target_with_an_open_gripper_and_a_fragile_target_breaks_when_squeezed():
    import grasp_env

    for fragile in (False, True):
        env = grasp_env.PointGrasp(fragile)
        env.reset(seed=0)
        env.pos, env.target = np.zeros(2), np.array([0.5, 0.0])
        assert env.step(np.array([0, 0, 1.0]))[0][4:].tolist() == [1, 0]  # closed on nothing, away from the target
        env.pos = np.array([0.45, 0.0])
        assert env.step(np.array([0, 0, 1.0]))[0][4:].tolist() == [1, 0]  # closed: no grasp before it opens
        env.step(np.array([0, 0, -1.0]))
        obs, reward, *_ = env.step(np.array([0, 0, 1.0]))
        assert obs[4:].tolist() == [1, 1] and reward == 1.0  # grasped within RADIUS
        obs, reward, *_ = env.step(np.array([1.0, 0, 0.0]))  # the middle command keeps it; the target moves along
        assert obs[2:4].tolist() == [0, 0] and reward == 1.0
        _, reward, terminated, *_ = env.step(np.array([0, 0, 1.0]))
        assert (reward, terminated) == ((-10.0, True) if fragile else (1.0, False))


def test_double_dqn_target_matches_a_loop():
    torch.manual_seed(0)
    rewards, terminations = torch.randn(6), torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    next_q, next_q_target = torch.randn(6, 4), torch.randn(6, 4)
    expected = []
    for i in range(6):  # brute force: the online network's best command, valued by the target network
        best = max(range(4), key=lambda a: float(next_q[i, a]))
        expected.append(float(rewards[i]) + 0.9 * (1 - float(terminations[i])) * float(next_q_target[i, best]))
    torch.testing.assert_close(
        sac.double_dqn_target(rewards, terminations, next_q, next_q_target, 0.9), torch.tensor(expected)
    )


def test_gripper_levels_are_k_evenly_spaced_values_of_the_last_dimension():
    space = gym.spaces.Box(np.array([-1, -1, 0], np.float32), np.array([1, 1, 2], np.float32))
    assert sac.gripper_levels(space, 3).tolist() == [0.0, 1.0, 2.0] and sac.gripper_levels(space, 2).tolist() == [0, 2]


def test_with_a_gripper_the_actor_and_critics_cover_only_the_arm_and_the_log_prob_is_the_arm_s():
    torch.manual_seed(0)
    envs = fake_envs([-1.0, 0.0, -1.0], [1.0, 4.0, 1.0])  # the arm: dimensions 0 and 1; the gripper: 2
    actor, qf = sac.Actor(envs, gripper=True), sac.QEnsemble(envs, gripper=True)
    obs = torch.randn(5, 3)
    action, log_prob, _ = actor.get_action(obs)
    assert action.shape == (5, 2) and qf(obs, action).shape == (2, 5) and qf.weights[0].shape[1] == 3 + 2
    mean, log_std = actor(obs)  # torch.distributions' density of the action over the arm's two dimensions alone
    dist = TransformedDistribution(
        Normal(mean, log_std.exp()),
        [TanhTransform(), AffineTransform(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 2.0]))],
    )
    torch.testing.assert_close(log_prob.squeeze(-1), dist.log_prob(action).sum(-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shared", [True, False])
def test_the_discrete_critic_gets_no_gradient_from_the_actor_and_gives_none_to_the_critics(shared):
    torch.manual_seed(0)
    envs = SimpleNamespace(single_observation_space=DICT_SPACE, single_action_space=gym.spaces.Box(-1, 1, (3,)))
    qf = sac.QEnsemble(envs, gripper=True)
    actor = sac.Actor(envs, qf.encoder if shared else None, gripper=True)
    dq, dq_target = (sac.DiscreteQ(envs, 3, q.encoder if shared else None) for q in (qf, sac.QEnsemble(envs)))
    obs, actions, rewards, next_obs, terminations, penalties = dict_batch()
    actions = torch.cat([actions, torch.tensor([-1.0, 0.0, 1.0, 0.0, -1.0, 1.0, 1.0, 0.0])[:, None]], -1)
    sac.compute_loss_pi(actor, qf, obs, torch.tensor(0.2))[0].backward()
    assert all(p.grad is None for p in dq.parameters()) and grad_norm(actor) > 0
    actor.zero_grad()
    loss, metrics = sac.compute_loss_discrete_q(
        dq, dq_target, (obs, actions, rewards, next_obs, terminations, penalties), torch.tensor([-1.0, 0.0, 1.0]), 0.99
    )
    loss.backward()
    assert grad_norm(qf) == 0 and grad_norm(actor) == 0 and all(p.grad is None for p in dq_target.parameters())
    assert grad_norm(dq.net) > 0 and (grad_norm(dq.encoder) > 0 if not shared else dq.encoder is None)
    assert set(metrics) == {"discrete_qf_loss", "discrete_qf_values"}


def test_smoke_a_gripper_run_logs_its_metrics_and_stores_commands_the_env_received(in_tmp):
    path = str(in_tmp / "replay.npz")
    summary = sac.main(tiny(**GRASP, save_replay=path, save_model=True))
    assert summary["critic_updates"] == 201 and summary["actor_updates"] == 200
    logged = scalars(summary["run_dir"])
    for tag in ["losses/discrete_qf_loss", "losses/discrete_qf_values", "losses/qf_loss", "losses/actor_loss"]:
        assert tag in logged, tag
    with np.load(path) as f:
        assert set(np.unique(f["actions"][:, -1])) == {-1.0, 0.0, 1.0}
    model = torch.load(f"{summary['run_dir']}/model.pt", weights_only=False)
    assert model["discrete_qf"]["net.4.weight"].shape == (3, 256) and model["actor"]["fc_mean.weight"].shape == (2, 256)
    offline = offline_buffer(tiny(**GRASP, offline_data=path))  # loads back under the same K
    assert offline.size == 300


def test_a_gripper_run_resumes_exactly(tmp_path):
    flags = ["--env-id", GRASP["env_id"], "--num-discrete-actions", "3", "--learning-starts", "300"]
    flags += ["--batch-size", "64", "--eval-freq", "500", "--no-cuda"]
    tags = ("losses/qf_loss", "losses/discrete_qf_loss", "eval/episodic_return")
    check_resume_is_exact(tmp_path, flags, 400, 800, tags, models=("discrete_qf",))


# --------------------------------------------------------------------------------------------------
# A PERSON IN THE LOOP: gym-hil's protocol (tests/hil_env.py's scripted person)
# --------------------------------------------------------------------------------------------------
REACH = ["--env-id", "hil_env:PointReach-v0", "--learning-starts", "100", "--batch-size", "32", "--no-cuda"]


def test_stored_actions_are_the_person_s_and_the_demo_buffer_holds_exactly_the_takeovers(in_tmp):
    from hil_env import reach_expert

    flags = [*REACH, "--env-kwargs", "person_episodes:3", "noise:0", "--total-timesteps", "400", "--eval-episodes", "1"]
    summary = sac.cli([*flags, "--save-replay", "replay.npz"])
    data = np.load(in_tmp / "replay.npz")
    taken = data["interventions"]
    assert 30 < taken.sum() < 75 and taken[: taken.sum()].all()  # the first 3 episodes, about 15 steps each
    expert = np.stack([reach_expert(None, obs) for obs in data["obs"][taken]])
    np.testing.assert_array_equal(data["actions"][taken], expert)
    assert not np.allclose(
        data["actions"][~taken][:50], np.stack([reach_expert(None, o) for o in data["obs"][~taken][:50]])
    )
    logged = scalars(summary["run_dir"])
    assert [v for _, v in logged["charts/demo_transitions"]][-1] == taken.sum()
    assert [v for _, v in logged["charts/intervention_rate"]][:4] == [1.0, 1.0, 1.0, 0.0]


def test_the_intervention_charts_come_only_with_an_env_that_reports_interventions(in_tmp):
    """Pendulum's infos carry no is_intervention: its run logs its episodes, and no intervention
    chart (the scripted person's env, test above, logs a rate for each episode, 0 included)."""
    logged = scalars(sac.main(tiny())["run_dir"])
    assert len(logged["charts/episodic_return"]) == 1
    assert "charts/intervention_rate" not in logged and "charts/demo_transitions" not in logged


def test_the_scripted_person_takes_over_where_the_policy_strays_within_its_budget_and_not_in_evaluations():
    from hil_env import EVAL_SEED_OFFSET, PointReach

    env = gym.make("hil_env:PointReach-v0", person_budget=30, person_wait=10, noise=0.0)
    env.reset(seed=1)
    away, toward, taken = -np.ones(2, np.float32), np.ones(2, np.float32), []
    for t in range(200):
        _, _, terminated, truncated, info = env.step(toward if t < 20 else away)
        taken.append(info["is_intervention"])
        if terminated or truncated:
            env.reset()
    assert sum(taken) == 30 and not any(taken[:20])  # the policy went straight at the goal at first
    env.reset(seed=EVAL_SEED_OFFSET)  # an evaluation episode: the policy's own
    assert not any(env.step(away)[4]["is_intervention"] for _ in range(20))
    assert PointReach.GOAL.tolist() == [0.4, 0.4]


def test_mixing_waits_until_the_demo_buffer_holds_a_batch_s_share():
    rb, demo = (sac.ReplayBuffer(100, 1, 1, "cpu") for _ in range(2))
    for buffer, value, n in ((rb, 0.0, 50), (demo, 1.0, 3)):
        buffer.add(np.full((n, 1), value), np.zeros((n, 1)), np.zeros(n), np.zeros((n, 1)), np.zeros(n), np.zeros(n))
    mixed = sac.MixedReplay(rb, demo, 0.5)
    assert float(mixed.sample(8)[0].sum()) == 0.0  # 3 demos < 4: the online buffer alone
    demo.add(np.ones((1, 1)), np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), np.zeros(1), np.zeros(1))
    assert float(mixed.sample(8)[0].sum()) == 4.0


def test_discrete_penalty_reaches_the_gripper_critic_s_target_and_not_the_critics():
    envs = SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1, 1, (3,)), single_action_space=gym.spaces.Box(0, 2, (3,))
    )
    torch.manual_seed(0)
    actor, qf, qf_target = (
        sac.Actor(envs, gripper=True),
        sac.QEnsemble(envs, gripper=True),
        sac.QEnsemble(envs, gripper=True),
    )
    dq, dq_target = sac.DiscreteQ(envs, 3), sac.DiscreteQ(envs, 3)
    levels = torch.tensor([0.0, 1.0, 2.0])
    obs, next_obs = torch.randn(16, 3), torch.randn(16, 3)
    actions = torch.cat([torch.rand(16, 2) * 2, levels[torch.randint(0, 3, (16, 1))]], dim=-1)
    rewards, terminations, penalties = torch.randn(16), torch.zeros(16), -0.05 * torch.randint(0, 2, (16,))
    losses = {}
    for name, p in (("with", penalties), ("without", torch.zeros(16))):
        batch = (obs, actions, rewards, next_obs, terminations, p)
        torch.manual_seed(1)
        q_loss = sac.compute_loss_q(actor, qf, qf_target, batch, 0.2, 0.99, True, 2)[0]
        losses[name] = (q_loss, sac.compute_loss_discrete_q(dq, dq_target, batch, levels, 0.99)[0])
    assert torch.equal(losses["with"][0], losses["without"][0])
    with torch.no_grad():  # the target by hand: y = r + p + gamma * Q_d'(s', argmax Q_d(s', .))
        best = dq(next_obs).argmax(-1, keepdim=True)
        y = rewards + penalties + 0.99 * dq_target(next_obs).gather(-1, best).squeeze(-1)
        q = dq(obs).gather(-1, actions[:, -1:].long()).squeeze(-1)
    torch.testing.assert_close(losses["with"][1], (q - y).pow(2).mean())
    assert not torch.equal(losses["with"][1], losses["without"][1])


class NestedEnv(gym.Env):
    """A gym-hil shape: {"agent_pos": (5,), "pixels": {"front": HWC, "wrist": CHW}}"""

    observation_space = gym.spaces.Dict(
        agent_pos=gym.spaces.Box(-1, 1, (5,), np.float32),
        pixels=gym.spaces.Dict(
            front=gym.spaces.Box(0, 255, (20, 20, 3), np.uint8), wrist=gym.spaces.Box(0, 255, (3, 20, 20), np.uint8)
        ),
    )
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


def test_nested_observations_give_the_features_of_the_same_data_flattened_by_hand():
    args = tiny(image_size=16)
    env = sac.observation_wrappers(args, lambda **kwargs: NestedEnv())
    assert set(env.observation_space.spaces) == {"agent_pos", "pixels/front", "pixels/wrist"}
    assert env.observation_space["pixels/front"].shape == (16, 16, 3)
    assert env.observation_space["pixels/wrist"].shape == (3, 16, 16)
    obs, _ = env.reset(seed=0)
    raw = env.unwrapped.observation_space.sample()  # the same data through the wrapper and by hand
    by_hand = {
        "agent_pos": raw["agent_pos"],
        "pixels/front": raw["pixels"]["front"],
        "pixels/wrist": raw["pixels"]["wrist"],
    }
    through = sac.flatten_observation(raw)
    assert through.keys() == by_hand.keys() and all(np.array_equal(through[k], by_hand[k]) for k in by_hand)
    big = sac.observation_wrappers(tiny(), lambda **kwargs: NestedEnv())  # no --image-size: as they come
    encoder = sac.Encoder(big.observation_space)
    batch = lambda o: sac.to_tensors({k: x[None] for k, x in o.items()}, "cpu")  # noqa: E731
    torch.testing.assert_close(encoder(batch(through)), encoder(batch(by_hand)))
    assert encoder.images == ["pixels/front", "pixels/wrist"] and encoder.out_dim == 2 * sac.IMAGE_FEATURES + sac.HIDDEN


def test_a_run_with_a_person_resumes_exactly(tmp_path):
    flags = [*REACH, "--env-kwargs", "person_episodes:8", "--eval-freq", "300"]
    tags = ("losses/qf_loss", "charts/intervention_rate", "charts/demo_transitions")
    check_resume_is_exact(tmp_path, flags, 150, 600, tags)


@pytest.mark.parametrize(
    "fault, message",
    [
        ("shape", "info['teleop_action'] [0.5, 0.5, 0.5] is no action"),
        ("outside", "info['teleop_action'] [3.0, 0.0] is no action"),
        ("flag", "info['is_intervention'] is ['yes'], no bool"),
    ],
)
def test_a_person_s_bad_report_ends_in_one_line(in_tmp, capsys, fault, message):
    with pytest.raises(SystemExit) as stop:
        sac.cli([*REACH, "--env-kwargs", "person_episodes:1", f"fault:'{fault}'", "--total-timesteps", "200"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("fault", ["flag", "nan", "diverged"])
def test_an_error_after_the_first_step_writes_the_person_s_data_before_its_line(in_tmp, capsys, fault):
    """A person's report gone wrong (the flag) or a NaN reward from the env, each at step 150, and
    learning rates that make the networks diverge (the NaN guard, which refuses to save them) end
    the run while the person drives its episodes: every takeover stored before then is on disk when
    the error's one line comes, with how to go on."""
    from hil_env import reach_expert

    kwargs = ["person_episodes:30", "noise:0", *[f"fault:'{fault}'", "fault_step:150"] * (fault != "diverged")]
    flags = [*REACH, "--env-kwargs", *kwargs, "--total-timesteps", "600", "--log-freq", "10"]
    rates = ["--policy-lr", "1e6", "--q-lr", "1e6"] if fault == "diverged" else []
    with pytest.raises(SystemExit) as stop:
        sac.cli([*flags, *rates, "--save-replay", "replay.npz"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    (run_dir,) = glob.glob(str(in_tmp / "runs" / "*"))
    replay = dict(np.load(in_tmp / "replay.npz"))
    if fault != "diverged":  # the checkpoint holds the demo buffer, and the command to resume is printed
        demo = torch.load(f"{run_dir}/checkpoint.pt", weights_only=False)["demo"]
        assert f"--resume {run_dir}/checkpoint.pt" in out and len(replay["actions"]) == 150
        assert fault == "flag" or "step 150: hil_env:PointReach-v0 returned rewards [nan]; fix the env" in err, err
        stored = demo["storage"][: demo["size"]].numpy()
        demos = {"obs": stored[:, :2], "actions": stored[:, 2:4], "interventions": stored[:, -1].astype(bool)}
    else:  # the networks are refused, the demo buffer is kept as an .npz --offline-data reads
        demos = dict(np.load(f"{run_dir}/demos.npz"))
        assert "demos.npz" in out and "--offline-data" in out and "diverged" in err
        assert len(replay["actions"]) > 100  # learning started
    assert replay["interventions"].all()  # the person drove every step
    assert len(demos["actions"]) == len(replay["actions"]) and demos["interventions"].all()
    expert = np.stack([reach_expert(None, obs) for obs in demos["obs"]])
    np.testing.assert_array_equal(demos["actions"], expert)


def test_a_nested_leaf_neither_image_nor_vector_is_refused(in_tmp, capsys):
    with pytest.raises(SystemExit) as stop:
        sac.cli([*REACH, "--env-kwargs", "fault:'leaf'"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "observation keys ['extra/mode']" in err and not (in_tmp / "runs").exists()


def test_an_env_that_cannot_be_pickled_resumes_with_new_episodes(in_tmp, capsys):
    """gym-hil's envs hold a renderer's pointers: the checkpoint makes such an env anew on --resume
    and starts new episodes, where pickling it failed."""
    flags = [*REACH, "--env-kwargs", "pointer:True", "--total-timesteps", "300", "--checkpoint-freq", "200"]
    first = sac.cli([*flags, "--eval-episodes", "1"])
    checkpoint = os.path.join(first["run_dir"], "checkpoint.pt")
    summary = sac.cli(["--resume", checkpoint, "--resume-anyway"])
    assert "at step 200; new episodes start" in capsys.readouterr().out and summary["global_step"] == 300


GYM_HIL = {
    "images, front and wrist": [
        "gym_hil:gym_hil/PandaPickCubeBase-v0",
        "--env-kwargs",
        "image_obs:True",
        "--image-size",
        "32",
    ],
    "the gripper": [
        "gym_hil:gym_hil/PandaPickCube-v0",
        "--num-discrete-actions",
        "3",
        "--env-kwargs",
        "reset_delay_seconds:0",
    ],
}


@pytest.mark.parametrize("flags", GYM_HIL.values(), ids=GYM_HIL.keys())
def test_gym_hil_s_tasks_train_where_gym_hil_is_installed(in_tmp, flags):
    """LeRobot's gym-hil tasks as they come (a virtual environment of their own: gym-hil pins MuJoCo
    below 3.9); skipped where gym-hil is not installed, as in CI."""
    pytest.importorskip("gym_hil")
    argv = ["--env-id", *flags, "--buffer-size", "1000", "--total-timesteps", "200"]
    summary = sac.cli([*argv, "--learning-starts", "100", "--batch-size", "16", "--eval-episodes", "1", "--no-cuda"])
    assert summary["critic_updates"] == 101 and summary["global_step"] == 200


# --------------------------------------------------------------------------------------------------
# LEARNING
# --------------------------------------------------------------------------------------------------
def test_learns_pendulum(in_tmp):
    """Pendulum-v1, 5,000 env steps (1,000 random), final deterministic evaluation over 10
    episodes."""
    summary = sac.main(
        sac.Args(
            env_id="Pendulum-v1",
            total_timesteps=5_000,
            learning_starts=1_000,
            eval_freq=0,
            eval_episodes=10,
            cuda=False,
            seed=1,
        )
    )
    # Final evaluation at 5,000 steps, one thread, seeds 1-5: -170.8, -434.1, -195.7, -195.8, -170.4
    # (a random policy scores about -1,200 to -1,700), as sac_continuous_action.py's, whose run
    # this is with flat observations. Evaluated every 500 steps, each seed scored -540.8 to -920.1
    # at 3,000 steps and -170.4 to -434.1 at every evaluation from 3,500 on (seed 2, the worst:
    # -293.5, -342.4, -402.8, -434.1). Seed 1 is asserted; the threshold sits below the worst of
    # the five seeds.
    assert summary["eval_return"] > -500


@pytest.mark.slow
def test_offline_data_reaches_the_from_scratch_return_in_half_the_env_steps(in_tmp):
    """Pendulum-v1, seed 1: the learning test's run (5,000 env steps) saves its replay; a new run
    pretrained on it for 2,500 update steps (--offline-steps), then mixing it into every batch,
    trains for 2,500 env steps."""
    path = str(in_tmp / "pendulum.npz")
    scratch = sac.main(
        sac.Args(
            env_id="Pendulum-v1",
            total_timesteps=5_000,
            learning_starts=1_000,
            eval_freq=0,
            cuda=False,
            seed=1,
            save_replay=path,
        )
    )
    offline = sac.main(
        sac.Args(
            env_id="Pendulum-v1",
            total_timesteps=2_500,
            learning_starts=100,
            eval_freq=0,
            cuda=False,
            seed=1,
            offline_data=path,
            offline_steps=2_500,
            exp_name="offline",
        )
    )
    # Measured, one thread, seeds 1-3 on seed 1's data: from scratch at 5,000 steps -170.8, -434.1,
    # -195.7; with the data at 2,500 steps -168.4, -179.5, -190.8 (from scratch at 2,500 steps, seed
    # 1: -1,089.1).
    assert offline["eval_return"] > -300 and offline["eval_return"] > scratch["eval_return"] - 50


PIXEL_LEARNING = dict(
    env_id="InvertedPendulum-v5",
    from_pixels=True,
    image_size=16,
    batch_size=64,
    total_timesteps=10_000,
    learning_starts=1_000,
    eval_freq=0,
    eval_episodes=5,
    cuda=False,
    seed=1,
)


@pytest.mark.slow
def test_learns_inverted_pendulum_from_pixels_and_state(in_tmp):
    """InvertedPendulum-v5 --from-pixels (16 x 16 frames and the state), 10,000 env steps (1,000
    random), batch 64."""
    summary = sac.main(sac.Args(**PIXEL_LEARNING))
    # Measured, one thread, seeds 1-3 (5 evaluation episodes): 1000, 1000, 1000 at 10,000 steps;
    # 1000, 1000, 1000 at 8,000; a random policy scores about 5 to 15.
    assert summary["eval_return"] > 500


@pytest.mark.slow
def test_learns_inverted_pendulum_from_pixels_with_a_frozen_random_encoder_and_spatial_pooling(in_tmp):
    """As above, with --freeze-image-encoder --image-pooling spatial: the replay's cached features
    of a random CNN."""
    summary = sac.main(sac.Args(**PIXEL_LEARNING, freeze_image_encoder=True, image_pooling="spatial"))
    # Measured, one thread, seeds 1-3 (5 evaluation episodes): 1000, 1000, 1000 at 10,000 steps;
    # 1000, 177.4, 1000 at 8,000; a random policy scores about 5 to 15.
    assert summary["eval_return"] > 500


@pytest.mark.slow
def test_learns_the_grasp_with_a_discrete_gripper(in_tmp):
    """PointGrasp-v0 with --num-discrete-actions 3, 10,000 env steps (1,000 random), 10 evaluation
    episodes."""
    summary = sac.main(
        sac.Args(**GRASP, total_timesteps=10_000, learning_starts=1_000, eval_freq=0, cuda=False, seed=1)
    )
    # Measured, one thread, seeds 1-3: 39.65, 39.89, 28.66 at 10,000 steps (a target held from about
    # step 6 to the end scores about 45); a random policy scores about -5.
    assert summary["eval_return"] > 30


# --------------------------------------------------------------------------------------------------
# THE ACTOR AND THE LEARNER APART (--role learner, actor or both)
# --------------------------------------------------------------------------------------------------
SPLIT = ["--env-id", "hil_env:Ticker-v0", "--learning-starts", "50", "--batch-size", "32", "--no-cuda"]
SPLIT += ["--eval-episodes", "1", "--network-timeout", "30", "--log-freq", "50"]
DEADLINE = 120  # seconds any process of these tests may take: a failing test ends, never hangs


def free_address() -> str:
    """A loopback address on a port the OS found free: parallel tests never share one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


STARTED = []  # the processes this file's tests start


@pytest.fixture(autouse=True)
def nothing_left_running():
    """A test that fails midway leaves no learner or actor running: what it started is killed at
    its end (each would also end by its own deadline, later)."""
    yield
    for process in STARTED:
        process.kill()  # a no-op on one that ended
        process.wait()
    STARTED.clear()


def spawn(command: list, cwd) -> subprocess.Popen:
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    STARTED.append(process)
    return process


def start(role: str, address: str, *flags, cwd) -> subprocess.Popen:
    command = [sys.executable, str(ROOT / "sac_hil_serl.py"), *SPLIT, "--role", role, "--learner-address", address]
    return spawn([*command, *flags], cwd)


def finish(process: subprocess.Popen) -> str:
    """The process's output once it ended, within DEADLINE seconds (killed after it)."""
    try:
        out = process.communicate(timeout=DEADLINE)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        out = process.communicate()[0]
    assert process.returncode == 0, out
    return out


def assert_each_episode_logged_once(learner_dir: str, actor_dir: str, person_episodes: int) -> None:
    """The learner's charts hold each episode its one actor logged, once, at the actor's step (the
    row that ended it is the step's), with the actor's return, length and intervention rate; at
    least 30 of Ticker-v0's 10-row episodes, the person's first ones with intervention rate 1."""
    learner, actor = scalars(learner_dir), scalars(actor_dir)
    for tag in ("charts/episodic_return", "charts/episodic_length", "charts/intervention_rate"):
        assert learner[tag] == actor[tag], (tag, learner[tag], actor[tag])
    steps = [step for step, _ in learner["charts/episodic_length"]]
    assert len(steps) >= 30 and steps == sorted(set(steps)) and steps[0] == 10, steps
    rates = [rate for _, rate in learner["charts/intervention_rate"]]
    assert rates[:person_episodes] == [1.0] * person_episodes and 1.0 not in rates[person_episodes:], rates


def replay_rows(checkpoint: str) -> tuple:
    """A learner checkpoint's replay rows (Ticker-v0's: obs, action, reward, next_obs, terminated,
    penalty, intervened), their (actor, number) origins and its demo rows."""
    state = torch.load(checkpoint, weights_only=False)
    rb, demo = state["rb"], state["demo"]
    rows = rb["storage"][: rb["size"]].numpy()
    return rows, state["actors"]["origins"][: rb["size"]].numpy(), demo["storage"][: demo["size"]].numpy()


def test_a_learner_and_an_actor_store_each_step_once_and_the_person_s_as_demos(in_tmp):
    """One actor at 100 Hz, a person driving its first 3 episodes of 10 steps: the learner's replay
    holds each actor step once (the env's own count is the row's number), its demo buffer exactly
    the 30 takeovers; updates ran and their parameters reached the actor (its policy version)."""
    address = free_address()
    learner = start("learner", address, "--total-timesteps", "300", "--checkpoint-freq", "100", cwd=in_tmp)
    actor_flags = ["--total-timesteps", "300", "--control-hz", "100", "--env-kwargs", "person_episodes:3"]
    actor = start("actor", address, *actor_flags, cwd=in_tmp)
    finish(actor)
    finish(learner)
    learner_dir = next(p for p in glob.glob(str(in_tmp / "runs" / "*")) if os.path.isfile(f"{p}/checkpoint.pt"))
    rows, origins, demos = replay_rows(f"{learner_dir}/checkpoint.pt")
    np.testing.assert_array_equal(np.sort(rows[:, 0]), np.arange(300))  # every step once
    saved = torch.load(f"{learner_dir}/checkpoint.pt", weights_only=False)["actors"]["origins"]
    assert saved.shape == (300, 2)  # the stored rows' origins, not a table of --buffer-size
    np.testing.assert_array_equal(origins, np.stack([np.zeros(300), rows[:, 0]], 1))  # numbered as the env counts
    np.testing.assert_array_equal(rows[:, -1].astype(bool), rows[:, 0] < 30)  # the person's steps flagged
    np.testing.assert_array_equal(np.sort(demos[:, 0]), np.arange(30))
    np.testing.assert_array_equal(demos[:, 2], np.full(30, 0.5, np.float32))  # the person's action
    logged = scalars(learner_dir)
    assert logged["losses/qf_loss"] and logged["charts/policy_lag"] and logged["actors/0/transitions"][-1][1] == 300
    actor_dir = next(p for p in glob.glob(str(in_tmp / "runs" / "*")) if p != learner_dir)
    assert max(v for _, v in scalars(actor_dir)["charts/version"]) > 0  # the learner's parameters arrived


def test_a_learner_killed_and_resumed_ends_with_every_actor_step_once(in_tmp):
    """kill -9 of the learner after its first checkpoint, then --resume: the actor, which never
    stopped, sends again what that checkpoint lacks; the replay ends with each of its steps exactly
    once and the demo buffer with exactly the person's takeovers."""
    address = free_address()
    flags = ["--total-timesteps", "400", "--checkpoint-freq", "100"]
    learner = start("learner", address, *flags, cwd=in_tmp)
    actor = start("actor", address, *flags, "--control-hz", "100", "--env-kwargs", "person_episodes:5", cwd=in_tmp)
    waited = 0.0
    while not glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt")) and waited < DEADLINE:
        time.sleep(0.1)
        waited += 0.1
    time.sleep(0.5)  # rows past the checkpoint arrive, to be lost with the learner
    learner.kill()
    learner.wait()
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt"))
    before = torch.load(checkpoint, weights_only=False)["counters"][0]
    resumed = spawn([sys.executable, str(ROOT / "sac_hil_serl.py"), "--resume", checkpoint], in_tmp)
    finish(actor)
    out = finish(resumed)
    assert f"resumed {os.path.dirname(checkpoint)} at step {before:,}" in out and before < 400
    rows, origins, demos = replay_rows(checkpoint)  # the last checkpoint, at row 400
    np.testing.assert_array_equal(np.sort(rows[:, 0]), np.arange(400))
    np.testing.assert_array_equal(origins[:, 1], rows[:, 0])
    np.testing.assert_array_equal(np.sort(demos[:, 0]), np.arange(50))
    (actor_dir,) = glob.glob(str(in_tmp / "runs" / "*-actor0__*"))
    assert_each_episode_logged_once(os.path.dirname(checkpoint), actor_dir, 5)  # rows sent again carry theirs


def wait_for(pattern: str) -> None:
    waited = 0.0
    while not glob.glob(pattern) and waited < DEADLINE:
        time.sleep(0.1)
        waited += 0.1


@pytest.mark.parametrize("end", ["SIGINT", "the learner gone"])
def test_an_actor_that_ends_keeps_the_rows_the_learner_s_checkpoint_lacks_and_its_resume_sends_them(in_tmp, end):
    """An actor stopped by Ctrl-C, or ended by the learner's silence (kill -9 of the learner, its
    outbox full), with rows that the learner's last checkpoint lacks: kill -9 of the learner, its
    --resume, then the actor's by the command it printed. The replay ends with each step exactly
    once and the demo buffer with exactly the person's takeovers."""
    address = free_address()
    flags = ["--total-timesteps", "400", "--checkpoint-freq", "100"]
    learner = start("learner", address, *flags, cwd=in_tmp)
    wait_for(str(in_tmp / "runs" / "*-learner__*"))  # listening: the actor's 2 s start once the learner is up
    actor_flags = ["--control-hz", "100", "--env-kwargs", "person_episodes:20", "--outbox-size", "150"]
    timeout = "2" if end == "the learner gone" else str(DEADLINE)  # Ctrl-C's actor must not end by itself
    actor = start("actor", address, *flags, *actor_flags, "--network-timeout", timeout, cwd=in_tmp)
    wait_for(str(in_tmp / "runs" / "*" / "checkpoint.pt"))  # the learner's, at row 100
    time.sleep(0.5)  # rows past it arrive, to be lost with the learner
    if end == "SIGINT":
        actor.send_signal(signal.SIGINT)
        out = actor.communicate(timeout=DEADLINE)[0]
        assert actor.returncode == 128 + signal.SIGINT, out
    learner.kill()
    learner.wait()
    if end == "the learner gone":
        out = actor.communicate(timeout=DEADLINE)[0]
        assert actor.returncode == 2 and "ended by an error at step" in out, out  # its outbox full, or its last rows
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*-learner__*" / "checkpoint.pt"))
    assert torch.load(checkpoint, weights_only=False)["counters"][0] < 400  # a loaded machine may checkpoint later
    resumed = spawn([sys.executable, str(ROOT / "sac_hil_serl.py"), "--resume", checkpoint], in_tmp)
    command = out.strip().splitlines()[-1 if end == "SIGINT" else -2]
    assert command.startswith(f"{sys.executable} ") and "--resume" in command, out
    waits = ["--network-timeout", str(DEADLINE)]  # a loaded machine may start the resumed learner past 2 s
    finish(spawn([sys.executable, *shlex.split(command)[1:], *waits], in_tmp))
    finish(resumed)
    rows, origins, demos = replay_rows(checkpoint)  # the last checkpoint, at row 400
    np.testing.assert_array_equal(np.sort(rows[:, 0]), np.arange(400))
    np.testing.assert_array_equal(np.sort(demos[:, 0]), np.arange(200))
    (actor_dir,) = glob.glob(str(in_tmp / "runs" / "*-actor0__*"))  # an error's resume starts new episodes
    assert_each_episode_logged_once(os.path.dirname(checkpoint), actor_dir, 20)  # its checkpoint kept them


def test_an_unreachable_learner_ends_an_actor_in_one_line_after_its_deadline(in_tmp, capsys):
    argv = [*SPLIT, "--role", "actor", "--learner-address", free_address(), "--network-timeout", "1"]
    with pytest.raises(SystemExit) as stop:
        sac.cli(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "no learner answered at tcp://127.0.0.1:" in err, err
    assert not (in_tmp / "runs").exists()


def test_a_signal_while_an_actor_waits_for_its_learner_ends_it_at_once_writing_nothing(in_tmp):
    """Ctrl-C while an actor greets a learner that does not answer: exit code 130 at once, not the
    deadline's error --network-timeout later; nothing written."""
    actor = start("actor", free_address(), "--network-timeout", "60", cwd=in_tmp)
    assert "greeting the learner" in actor.stdout.readline()  # its signal handlers in place
    actor.send_signal(signal.SIGINT)
    out = actor.communicate(timeout=20)[0]
    assert actor.returncode == 128 + signal.SIGINT and "error" not in out, out
    assert os.listdir(in_tmp) == []


def test_a_second_learner_on_one_address_ends_in_one_line(in_tmp, capsys):
    zmq = pytest.importorskip("zmq")
    address = free_address()
    with zmq.Context() as context, context.socket(zmq.ROUTER) as first:
        first.setsockopt(zmq.LINGER, 0)
        first.bind(address)
        with pytest.raises(SystemExit) as stop:
            sac.cli([*SPLIT, "--role", "learner", "--learner-address", address])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "Address already in use (a second learner" in err, err
    assert not (in_tmp / "runs").exists()


REFUSED_ACTORS = {
    "spaces that differ": (
        [],
        ["--env-id", "hil_env:PointReach-v0"],
        "the learner refused this actor: actor 0's spaces",
    ),
    # the actor's networks of other flags than the learner's: refused at its hello, before the
    # learner stores any of its rows (it was refused at the first parameter push)
    "networks that differ": (
        ["--env-id", "grasp_env:PointGrasp-v0"],
        ["--env-id", "grasp_env:PointGrasp-v0", "--num-discrete-actions", "3"],
        "the learner refused this actor: actor 0's networks are not the learner's: give it the learner's network",
    ),
    # an outbox below the learner's --checkpoint-freq would fill before any checkpoint held its
    # rows, and the actor would wait for ever
    "an outbox a checkpoint could never empty": (
        ["--checkpoint-freq", "100"],
        ["--outbox-size", "50"],
        "actor 0's --outbox-size 50 is below the learner's --checkpoint-freq 100: raise it to 100 or more",
    ),
}


ACTOR_BAD_INPUT = {  # refused by the actor itself, before it looks for a learner
    "a gripper on one action dimension": (["--env-id", "Pendulum-v1", "--num-discrete-actions", "3"], "one action"),
    "offline data": (
        ["--offline-data", "some.npz"],
        "--offline-data, --offline-steps and --save-replay are the learner",
    ),
    "encoder weights that are a list": (
        [
            "--env-id",
            "InvertedPendulum-v5",
            "--from-pixels",
            "--image-size",
            "16",
            "--image-encoder-weights",
            "list.pt",
        ],
        "list.pt holds a list, not a state dict",
    ),
}


@pytest.mark.parametrize("case", list(ACTOR_BAD_INPUT))
def test_an_actor_checks_its_flags_as_a_learner_does_one_line_nothing_written(in_tmp, capsys, case):
    """The image, gripper and data flags of an actor: one line, exit code 2, nothing written (a
    list for encoder weights was a traceback; offline data and a gripper on one dimension went
    unremarked)."""
    torch.save([1, 2], in_tmp / "list.pt")
    argv, needle = ACTOR_BAD_INPUT[case]
    flags = ["--role", "actor", "--learner-address", free_address(), "--network-timeout", "1"]
    with pytest.raises(SystemExit) as stop:
        sac.cli([*SPLIT, *flags, *argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert sorted(os.listdir(in_tmp)) == ["list.pt"]


@pytest.mark.parametrize("learner_flags, actor_flags, refused", REFUSED_ACTORS.values(), ids=REFUSED_ACTORS.keys())
def test_an_actor_the_learner_cannot_take_is_refused_at_its_hello_in_one_line(
    in_tmp, capsys, learner_flags, actor_flags, refused
):
    address = free_address()
    learner = start("learner", address, "--total-timesteps", "300", *learner_flags, cwd=in_tmp)
    try:
        with pytest.raises(SystemExit) as stop:
            sac.cli([*SPLIT, "--role", "actor", "--learner-address", address, *actor_flags])
    finally:
        learner.kill()
        out = learner.communicate()[0]
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and refused in err, err
    assert "refused an actor" in out


def test_role_both_with_an_outbox_below_the_checkpoint_interval_is_refused_before_anything_is_written(in_tmp, capsys):
    with pytest.raises(SystemExit) as stop:
        sac.cli([*SPLIT, "--role", "both", "--checkpoint-freq", "100", "--outbox-size", "50"])
    refused = "--role both: --outbox-size must be at least --checkpoint-freq (the actor keeps a checkpoint's rows)"
    assert stop.value.code == 2 and capsys.readouterr().err == f"error: {refused}\n"
    assert not (in_tmp / "runs").exists()


def test_two_actors_one_replaced_mid_run_end_with_each_row_once(in_tmp):
    """Two actors feed one learner; actor 1 is killed (kill -9) and a replacement with its id joins:
    it goes on from the learner's count for that id, so each actor's rows 0 to 199 are in the replay
    exactly once, and the demo buffer holds exactly the replay's takeovers."""
    address = free_address()
    learner = start("learner", address, "--total-timesteps", "400", "--checkpoint-freq", "100", cwd=in_tmp)
    flags = ["--total-timesteps", "200", "--control-hz", "100", "--env-kwargs", "person_episodes:2"]
    first = start("actor", address, *flags, cwd=in_tmp)
    doomed = start("actor", address, *flags, "--actor-id", "1", cwd=in_tmp)
    waited = 0.0
    while not glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt")) and waited < DEADLINE:
        time.sleep(0.1)
        waited += 0.1
    doomed.kill()
    doomed.wait()
    replacement = start("actor", address, *flags, "--actor-id", "1", cwd=in_tmp)
    finish(first)
    finish(replacement)
    out = finish(learner)
    assert out.count("actor 1 joined") == 2
    joined = int(out.split("actor 1 joined at row ")[2].split()[0].replace(",", ""))
    (replaced,) = [os.path.dirname(p) for p in glob.glob(str(in_tmp / "runs" / "*-actor1__*" / "finished"))]
    ends = [step for step, _ in scalars(replaced)["charts/episodic_length"]]  # its steps go on from its rows'
    assert ends == list(range(joined + 10, 201, 10)), (joined, ends)
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt"))
    rows, origins, demos = replay_rows(checkpoint)
    for actor in (0, 1):
        np.testing.assert_array_equal(np.sort(origins[origins[:, 0] == actor, 1]), np.arange(200))
    zero = origins[:, 0] == 0
    np.testing.assert_array_equal(rows[zero, 0], origins[zero, 1])  # actor 0's own count
    taken = rows[rows[:, -1] == 1]
    assert len(demos) == len(taken) >= 40  # both actors' first 2 episodes, the replacement's too
    np.testing.assert_array_equal(demos[np.lexsort(demos.T)], taken[np.lexsort(taken.T)])


def test_two_actors_of_one_seed_draw_apart(in_tmp):
    """Two actors given the same --seed (the page's command for a second one adds --actor-id 1
    alone) act at random until learning starts: each seeds with --seed + its id, so their random
    actions differ (the same draws would store each transition twice)."""
    address = free_address()
    learner = start("learner", address, "--total-timesteps", "120", "--checkpoint-freq", "60", cwd=in_tmp)
    flags = ["--total-timesteps", "60", "--control-hz", "200", "--learning-starts", "50"]
    actors = [start("actor", address, *flags, "--actor-id", str(i), cwd=in_tmp) for i in (0, 1)]
    for process in [*actors, learner]:
        finish(process)
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*-learner__*" / "checkpoint.pt"))
    rows, origins, _ = replay_rows(checkpoint)
    actions = [rows[origins[:, 0] == i][np.argsort(origins[origins[:, 0] == i, 1]), 2] for i in (0, 1)]
    assert len(actions[0]) == len(actions[1]) == 60  # the first 20 are at random: learning starts at row 50 of 120
    assert not np.isclose(actions[0][:20], actions[1][:20]).any(), actions


def test_two_actors_end_with_the_learner_and_its_count_is_every_row_it_stored(in_tmp):
    """Two actors at a robot's rate, each told to run far longer than the learner: the learner's end
    reaches both (an actor that missed it went on stepping with no learner until its outbox filled,
    then ended in an error), each sends the rows it stepped after its last message (they were
    dropped), and the learner stores and counts them, so the run's last step is the number of rows
    its replay holds and the number its actors stepped."""
    address = free_address()
    flags = ["--total-timesteps", "200", "--checkpoint-freq", "100", "--save-replay", "replay.npz"]
    learner = start("learner", address, *flags, cwd=in_tmp)
    flags = ["--total-timesteps", "100000", "--control-hz", "20", "--outbox-size", "200"]
    actors = [start("actor", address, *flags, "--actor-id", str(i), cwd=in_tmp) for i in (0, 1)]
    finish(learner)
    stepped = [int(re.search(r"actor \d: ([\d,]+) steps", finish(a))[1].replace(",", "")) for a in actors]
    (finished,) = glob.glob(str(in_tmp / "runs" / "*-learner__*" / "finished"))
    step = int(open(finished).read().split()[-1].replace(",", ""))
    with np.load(in_tmp / "replay.npz") as replay:
        assert step == len(replay["rewards"]) == sum(stepped) >= 200, (step, len(replay["rewards"]), stepped)


def test_an_actor_evaluates_at_its_control_rate(in_tmp, monkeypatch):
    """On a robot, an actor's final evaluation steps at --control-hz, as its training does (it ran
    flat out): each call reaches its policy a period or more after the one before. (The 10% slack
    is for the instant between the pacer's clock read and the policy's; flat out, calls are under a
    millisecond apart.)"""
    address = free_address()
    learner = start("learner", address, "--total-timesteps", "60", cwd=in_tmp)
    calls = []
    greedy_policy = sac.greedy_policy

    def timed(*args):
        policy = greedy_policy(*args)

        def action(obs):  # the time each paced call reaches the policy
            calls.append(time.monotonic())
            return policy(obs)

        return action

    monkeypatch.setattr(sac, "greedy_policy", timed)
    flags = ["--role", "actor", "--learner-address", address, "--total-timesteps", "60", "--control-hz", "50"]
    summary = sac.cli([*SPLIT, *flags, "--eval-episodes", "2"])
    finish(learner)
    assert summary["eval_return"] is not None and len(calls) == 20  # two episodes of 10 steps
    assert np.diff(calls).min() >= 0.9 / 50, np.diff(calls)


def gone(pid: int) -> bool:
    """True once process `pid` ended, within DEADLINE seconds (a zombie its new parent has yet to
    reap has ended)."""
    waited = 0.0
    while waited < DEADLINE:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
        waited += 0.1
    return False


def test_role_both_s_actor_child_sends_each_step_once_and_ends_with_the_run(in_tmp):
    """--role both on a free port (*): its actor child's steps are each in the learner's replay
    once, updates ran, and the child ended by itself (its run finished) before the learner did."""
    flags = ["--total-timesteps", "300", "--checkpoint-freq", "100", "--control-hz", "0"]
    out = finish(start("both", "tcp://127.0.0.1:*", *flags, cwd=in_tmp))
    assert "learner at tcp://127.0.0.1:*" not in out and "actor 0 joined at row 0" in out, out
    assert gone(int(out.split("its actor is process ")[1].split()[0]))
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*-both__*" / "checkpoint.pt"))
    rows, origins, _ = replay_rows(checkpoint)
    np.testing.assert_array_equal(np.sort(rows[:, 0]), np.arange(300))
    np.testing.assert_array_equal(origins, np.stack([np.zeros(300), rows[:, 0]], 1))
    assert scalars(os.path.dirname(checkpoint))["losses/qf_loss"]
    assert glob.glob(str(in_tmp / "runs" / "*-both-actor0__*" / "finished"))


@pytest.mark.parametrize("end", ["SIGTERM to the learner", "kill -9 of the learner", "kill -9 of the actor"])
def test_role_both_s_learner_and_actor_child_end_together(in_tmp, end):
    """A learner stopped by SIGTERM writes its checkpoint and ends its actor child; one killed
    (kill -9) leaves no orphan: the child sees its parent gone and ends; a child that dies ends the
    learner in one line, its data kept."""
    flags = ["--total-timesteps", "100000", "--checkpoint-freq", "100", "--control-hz", "100"]
    learner = start("both", "tcp://127.0.0.1:*", *flags, cwd=in_tmp)
    waited = 0.0
    while not glob.glob(str(in_tmp / "runs" / "*" / "checkpoint.pt")) and waited < DEADLINE:
        time.sleep(0.1)
        waited += 0.1
    line = next(line for line in learner.stdout if "its actor is process " in line)
    child = int(line.split("its actor is process ")[1])
    os.kill(child if end.endswith("actor") else learner.pid, signal.SIGTERM if "SIGTERM" in end else signal.SIGKILL)
    out = learner.communicate(timeout=DEADLINE)[0]
    assert gone(child) and gone(learner.pid)
    if end == "SIGTERM to the learner":
        assert learner.returncode == 128 + signal.SIGTERM and "continue with" in out, out
    if end == "kill -9 of the actor":
        assert learner.returncode == 2 and "error: --role both: its actor ended (exit code -9)" in out, out
        assert "checkpoint written to" in out


def test_gym_hil_s_pick_cube_runs_as_a_learner_and_an_actor_where_gym_hil_is_installed(in_tmp):
    """PandaPickCube-v0 (state and gripper) as a learner and an actor, each a process: every actor
    step is in the learner's replay once and updates ran; skipped where gym-hil is not installed."""
    pytest.importorskip("gym_hil")
    address = free_address()
    command = [
        sys.executable,
        str(ROOT / "sac_hil_serl.py"),
        "--env-id",
        *GYM_HIL["the gripper"],
        "--learner-address",
        address,
    ]
    command += [
        "--total-timesteps",
        "300",
        "--learning-starts",
        "100",
        "--batch-size",
        "16",
        "--checkpoint-freq",
        "100",
    ]
    command += ["--eval-episodes", "1", "--no-cuda"]
    processes = [spawn([*command, "--role", role], in_tmp) for role in ("learner", "actor")]
    for process in reversed(processes):
        finish(process)
    (checkpoint,) = glob.glob(str(in_tmp / "runs" / "*learner*" / "checkpoint.pt"))
    state = torch.load(checkpoint, weights_only=False)
    assert state["rb"]["size"] == 300
    origins = state["actors"]["origins"][:300].numpy()
    np.testing.assert_array_equal(np.sort(origins[:, 1]), np.arange(300))  # every actor step once
    assert scalars(os.path.dirname(checkpoint))["losses/qf_loss"]


# An env that sleeps 10 ms a step, 40 critic updates of batch 64 per update step
RATE_FLAGS = ["--env-kwargs", "sleep:0.01", "--learning-starts", "64", "--batch-size", "64", "--utd-ratio", "40"]


def control_rate(in_tmp, actors: int, record_property) -> list:
    """A learner updating flat out and `actors` actors at --control-hz 20, 300 steps each, each a
    process: [(env steps/s, p99 step period in s)] of each actor, as its last line says; the
    learner's update steps/s and policy lag, the means of what it logged once it updated, recorded
    as the docs' table row."""
    address = free_address()
    learner = start("learner", address, *RATE_FLAGS, "--total-timesteps", str(300 * actors), cwd=in_tmp)
    flags = [*RATE_FLAGS, "--total-timesteps", "300", "--control-hz", "20"]
    started = [start("actor", address, *flags, "--actor-id", str(i), cwd=in_tmp) for i in range(actors)]
    outs = [finish(actor) for actor in started]
    finish(learner)
    lines = [re.search(r"steps at ([\d.]+) env steps/s, p99 period ([\d.]+) ms", out) for out in outs]
    rates = [(float(line[1]), float(line[2]) / 1000) for line in lines]
    logged = scalars(glob.glob(str(in_tmp / "runs" / "*learner*"))[0])
    updates, lag = [
        np.mean([v for step, v in logged[tag] if step > 64])
        for tag in ("charts/updates_per_second", "charts/policy_lag")
    ]
    cells = [", ".join(f"{rate:.1f}" for rate, _ in rates), ", ".join(f"{1000 * p99:.0f} ms" for _, p99 in rates)]
    record_property("shown_in_summary", f"| learner + {actors} | {' | '.join(cells)} | {updates:.1f} | {lag:.1f} |")
    return rates


@pytest.mark.slow
def test_an_actor_holds_its_control_rate_while_the_learner_updates_flat_out_and_local_mode_does_not(
    in_tmp, record_property
):
    """An actor at --control-hz 20 keeps 20 steps/s (within 5%, p99 period under two periods) while
    its learner updates flat out (`control_rate`); in local mode the same updates slow the steps
    below 20/s. Measured on two cores shared with other work: the actor at 20.0 steps/s (p99 period
    54 ms), local mode 13.0/s."""
    ((rate, p99),) = control_rate(in_tmp, 1, record_property)
    assert abs(rate - 20) <= 1 and p99 < 0.1, (rate, p99)
    at = SPLIT.index("--network-timeout")  # a split run's flag: a local run refuses it
    local = sac.cli([*SPLIT[:at], *SPLIT[at + 2 :], *RATE_FLAGS, "--total-timesteps", "300"])
    sps = [value for step, value in scalars(local["run_dir"])["charts/SPS"] if step > 100]
    record_property("shown_in_summary", f"| local | {np.mean(sps):.1f} | | | |")
    assert np.mean(sps) < 19, sps


@pytest.mark.slow
def test_two_actors_each_hold_the_control_rate_while_their_learner_updates_flat_out(in_tmp, record_property):
    """Two actors at --control-hz 20 beside a learner updating flat out (`control_rate`) on two
    cores: each keeps 20 steps/s within 5%, its p99 period under two periods. Measured on two cores
    shared with other work: 20.0 and 20.0 steps/s, p99 periods 55 and 54 ms."""
    for rate, p99 in control_rate(in_tmp, 2, record_property):
        assert abs(rate - 20) <= 1 and p99 < 0.1, (rate, p99)
