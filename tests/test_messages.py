"""Each script's own flags: a value out of its range is refused in a message that names that flag
and no other, so that a user knows which one to change (the common flags' messages are in
test_common_block.py)."""

import importlib
import re

import pytest

OUT_OF_RANGE = {  # script: [(field, a value out of its range), ...]
    "sac_continuous_action": [
        ("tau", 0.0),
        ("tau", 1.5),
        ("gamma", 0.0),
        ("gamma", 1.5),
        ("policy_lr", 0.0),
        ("q_lr", -1e-3),
        ("max_grad_norm", 0.0),
        ("alpha", -0.1),
        ("batch_size", 0),
        ("num_critics", 1),
        ("utd_ratio", 0),
        ("policy_frequency", 0),
        ("target_update_interval", 0),
    ],
    "sac_hil_serl": [
        ("tau", 0.0),
        ("gamma", 1.5),
        ("policy_lr", 0.0),
        ("q_lr", 0.0),
        ("discrete_q_lr", 0.0),
        ("max_grad_norm", -1.0),
        ("alpha", -0.1),
        ("batch_size", 0),
        ("num_critics", 1),
        ("utd_ratio", 0),
        ("policy_frequency", 0),
        ("target_update_interval", 0),
        ("image_size", 8),
        ("frame_stack", 0),
        ("frame_stack", -2),
        ("offline_ratio", 1.5),
        ("offline_steps", -1),
        ("num_discrete_actions", 1),
        ("gripper_epsilon", 1.5),
        ("control_hz", -1.0),
        ("actor_id", -1),
        ("outbox_size", 0),
        ("network_timeout", 0.0),
        ("demo_buffer_size", 1),
    ],
    "td3_continuous_action": [
        ("tau", 0.0),
        ("tau", 1.5),
        ("gamma", 0.0),
        ("gamma", 1.5),
        ("learning_rate", 0.0),
        ("policy_noise", -0.1),
        ("noise_clip", -1.0),
        ("exploration_noise", -0.1),
        ("batch_size", 0),
        ("policy_frequency", 0),
    ],
    "sac_atari": [
        ("tau", 0.0),
        ("gamma", 1.5),
        ("policy_lr", 0.0),
        ("q_lr", 0.0),
        ("optimizer_eps", 0.0),
        ("batch_size", 0),
        ("update_frequency", 0),
        ("target_network_frequency", 0),
        ("alpha", -1.0),
        ("target_entropy_scale", 2.0),
    ],
    "a2c": [
        ("num_steps", 0),
        ("learning_rate", 0.0),
        ("max_grad_norm", 0.0),
        ("optimizer_eps", 0.0),
        ("vf_coef", -1.0),
        ("ent_coef", -0.1),
        ("gamma", 0.0),
        ("gamma", 1.5),
        ("gae_lambda", -0.1),
        ("gae_lambda", 1.5),
        ("rms_alpha", 1.0),
    ],
    "acer": [
        ("num_steps", 0),
        ("replay_ratio", -1),
        ("replay_start", -1),
        ("q_coef", -1.0),
        ("ent_coef", -0.1),
        ("learning_rate", 0.0),
        ("truncation_c", 0.0),
        ("max_kl", 0.0),
        ("max_grad_norm", 0.0),
        ("optimizer_eps", 0.0),
        ("gamma", 1.5),
        ("avg_decay", 1.0),
        ("rms_alpha", 1.0),
    ],
}
CASES = [(script, field, value) for script, cases in OUT_OF_RANGE.items() for field, value in cases]


def refusal(script: str, **overrides) -> str:
    """The message with which `script`'s check_args refuses its default flags changed by
    `overrides`."""
    module = importlib.import_module(script)
    with pytest.raises(module.ConfigError) as refused:
        module.check_args(module.Args(**overrides))
    return str(refused.value)


@pytest.mark.parametrize("script, field, value", CASES, ids=[f"{s}-{f}={v}" for s, f, v in CASES])
def test_a_value_out_of_range_is_refused_naming_its_flag_alone(script, field, value):
    message = refusal(script, **{field: value})
    flag = "--" + field.replace("_", "-")
    assert message.startswith(flag + " ") and set(re.findall(r"--[a-z][a-z0-9-]*", message)) == {flag}, message


@pytest.mark.parametrize(
    "script, overrides, start",
    [
        ("sac_continuous_action", dict(learning_starts=100, batch_size=256), "--batch-size (256) must be at most"),
        ("sac_continuous_action", dict(total_timesteps=1_000), "--learning-starts (5000) must lie below"),
        (
            "td3_continuous_action",
            dict(learning_starts=100, batch_size=256),
            "--learning-starts (100) must be at least",
        ),
        ("sac_atari", dict(total_timesteps=100, learning_starts=100), "--learning-starts (100) must lie below"),
        ("a2c", dict(total_timesteps=10), "--total-timesteps (10) must be at least one rollout"),
        ("acer", dict(buffer_size=10), "--buffer-size (10) must be at least one segment"),
    ],
)
def test_flags_that_bound_one_another_are_refused_naming_first_the_flag_to_change_and_both_values(
    script, overrides, start
):
    assert refusal(script, **overrides).startswith(start)


def test_frame_stack_messages_say_plainly_what_to_change():
    """--frame-stack 0, a stack beside no --from-pixels, and a stack with more channels than the
    frame is wide."""
    assert refusal("sac_hil_serl", frame_stack=0) == (
        "--frame-stack must be at least 1 (1: the newest frame alone), not 0"
    )
    assert refusal("sac_hil_serl", frame_stack=2) == (
        "--frame-stack stacks the frames of --from-pixels: add --from-pixels, or set --frame-stack 1"
    )
    assert refusal("sac_hil_serl", frame_stack=6, from_pixels=True, image_size=16) == (
        "--frame-stack must be at most 5 with 16-pixel frames (its 3 x k channels must be fewer than a frame's "
        "width), not 6"
    )
    import sac_hil_serl

    sac_hil_serl.check_args(sac_hil_serl.Args(frame_stack=5, from_pixels=True, image_size=16))  # 15 channels < 16


IGNORED = {  # a flag that another flag leaves without effect: (script, overrides, the refusal's start)
    "sac alpha beside autotune": ("sac_continuous_action", dict(alpha=0.5), "--alpha fixes the temperature"),
    "sac target entropy, no autotune": (
        "sac_continuous_action",
        dict(autotune=False, target_entropy=-1.0),
        "--target-entropy is what --autotune aims at",
    ),
    "hil alpha beside autotune": ("sac_hil_serl", dict(alpha=0.5), "--alpha fixes the temperature"),
    "hil target entropy, no autotune": (
        "sac_hil_serl",
        dict(autotune=False, target_entropy=-1.0),
        "--target-entropy is what --autotune aims at",
    ),
    "atari alpha beside autotune": ("sac_atari", dict(alpha=0.5), "--alpha fixes the temperature"),
    "atari entropy scale, no autotune": (
        "sac_atari",
        dict(autotune=False, target_entropy_scale=0.5),
        "--target-entropy-scale sets what --autotune aims at",
    ),
    "a2c lambda beside n-step": ("a2c", dict(gae_lambda=0.5), "--gae-lambda is GAE's"),
    "a2c rms alpha beside adam": ("a2c", dict(optimizer="adam", rms_alpha=0.5), "--rms-alpha is RMSprop's"),
    "acer rms alpha beside adam": ("acer", dict(optimizer="adam", rms_alpha=0.5), "--rms-alpha is RMSprop's"),
    "acer max kl, no trust region": ("acer", dict(trust_region=False, max_kl=0.5), "--max-kl bounds the trust region"),
    "a2c no normalization, n-step": ("a2c", dict(norm_adv=False), "--no-norm-adv: only GAE's advantages"),
    "acer poisson, no replay": ("acer", dict(replay_ratio=0, replay_ratio_poisson=True), "--replay-ratio-poisson"),
    "td3 noise clip, no noise": ("td3_continuous_action", dict(policy_noise=0.0, noise_clip=0.3), "--noise-clip clips"),
}


@pytest.mark.parametrize("script, overrides, start", IGNORED.values(), ids=IGNORED.keys())
def test_a_flag_that_another_leaves_without_effect_is_refused_and_accepted_where_it_acts(script, overrides, start):
    """--alpha beside --autotune (which tunes the temperature from 1) trained silently at another
    temperature than the one asked for; so the others. Each is refused, and accepted with the flag
    it needs."""
    assert refusal(script, **overrides).startswith(start)
    module = importlib.import_module(script)
    needed = {"autotune": not overrides.get("autotune", True), "advantage": "gae", "optimizer": "rmsprop"}
    needed.update(trust_region=True, replay_ratio=4, policy_noise=0.2)
    fields = {key: value for key, value in needed.items() if hasattr(module.Args, key)}
    module.check_args(module.Args(**{**overrides, **fields}))
