#!/usr/bin/env bash
# SAC-discrete on the Atari games of CleanRL's sac_atari benchmark (CleanRL docs), 3 seeds, 5M steps each.
#   bash benchmark/sac_atari.sh                 # the full grid
#   ENVS=BreakoutNoFrameskip-v4 TOTAL_TIMESTEPS=100000 SEEDS=1 EXTRA="--eval-freq 25000" bash benchmark/sac_atari.sh
# Without ENVS it runs two grids: the classic-control one (CartPole-v1, 50k steps, flags "--learning-starts 1000
# --update-frequency 1 --target-network-frequency 1 --tau 0.005"), then the Atari one. ENVS, SEEDS, TOTAL_TIMESTEPS,
# WORKERS (run.py's --workers), EXTRA (flags for every run) and OUT set one grid; further arguments go to
# benchmark/run.py (--dry-run, --checkpoint-freq). Then: python benchmark/report.py benchmark_runs
: "${SEEDS:=1 2 3}" "${OUT:=benchmark_runs}"
grid() {  # ENVS TOTAL_TIMESTEPS EXTRA [run.py arguments]
  # shellcheck disable=SC2086  # ENVS and SEEDS are lists
  python "$(dirname "$0")/run.py" --script sac_atari --envs $1 --seeds $SEEDS --total-timesteps "$2" \
    ${WORKERS:+--workers "$WORKERS"} --extra "$3" --out "$OUT" "${@:4}"
}
if [ -n "${ENVS:-}" ]; then
  grid "$ENVS" "${TOTAL_TIMESTEPS:?set TOTAL_TIMESTEPS with ENVS}" "${EXTRA-}" "$@"
else
  grid "CartPole-v1" "${TOTAL_TIMESTEPS:-50000}" "${EXTRA---learning-starts 1000 --update-frequency 1 --target-network-frequency 1 --tau 0.005}" "$@" &&
    grid "PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4" "${TOTAL_TIMESTEPS:-5000000}" "${EXTRA-}" "$@"
fi
