#!/usr/bin/env bash
# The GPU checks of the captured updates, in one pass: the tests that need CUDA (captured against compiled against
# eager updates, and a captured run stopped and resumed, SAC's and TD3's), then benchmark/speed.py --gpu on Hopper-v5 (ours eager, compiled and captured, and
# SB3), SAC from 84 x 84 pixels, SAC with REDQ's flags, and sac_atari.py on Breakout (eager; it has no compiled path).
# Tables go to benchmark/results/speed/gpu_*.md.
# On a machine with a CUDA GPU, from the repository root:
#   bash benchmark/gpu.sh            # STEPS=6000 WARMUP=1000 by default: 3,000 timed env steps a run
# A machine without a package index needs the wheels of requirements/requirements.txt, and of pytest, pluggy and
# iniconfig, in reach of pip first.
set -euo pipefail
export MUJOCO_GL=${MUJOCO_GL:-egl}
steps=${STEPS:-6000} warmup=${WARMUP:-1000}
python3 -m pytest -o addopts="" -p no:cacheprovider -q tests/test_sac_continuous_action.py \
  tests/test_td3_continuous_action.py tests/test_common_block.py -k "on_a_gpu or whole_graphs"
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'error: no CUDA GPU that torch sees')"
mkdir -p benchmark/results/speed
python3 benchmark/speed.py --gpu --repeats 1 --steps "$steps" --warmup "$warmup" --out benchmark/results/speed/gpu_hopper.md
python3 benchmark/speed.py --gpu --repeats 1 --pairs sac --steps "$steps" --warmup "$warmup" \
  --ours-flags="--from-pixels --image-size 84 --buffer-size 100000" --out benchmark/results/speed/gpu_pixels.md
python3 benchmark/speed.py --gpu --repeats 1 --pairs sac --steps "$steps" --warmup "$warmup" \
  --ours-flags="--num-critics 10 --num-subsample-critics 2 --utd-ratio 20" --out benchmark/results/speed/gpu_redq.md
python3 benchmark/speed.py --pairs sac_atari --repeats 1 --out benchmark/results/speed/gpu_sac_atari.md
