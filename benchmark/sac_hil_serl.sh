#!/usr/bin/env bash
# HIL-SERL's SAC from pixels and state (--from-pixels) on InvertedPendulum-v5 and Reacher-v5, 3 seeds.
#   bash benchmark/sac_hil_serl.sh                 # the full grid
#   ENVS=InvertedPendulum-v5 TOTAL_TIMESTEPS=30000 WORKERS=2 EXTRA="--eval-freq 5000" bash benchmark/sac_hil_serl.sh
# ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS (run.py's --workers), EXTRA (flags for every run) and OUT override the grid;
# further arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then:
# python benchmark/report.py benchmark_runs
: "${ENVS:=InvertedPendulum-v5 Reacher-v5}" "${SEEDS:=1 2 3}" "${TOTAL_TIMESTEPS:=10000}"
: "${EXTRA=--from-pixels --image-size 64}" "${OUT:=benchmark_runs}"
# shellcheck disable=SC2086  # ENVS and SEEDS are lists
exec python "$(dirname "$0")/run.py" --script sac_hil_serl --envs $ENVS --seeds $SEEDS \
  --total-timesteps "$TOTAL_TIMESTEPS" ${WORKERS:+--workers "$WORKERS"} --extra "$EXTRA" --out "$OUT" "$@"
