#!/usr/bin/env bash
# A2C on the Atari games of the published tables (SLM Lab, SB3 zoo, PPO paper Table 6), 3 seeds, 10M steps,
# baselines' Atari settings (16 envs, shared trunk); CartPole and other classic-control
# runs with the environment variables below.
#   bash benchmark/a2c.sh                 # the full grid
#   ENVS=CartPole-v1 TOTAL_TIMESTEPS=200000 SEEDS="1 2 3 4 5" EXTRA="--advantage gae" WORKERS=2 bash benchmark/a2c.sh
#   ENVS=LunarLander-v3 TOTAL_TIMESTEPS=200000 WORKERS=2 \
#     EXTRA="--gamma 0.995 --learning-rate 8.3e-4 --anneal-lr --ent-coef 1e-5" bash benchmark/a2c.sh  # SB3 zoo's
#   ENVS=BreakoutNoFrameskip-v4 TOTAL_TIMESTEPS=1000000 SEEDS=1 \
#     EXTRA="--num-envs 16 --shared-network --eval-freq 250000 --eval-episodes 3" bash benchmark/a2c.sh
# Without ENVS it runs two grids: the classic-control one (CartPole-v1, 200k steps, flags "--advantage gae"), then the
# Atari one. ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS (run.py's --workers), EXTRA (flags for every run) and OUT set one
# grid; further arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then:
# python benchmark/report.py benchmark_runs
: "${SEEDS:=1 2 3}" "${OUT:=benchmark_runs}"
grid() {  # ENVS TOTAL_TIMESTEPS EXTRA [run.py arguments]
  # shellcheck disable=SC2086  # ENVS and SEEDS are lists
  python "$(dirname "$0")/run.py" --script a2c --envs $1 --seeds $SEEDS --total-timesteps "$2" \
    ${WORKERS:+--workers "$WORKERS"} --extra "$3" --out "$OUT" "${@:4}"
}
if [ -n "${ENVS:-}" ]; then
  grid "$ENVS" "${TOTAL_TIMESTEPS:?set TOTAL_TIMESTEPS with ENVS}" "${EXTRA-}" "$@"
else
  grid "CartPole-v1" "${TOTAL_TIMESTEPS:-200000}" "${EXTRA---advantage gae}" "$@" &&
    grid "PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4" "${TOTAL_TIMESTEPS:-10000000}" "${EXTRA---num-envs 16 --shared-network}" "$@"
fi
