#!/usr/bin/env bash
# The grid runner: bash benchmark/run.sh SCRIPT trains SCRIPT.py on every env of ENVS with every seed of SEEDS, for
# STEPS env steps each, JOBS at a time, passing EXTRA flags; each run's output goes to runs/log_SCRIPT_<env>_<seed>.txt.
# JOBS > 1 pins each training to one thread (oversubscribed threads are ruinous). benchmark/<script>.sh set the grids.
set -euo pipefail
cd "$(dirname "$0")/.."
script=$1
: "${ENVS:?}" "${SEEDS:=1 2 3}" "${STEPS:?}" "${JOBS:=1}" "${EXTRA:=}"
threads=$(( JOBS > 1 ? 1 : $(nproc) ))
for env_id in $ENVS; do
  for seed in $SEEDS; do
    echo "OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads python $script.py --env-id $env_id --seed $seed --total-timesteps $STEPS $EXTRA > runs/log_${script}_${env_id//\//-}_${seed}.txt 2>&1"
  done
done | { mkdir -p runs; xargs -P "$JOBS" -I{} bash -c "{}"; }
