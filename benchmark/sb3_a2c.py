"""SB3's A2C on the same task, budget and seeds as an a2c.py run, scored the way a2c.py scores itself: the mean of 10
greedy episodes at the end (reset seeds seed + 1,000,000 + k, as a2c.py's evaluation) and the mean return of the last
100 training episodes. It puts a same-machine SB3 figure beside ours where the published one used another protocol.

    python benchmark/sb3_a2c.py --env-id LunarLander-v3 --seeds 1 2 3 --total-timesteps 200000 \
        --gamma 0.995 --learning-rate 8.3e-4 --anneal-lr --ent-coef 1e-5

Hyperparameters not given are a2c.py's defaults (8 envs, 5 steps, n-step returns (SB3: gae_lambda 1), vf 0.5, entropy
0.01, grad norm 0.5, RMSprop alpha 0.99 eps 1e-5, separate 64-64 tanh networks). Prints one line per seed and a summary.
"""

import argparse
import os
import sys

import numpy as np

EVAL_SEED_OFFSET = 1_000_000  # a2c.py's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, default=200_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=5)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--learning-rate", type=float, default=7e-4)
    parser.add_argument("--anneal-lr", action="store_true")
    parser.add_argument("--ent-coef", type=float, default=0.01)
    args = parser.parse_args()

    import gymnasium as gym
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    finals, lasts = [], []
    for seed in args.seeds:
        env = make_vec_env(args.env_id, n_envs=args.num_envs, seed=seed)
        lr = (lambda left: left * args.learning_rate) if args.anneal_lr else args.learning_rate
        model = A2C("MlpPolicy", env, learning_rate=lr, n_steps=args.num_steps, gamma=args.gamma, gae_lambda=1.0,
                    ent_coef=args.ent_coef, vf_coef=0.5, max_grad_norm=0.5, rms_prop_eps=1e-5,
                    normalize_advantage=False, seed=seed, device="cpu")
        model.learn(total_timesteps=args.total_timesteps)
        training = [info["r"] for info in model.ep_info_buffer]  # the last 100 training episodes (Monitor)
        eval_env, returns = gym.make(args.env_id), []
        for k in range(10):
            obs, _ = eval_env.reset(seed=seed + EVAL_SEED_OFFSET + k)
            done, total = False, 0.0
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_env.step(action)
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        finals.append(np.mean(returns))
        lasts.append(np.mean(training))
        print(f"seed {seed}: greedy eval {finals[-1]:.2f}, last-100 training episodes {lasts[-1]:.2f}", flush=True)
    print(f"{args.env_id} SB3 A2C, {args.total_timesteps:,} steps, seeds {args.seeds}: greedy eval "
          f"{np.mean(finals):.1f} ± {np.std(finals):.1f}, last-100 training {np.mean(lasts):.1f} ± {np.std(lasts):.1f}")


if __name__ == "__main__":
    sys.exit(main())
