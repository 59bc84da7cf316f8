#!/usr/bin/env bash
# SAC on the MuJoCo grid of CleanRL's benchmark (CleanRL docs): 6 envs, 3 seeds, 1M steps each.
#   bash benchmark/sac_continuous_action.sh                 # the full grid
#   ENVS=InvertedPendulum-v5 TOTAL_TIMESTEPS=30000 WORKERS=2 EXTRA="--eval-freq 5000" bash benchmark/sac_continuous_action.sh
# ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS (run.py's --workers), EXTRA (flags for every run) and OUT override the grid;
# further arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then:
# python benchmark/report.py benchmark_runs
: "${ENVS:=HalfCheetah-v5 Walker2d-v5 Hopper-v5 InvertedPendulum-v5 Humanoid-v5 Pusher-v5}" "${SEEDS:=1 2 3}" "${TOTAL_TIMESTEPS:=1000000}"
: "${EXTRA=}" "${OUT:=benchmark_runs}"
# shellcheck disable=SC2086  # ENVS and SEEDS are lists
exec python "$(dirname "$0")/run.py" --script sac_continuous_action --envs $ENVS --seeds $SEEDS \
  --total-timesteps "$TOTAL_TIMESTEPS" ${WORKERS:+--workers "$WORKERS"} --extra "$EXTRA" --out "$OUT" "$@"
