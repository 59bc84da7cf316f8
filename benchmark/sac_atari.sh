#!/usr/bin/env bash
# SAC-discrete on the Atari games of CleanRL's sac_atari benchmark, 3 seeds, 5M steps each, run one after another.
#   bash benchmark/sac_atari.sh                                                    # the full grid (days on a CPU)
#   ENVS="BreakoutNoFrameskip-v4" STEPS=100000 SEEDS=1 bash benchmark/sac_atari.sh # the 100k-step result in the README
# JOBS runs that many trainings at once, each pinned to one thread (oversubscribed threads are ruinous).
# Then: python benchmark/summarize.py runs --exp-name sac_atari
set -euo pipefail
cd "$(dirname "$0")/.."
ENVS=${ENVS:-"PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4"}
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-5000000}
JOBS=${JOBS:-1}
EXTRA=${EXTRA:-}
threads=$(( JOBS > 1 ? 1 : $(nproc) ))
for env_id in $ENVS; do
  for seed in $SEEDS; do
    echo "OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads python sac_atari.py --env-id $env_id --seed $seed --total-timesteps $STEPS $EXTRA > runs/log_sac_atari_${env_id//\//-}_${seed}.txt 2>&1"
  done
done | { mkdir -p runs; xargs -P "$JOBS" -I{} bash -c "{}"; }
