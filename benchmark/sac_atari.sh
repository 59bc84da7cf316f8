#!/usr/bin/env bash
# SAC-discrete on the Atari games of CleanRL's sac_atari benchmark (seed 000), 3 seeds, 5M steps each, one at a time.
#   bash benchmark/sac_atari.sh                                                    # the full grid (days on a CPU)
#   ENVS="BreakoutNoFrameskip-v4" STEPS=100000 SEEDS=1 bash benchmark/sac_atari.sh # the 100k-step result in the README
# ENVS, SEEDS, STEPS, JOBS and EXTRA override the grid (see benchmark/run.sh).
# Then: python benchmark/summarize.py runs --exp-name sac_atari
ENVS=${ENVS:-"PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4"} STEPS=${STEPS:-5000000} \
  exec bash "$(dirname "$0")/run.sh" sac_atari
