"""A test task for a discrete gripper beside continuous arm actions (sac_hil_serl.py
--num-discrete-actions).

A point in the plane must reach a target, close its gripper on it and hold it. `--env-id
grasp_env:PointGrasp-v0` imports this module (tests/ is on the path in the tests and their
subprocesses), which registers the env.
"""

import gymnasium as gym
import numpy as np


class PointGrasp(gym.Env):
    """Observation (6,): the point's position, the target's offset from it, whether the gripper is
    closed, whether it holds the target. Action (3,) in [-1, 1]: a velocity (x SPEED), then the
    gripper: below -1/3 opens it, above 1/3 closes it, between leaves it. Closing an open gripper
    within RADIUS of the target grasps it; a held target moves with the point until the gripper
    opens; a closed gripper must open before it can grasp. Reward: +1 for each step that ends
    holding the target, else -0.1 x the distance to it. Episodes are cut at 50 steps.
    PointGraspFragile-v0: a close command while holding crushes the target, which ends the episode
    with a reward of -10, so holding takes the middle command."""

    SPEED, RADIUS = 0.2, 0.15

    def __init__(self, fragile: bool = False):
        self.fragile = fragile
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

    def _obs(self):
        return np.concatenate([self.pos, self.target - self.pos, [self.closed, self.holding]]).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.target = self.np_random.uniform(-1, 1, 2), self.np_random.uniform(-1, 1, 2)
        self.closed, self.holding = False, False
        return self._obs(), {}

    def step(self, action):
        action = np.clip(action, -1.0, 1.0)
        self.pos = np.clip(self.pos + self.SPEED * action[:2], -1.0, 1.0)
        if self.holding:
            self.target = self.pos.copy()
        if action[2] > 1 / 3 and self.holding and self.fragile:
            return self._obs(), -10.0, True, False, {}
        if action[2] > 1 / 3 and not self.closed:
            self.closed, self.holding = True, bool(np.linalg.norm(self.target - self.pos) < self.RADIUS)
        elif action[2] < -1 / 3:
            self.closed, self.holding = False, False
        reward = 1.0 if self.holding else -0.1 * float(np.linalg.norm(self.target - self.pos))
        return self._obs(), reward, False, False, {}


gym.register("PointGrasp-v0", entry_point=PointGrasp, max_episode_steps=50)
gym.register("PointGraspFragile-v0", entry_point=PointGrasp, max_episode_steps=50, kwargs={"fragile": True})
