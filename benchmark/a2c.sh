#!/usr/bin/env bash
# A2C on the Atari games of the published tables (SLM Lab, SB3 zoo, PPO paper Table 6: 10M-40M frames), 3 seeds,
# baselines' Atari settings (16 envs, shared trunk), one run at a time.
#   bash benchmark/a2c.sh                                                          # the full Atari grid (weeks on a CPU)
#   ENVS=CartPole-v1 STEPS=200000 SEEDS="1 2 3 4 5" EXTRA="--advantage gae" JOBS=2 bash benchmark/a2c.sh
#   ENVS=LunarLander-v3 STEPS=200000 EXTRA="--gamma 0.995 --learning-rate 8.3e-4 --anneal-lr --ent-coef 1e-5" \
#     JOBS=2 bash benchmark/a2c.sh                                                  # SB3 zoo's LunarLander settings
# ENVS, SEEDS, STEPS, JOBS and EXTRA override the grid (see benchmark/run.sh).
# Then: python benchmark/summarize.py runs --exp-name a2c
ENVS=${ENVS:-"PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4"} STEPS=${STEPS:-10000000} \
  EXTRA=${EXTRA:-"--num-envs 16 --shared-network"} exec bash "$(dirname "$0")/run.sh" a2c
