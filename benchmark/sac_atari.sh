#!/usr/bin/env bash
# SAC-discrete on the Atari games of CleanRL's sac_atari benchmark (seed 000), 3 seeds, 5M steps each.
#   bash benchmark/sac_atari.sh                 # the full grid
#   ENVS=BreakoutNoFrameskip-v4 TOTAL_TIMESTEPS=100000 SEEDS=1 EXTRA="--eval-freq 25000" bash benchmark/sac_atari.sh
# ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS, EXTRA (flags for every run) and OUT override the grid; further
# arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then: python benchmark/report.py benchmark_runs
: "${ENVS:=PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4}" "${SEEDS:=1 2 3}" "${TOTAL_TIMESTEPS:=5000000}" "${WORKERS:=1}"
: "${EXTRA=}" "${OUT:=benchmark_runs}"
# shellcheck disable=SC2086  # ENVS and SEEDS are lists
exec python "$(dirname "$0")/run.py" --script sac_atari --envs $ENVS --seeds $SEEDS \
  --total-timesteps "$TOTAL_TIMESTEPS" --workers "$WORKERS" --extra "$EXTRA" --out "$OUT" "$@"
