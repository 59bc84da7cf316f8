#!/usr/bin/env bash
# ACER on the Atari games of the published tables (PPO paper Table 6 at 40M frames, SB2 zoo), 3 seeds, baselines'
# Atari setting of 16 envs, one run at a time.
#   bash benchmark/acer.sh                                                         # the full Atari grid (weeks on a CPU)
#   ENVS=CartPole-v1 STEPS=500000 EXTRA="--ent-coef 0" JOBS=2 bash benchmark/acer.sh   # SB2 zoo's CartPole settings
# ENVS, SEEDS, STEPS, JOBS and EXTRA override the grid (see benchmark/run.sh).
# Then: python benchmark/summarize.py runs --exp-name acer
ENVS=${ENVS:-"PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4"} STEPS=${STEPS:-10000000} \
  EXTRA=${EXTRA:-"--num-envs 16"} exec bash "$(dirname "$0")/run.sh" acer
