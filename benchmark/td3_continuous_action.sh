#!/usr/bin/env bash
# TD3 on the MuJoCo v5 tasks of CleanRL's TD3 benchmark, 3 seeds, 1M steps each, run one after another.
#   bash benchmark/td3_continuous_action.sh                 # the full grid (about 2 h per run on a 2-core CPU)
#   ENVS="InvertedPendulum-v5" STEPS=50000 JOBS=2 EXTRA="--learning-starts 10000" bash benchmark/td3_continuous_action.sh
# ENVS, SEEDS, STEPS, JOBS and EXTRA override the grid (see benchmark/run.sh).
# Then: python benchmark/summarize.py runs --exp-name td3_continuous_action
ENVS=${ENVS:-"HalfCheetah-v5 Walker2d-v5 Hopper-v5 InvertedPendulum-v5 Humanoid-v5 Pusher-v5"} STEPS=${STEPS:-1000000} \
  exec bash "$(dirname "$0")/run.sh" td3_continuous_action
