#!/usr/bin/env bash
# TD3 on the MuJoCo v5 tasks of CleanRL's TD3 benchmark, 3 seeds, 1M steps each, run one after another.
#   bash benchmark/td3_continuous_action.sh                 # the full grid (about 3 h per run on a 2-core CPU)
#   ENVS="InvertedPendulum-v5" STEPS=30000 SEEDS="1 2 3" JOBS=2 bash benchmark/td3_continuous_action.sh
# JOBS runs that many trainings at once, each pinned to one thread (oversubscribed threads are ruinous).
# Then: python benchmark/summarize.py runs --exp-name td3_continuous_action
set -euo pipefail
cd "$(dirname "$0")/.."
ENVS=${ENVS:-"HalfCheetah-v5 Walker2d-v5 Hopper-v5 InvertedPendulum-v5 Humanoid-v5 Pusher-v5"}
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-1000000}
JOBS=${JOBS:-1}
EXTRA=${EXTRA:-}
threads=$(( JOBS > 1 ? 1 : $(nproc) ))
for env_id in $ENVS; do
  for seed in $SEEDS; do
    echo "OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads python td3_continuous_action.py --env-id $env_id --seed $seed --total-timesteps $STEPS $EXTRA > runs/log_td3_${env_id}_${seed}.txt 2>&1"
  done
done | { mkdir -p runs; xargs -P "$JOBS" -I{} bash -c "{}"; }
