"""A scripted person for human-in-the-loop training (sac_hil_serl.py), and a task where one helps.

`ScriptedPerson` wraps any env and takes over by the protocol of gym-hil's envs: in the first
`episodes` training episodes it runs its expert's action instead of the policy's and reports it in
info["teleop_action"], with info["is_intervention"] True; elsewhere info["is_intervention"] is
False. It stays out of evaluation episodes, which sac_hil_serl.py resets with seeds of 1,000,000
and above (EVAL_SEED_OFFSET), so that eval/episodic_return measures the policy alone.

`PointReach-v0` is a sparse task: a point starts in a small square around (-0.4, -0.4) and earns a
reward of 1, which ends the episode, only within RADIUS of the goal (0.4, 0.4); episodes are cut at
100 steps. Uniform random actions almost never get there. Its `person_episodes` keyword puts a
scripted person in the loop: `--env-id hil_env:PointReach-v0 --env-kwargs person_episodes:10`
(tests/ on the path, as in the tests and their subprocesses).

python tests/hil_env.py OUT.npz EPISODES writes EPISODES of the expert as --offline-data.
"""

import ctypes
import functools
import sys
import time

import gymnasium as gym
import numpy as np

EVAL_SEED_OFFSET = 1_000_000  # sac_hil_serl.py resets evaluation episodes with seeds from here on


class ScriptedPerson(gym.Wrapper):
    """Takes over with `expert(env, obs)`'s actions, as a person with a gamepad would, by gym-hil's
    protocol (info["is_intervention"] and info["teleop_action"]): for the first `episodes` training
    episodes, and with a `budget` of steps, after the first `wait` training steps, for HOLD steps
    each time the policy's action strays: points away from the expert's (a negative dot product)."""

    HOLD = 5

    def __init__(self, env, expert, episodes: int, budget: int = 0, wait: int = 0):
        super().__init__(env)
        self.expert, self.episodes, self.budget, self.wait = expert, episodes, budget, wait
        self.started, self.steps, self.driving, self.held = 0, 0, False, 0

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.training = seed is None or seed < EVAL_SEED_OFFSET
        self.driving = self.training and self.started < self.episodes
        self.started += self.training
        self.obs, self.held = obs, 0
        return obs, info

    def step(self, action):
        expert = self.expert(self.env, self.obs)
        strays = float(np.dot(action, expert)) < 0
        if self.training and not self.driving and self.held == 0 and strays and self.steps >= self.wait:
            self.held = min(self.HOLD, self.budget)
        takes_over = self.driving or self.held > 0
        if self.held:
            self.held -= 1
            self.budget -= 1
        self.steps += self.training
        obs, reward, terminated, truncated, info = self.env.step(expert if takes_over else action)
        self.obs = obs
        info.update(is_intervention=takes_over)
        if takes_over:
            info.update(teleop_action=expert)
        return obs, reward, terminated, truncated, info


class PointReach(gym.Env):
    """Observation (2,): the point's position. Action (2,) in [-1, 1]: a velocity (x SPEED). The
    point starts uniformly in a 0.2-wide square around (-0.4, -0.4); reward 1 and the episode's end
    within RADIUS of the goal (0.4, 0.4), else 0."""

    SPEED, RADIUS = 0.05, 0.1
    GOAL = np.array([0.4, 0.4])

    def __init__(self, pointer: bool = False):
        self.pointer = ctypes.pointer(ctypes.c_int(0)) if pointer else None  # as a renderer's: no pickle
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.5, -0.3, 2)
        return self.pos.astype(np.float32), {}

    def step(self, action):
        self.pos = np.clip(self.pos + self.SPEED * np.clip(action, -1.0, 1.0), -1.0, 1.0)
        reached = bool(np.linalg.norm(self.pos - self.GOAL) < self.RADIUS)
        return self.pos.astype(np.float32), float(reached), reached, False, {}


class Ticker(gym.Env):
    """For the actor-learner tests: observation (2,), the steps this env took over all its episodes
    (so each row names its step) and the step within the episode; action (1,) in [-1, 1], reward
    -|a|. Each step sleeps `sleep` seconds, as a robot's would."""

    observation_space = gym.spaces.Box(0.0, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, sleep: float = 0.0):
        self.sleep, self.count, self.t = sleep, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.count, self.t], np.float32), {}

    def step(self, action):
        time.sleep(self.sleep)
        self.count += 1
        self.t += 1
        return np.array([self.count, self.t], np.float32), -float(np.abs(action).sum()), False, False, {}


def ticker(sleep: float = 0.0, person_episodes: int = 0, episode_steps: int = 10):
    """Ticker-v0 of `episode_steps` steps an episode; a person drives its first `person_episodes`
    training episodes with action 0.5."""
    env = gym.wrappers.TimeLimit(Ticker(sleep), max_episode_steps=episode_steps)
    return ScriptedPerson(env, half_ahead, person_episodes) if person_episodes else env


def half_ahead(env, obs) -> np.ndarray:
    """Ticker's person: action 0.5 (a module function: the env pickles and resumes exactly)."""
    return np.full(1, 0.5, np.float32)


def reach_expert(env, obs, noise: float = 0.0) -> np.ndarray:
    """Straight at the goal, at full speed until the last step; `noise`: a person's unsteady hand,
    Gaussian of that standard deviation from the env's own generator."""
    action = np.clip((PointReach.GOAL - obs) / PointReach.SPEED, -1.0, 1.0)
    action = action + env.unwrapped.np_random.normal(0.0, noise, 2) if noise else action
    return np.clip(action, -1.0, 1.0).astype(np.float32)


class Faulty(gym.Wrapper):
    """For the bad-input tests: a person's report gone wrong (`fault`: "shape", "outside" or "flag"
    on every takeover), a reward that is NaN ("nan"), each from step `fault_step` on, or a nested
    observation with a leaf that is neither image nor vector ("leaf")."""

    def __init__(self, env, fault: str, fault_step: int = 0):
        super().__init__(env)
        self.fault, self.fault_step, self.steps = fault, fault_step, 0
        if fault == "leaf":
            space = env.observation_space
            self.observation_space = gym.spaces.Dict(pos=space, extra=gym.spaces.Dict(mode=gym.spaces.Discrete(3)))

    def observation(self, obs):
        return {"pos": obs, "extra": {"mode": 0}} if self.fault == "leaf" else obs

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps <= self.fault_step:
            return self.observation(obs), reward, terminated, truncated, info
        reward = float("nan") if self.fault == "nan" else reward
        if info.get("is_intervention"):
            faults = {"shape": {"teleop_action": np.full(3, 0.5)}, "outside": {"teleop_action": np.array([3.0, 0.0])}}
            info.update(faults.get(self.fault, {"is_intervention": "yes"} if self.fault == "flag" else {}))
        return self.observation(obs), reward, terminated, truncated, info


def point_reach(
    person_episodes: int = 0,
    person_budget: int = 0,
    person_wait: int = 0,
    noise: float = 0.3,
    fault: str = "",
    fault_step: int = 0,
    pointer: bool = False,
):
    env = gym.wrappers.TimeLimit(PointReach(pointer), max_episode_steps=100)
    expert = functools.partial(reach_expert, noise=noise)
    helped = person_episodes or person_budget
    env = ScriptedPerson(env, expert, person_episodes, person_budget, person_wait) if helped else env
    return Faulty(env, fault, fault_step) if fault else env


def expert_data(episodes: int, seed: int = 0, noise: float = 0.3) -> dict:
    """`episodes` of the expert on PointReach-v0 as --offline-data's arrays."""
    env, rows = point_reach(), []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done = False
        while not done:
            action = reach_expert(env, obs, noise)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            rows.append((obs, action, reward, next_obs, terminated))
            obs, done = next_obs, terminated or truncated
    obs, actions, rewards, next_obs, terminations = (np.array(column, dtype=np.float32) for column in zip(*rows))
    return dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminations=terminations)


gym.register("PointReach-v0", point_reach)
gym.register("Ticker-v0", ticker)

if __name__ == "__main__":
    np.savez(sys.argv[1], **expert_data(int(sys.argv[2])))
