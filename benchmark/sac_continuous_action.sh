#!/usr/bin/env bash
# SAC on the MuJoCo v5 tasks of CleanRL's benchmark (seed 000), 3 seeds, 1M steps each, run one after another.
#   bash benchmark/sac_continuous_action.sh                 # the full grid (about 3 h per run on a 2-core CPU)
#   ENVS="InvertedPendulum-v5" STEPS=30000 SEEDS="1 2 3" JOBS=2 bash benchmark/sac_continuous_action.sh
# ENVS, SEEDS, STEPS, JOBS and EXTRA override the grid (see benchmark/run.sh).
# Then: python benchmark/summarize.py runs --exp-name sac_continuous_action
ENVS=${ENVS:-"HalfCheetah-v5 Walker2d-v5 Hopper-v5 InvertedPendulum-v5 Humanoid-v5 Pusher-v5"} STEPS=${STEPS:-1000000} \
  exec bash "$(dirname "$0")/run.sh" sac_continuous_action
