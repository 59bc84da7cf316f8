#!/usr/bin/env bash
# A2C on the Atari games of the published tables (SLM Lab, SB3 zoo, PPO paper Table 6), 3 seeds, 10M steps,
# baselines' Atari settings (16 envs, shared trunk); the classic-control results of the README below it.
#   bash benchmark/a2c.sh                 # the full grid
#   ENVS=CartPole-v1 TOTAL_TIMESTEPS=200000 SEEDS="1 2 3 4 5" EXTRA="--advantage gae" WORKERS=2 bash benchmark/a2c.sh
#   ENVS=LunarLander-v3 TOTAL_TIMESTEPS=200000 WORKERS=2 \
#     EXTRA="--gamma 0.995 --learning-rate 8.3e-4 --anneal-lr --ent-coef 1e-5" bash benchmark/a2c.sh  # SB3 zoo's
#   ENVS=BreakoutNoFrameskip-v4 TOTAL_TIMESTEPS=1000000 SEEDS=1 \
#     EXTRA="--num-envs 16 --shared-network --eval-freq 500000 --eval-episodes 3" bash benchmark/a2c.sh
# ENVS, SEEDS, TOTAL_TIMESTEPS, WORKERS, EXTRA (flags for every run) and OUT override the grid; further
# arguments go to benchmark/run.py (--dry-run, --checkpoint-freq). Then: python benchmark/report.py benchmark_runs
: "${ENVS:=PongNoFrameskip-v4 BreakoutNoFrameskip-v4 BeamRiderNoFrameskip-v4}" "${SEEDS:=1 2 3}" "${TOTAL_TIMESTEPS:=10000000}" "${WORKERS:=1}"
: "${EXTRA=--num-envs 16 --shared-network}" "${OUT:=benchmark_runs}"
# shellcheck disable=SC2086  # ENVS and SEEDS are lists
exec python "$(dirname "$0")/run.py" --script a2c --envs $ENVS --seeds $SEEDS \
  --total-timesteps "$TOTAL_TIMESTEPS" --workers "$WORKERS" --extra "$EXTRA" --out "$OUT" "$@"
