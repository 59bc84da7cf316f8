#!/usr/bin/env bash
# ACER on the Atari games of the published tables (PPO paper Table 6, SB2 zoo), 3 seeds, 10M steps, 16 envs
# (baselines); the CartPole result of the README below it.
#   bash benchmark/acer.sh                 # the full grid
#   ENVS=CartPole-v1 TOTAL_TIMESTEPS=500000 EXTRA="--ent-coef 0" WORKERS=2 bash benchmark/acer.sh  # SB2 zoo's
#   ENVS=BreakoutNoFrameskip-v4 TOTAL_TIMESTEPS=300000 SEEDS=1 \
#     EXTRA="--num-envs 16 --eval-freq 300000 --eval-episodes 3" bash benchmark/acer.sh
# ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS, EXTRA (flags for every run) and OUT override the grid; further
# arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then: python benchmark/report.py benchmark_runs
: "${ENVS:=PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4}" "${SEEDS:=1 2 3}" "${TOTAL_TIMESTEPS:=10000000}" "${WORKERS:=1}"
: "${EXTRA=--num-envs 16}" "${OUT:=benchmark_runs}"
# shellcheck disable=SC2086  # ENVS and SEEDS are lists
exec python "$(dirname "$0")/run.py" --script acer --envs $ENVS --seeds $SEEDS \
  --total-timesteps "$TOTAL_TIMESTEPS" --workers "$WORKERS" --extra "$EXTRA" --out "$OUT" "$@"
