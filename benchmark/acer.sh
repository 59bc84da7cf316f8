#!/usr/bin/env bash
# ACER on the Atari games of the published tables (PPO paper Table 6, SB2 zoo), 3 seeds, 10M steps, 16 envs
# (baselines); CartPole with the environment variables below.
#   bash benchmark/acer.sh                 # the full grid
#   ENVS=CartPole-v1 TOTAL_TIMESTEPS=500000 EXTRA="--ent-coef 0" WORKERS=2 bash benchmark/acer.sh  # SB2 zoo's
#   ENVS=BreakoutNoFrameskip-v4 TOTAL_TIMESTEPS=300000 SEEDS=1 \
#     EXTRA="--num-envs 16 --eval-freq 300000 --eval-episodes 3" bash benchmark/acer.sh
# Without ENVS it runs two grids: the classic-control one (CartPole-v1, 500k steps, flags "--ent-coef 0"), then the
# Atari one. ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS (run.py's --workers), EXTRA (flags for every run) and OUT set one
# grid; further arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then:
# python benchmark/report.py benchmark_runs
: "${SEEDS:=1 2 3}" "${OUT:=benchmark_runs}"
grid() {  # ENVS TOTAL_TIMESTEPS EXTRA [run.py arguments]
  # shellcheck disable=SC2086  # ENVS and SEEDS are lists
  python "$(dirname "$0")/run.py" --script acer --envs $1 --seeds $SEEDS --total-timesteps "$2" \
    ${WORKERS:+--workers "$WORKERS"} --extra "$3" --out "$OUT" "${@:4}"
}
if [ -n "${ENVS:-}" ]; then
  grid "$ENVS" "${TOTAL_TIMESTEPS:?set TOTAL_TIMESTEPS with ENVS}" "${EXTRA-}" "$@"
else
  grid "CartPole-v1" "${TOTAL_TIMESTEPS:-500000}" "${EXTRA---ent-coef 0}" "$@" &&
    grid "PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4" "${TOTAL_TIMESTEPS:-10000000}" "${EXTRA---num-envs 16}" "$@"
fi
