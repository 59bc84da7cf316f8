#!/usr/bin/env bash
# The GPU checks of the captured updates, in one pass, each stage under its own time limit so that one that fails or
# runs over leaves the others' results. First the timing stages, each alone on the machine (twelve paused training
# processes holding the GPU's memory slowed a captured SAC run by a fifth):
#   cheetah    benchmark/speed.py --gpu on HalfCheetah-v4 (LeanRL's benchmark): ours eager, compiled and captured,
#              and SB3, for SAC and TD3 (gpu_halfcheetah.md);
#   hopper     the same on Hopper-v5 (gpu_hopper.md);
#   concurrent 1, 4, 8 and 12 captured SAC runs on Hopper-v5 at once, a process each (gpu_concurrent.md);
#   pixels     SAC from 84 x 84 pixels (gpu_pixels.md); redq: REDQ's flags (gpu_redq.md);
#   sac_atari  sac_atari.py on Breakout, eager: it has no compiled path (gpu_sac_atari.md).
# Then, together:
#   grid       SAC and TD3 captured (--compile) on Hopper-v4, Walker2d-v4 and HalfCheetah-v4 (benchmark/run.py, one
#              thread a run, four runs at once: the concurrent stage's best total), stopped GRID_SECONDS after its
#              start; run again, it resumes each run from its checkpoint. Its default, 2 seeds of 50,000 steps, is
#              sized by that stage on an H200 (4 runs at once totalled 1,693 env steps/s) to end within 9 minutes;
#   tests      the tests that need CUDA: each edit's 100 updates compiled and captured against eager, captured against
#              compiled against eager updates, a captured run stopped and resumed, the NaN guard.
# On a machine with a CUDA GPU, from the repository root:
#   bash benchmark/gpu.sh      # tables and logs in RESULTS (default: benchmark_runs/gpu, which git ignores)
#   STAGES="tests hopper" bash benchmark/gpu.sh          # some stages only
#   STAGES="grid" GRID_SEEDS="1 2 3 4 5" GRID_STEPS=300000 GRID_SECONDS=3600 bash benchmark/gpu.sh
# Then, anywhere: python benchmark/report.py RESULTS/grid
# On an H200 with a 16-core host the timing stages take about 17 minutes (cheetah about 4, hopper 4.5, concurrent 3),
# the tests 2.5 and the grid 9; split them with STAGES where a call is limited to less.
# A machine without a package index needs the wheels of requirements/requirements.txt, and of pytest, pluggy and
# iniconfig, in reach of pip first; with pytest-xdist's and execnet's too, the tests run on 6 workers (131 s on an
# H200).
set -uo pipefail
export MUJOCO_GL=${MUJOCO_GL:-egl}
out=$(realpath -m "${RESULTS:-benchmark_runs/gpu}") start=$SECONDS
steps=${STEPS:-3800} warmup=${WARMUP:-300} grid_seconds=${GRID_SECONDS:-540} grid_steps=${GRID_STEPS:-50000}
grid_seeds=${GRID_SEEDS:-1 2} stages=" ${STAGES:-cheetah hopper concurrent pixels redq sac_atari grid tests} "
mkdir -p "$out"
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'error: no CUDA GPU that torch sees')" || exit 2

status=0 grid=()
trap '[ ${#grid[@]} -gt 0 ] && kill "${grid[@]}" 2>/dev/null' EXIT  # no learning run outlives the script
stage() {  # stage NAME LIMIT COMMAND...: the command's output in NAME.log, and its last lines here
  local name=$1 limit=$2 code; shift 2
  [[ $stages == *" $name "* ]] || return 0
  echo "== $name, at $((SECONDS - start)) s, for at most $limit s"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1; code=$?
  echo "== $name: exit $code, at $((SECONDS - start)) s"; tail -n 16 "$out/$name.log"
  [ "$code" -eq 0 ] || status=1
}

stage cheetah 360 python3 benchmark/speed.py --gpu --repeats 1 --steps "$steps" --warmup "$warmup" \
  --env-id HalfCheetah-v4 --out "$out/gpu_halfcheetah.md"
stage hopper 360 python3 benchmark/speed.py --gpu --repeats 1 --steps "$steps" --warmup "$warmup" \
  --out "$out/gpu_hopper.md"
stage concurrent 420 python3 benchmark/speed.py --gpu --pairs sac --concurrent 1 4 8 12 --steps 4800 \
  --warmup "$warmup" --out "$out/gpu_concurrent.md"
stage pixels 150 python3 benchmark/speed.py --gpu --repeats 1 --pairs sac_hil_serl --steps 2600 --warmup 100 \
  --ours-flags="--from-pixels --image-size 84 --buffer-size 100000" --out "$out/gpu_pixels.md"
stage redq 150 python3 benchmark/speed.py --gpu --repeats 1 --pairs sac --steps 2300 --warmup 100 \
  --ours-flags="--num-critics 10 --num-subsample-critics 2 --utd-ratio 20" --out "$out/gpu_redq.md"
stage sac_atari 45 python3 benchmark/speed.py --pairs sac_atari --repeats 1 --out "$out/gpu_sac_atari.md"

grid_start=$SECONDS
if [[ $stages == *" grid "* ]]; then
  for script in sac_continuous_action td3_continuous_action; do
    TORCHINDUCTOR_COMPILE_THREADS=1 python3 benchmark/run.py --script $script --envs Hopper-v4 Walker2d-v4 \
      HalfCheetah-v4 --seeds $grid_seeds --workers 2 --total-timesteps "$grid_steps" --extra "--compile" \
      --out "$out/grid" > "$out/grid_$script.log" 2>&1 &
    grid+=($!)
  done
fi
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")  # pytest-xdist where it is installed
stage tests 300 python3 -m pytest -o addopts="" -p no:cacheprovider $workers -v --durations=0 \
  tests/test_sac_continuous_action.py tests/test_sac_hil_serl.py tests/test_td3_continuous_action.py \
  tests/test_common_block.py tests/test_compile.py -k on_a_gpu
while [ ${#grid[@]} -gt 0 ] && [ $((SECONDS - grid_start)) -lt "$grid_seconds" ] && kill -0 "${grid[@]}" 2>/dev/null
do
  sleep 2
done
if [ ${#grid[@]} -gt 0 ]; then  # stopped runs write checkpoints; the same command resumes them
  kill "${grid[@]}" 2>/dev/null; wait "${grid[@]}"
  echo "== grid stopped at $((SECONDS - start)) s"
  for log in "$out"/grid/*/*/seed_*/log.txt; do
    echo "== ${log#"$out"/}"; tr '\r' '\n' < "$log" | grep -a "eval/episodic_return\|SPS\|rror" | tail -n 3
  done
fi
echo "== done at $((SECONDS - start)) s"
exit $status
