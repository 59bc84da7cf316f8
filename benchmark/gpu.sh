#!/usr/bin/env bash
# The GPU checks of the captured updates, in one pass, each stage under its own time limit so that one that fails or
# runs over leaves the others' results:
#   1. benchmark/speed.py --gpu on Hopper-v5: ours eager, compiled and captured, and SB3 (gpu_hopper.md);
#   2. SAC from 84 x 84 pixels (gpu_pixels.md) and with REDQ's flags (gpu_redq.md), ours only;
#   3. sac_atari.py on Breakout, eager: it has no compiled path (gpu_sac_atari.md);
#   4. captured runs of SAC and TD3 on Hopper-v5 (learn_*.log, with their runs/), started in the background, and
#      meanwhile the tests that need CUDA: captured against compiled against eager updates, a captured run stopped
#      and resumed, the NaN guard (tests.log). The learning runs are stopped at DEADLINE seconds from the start.
# The timing stages run alone on the machine; the learning runs share it with the tests only.
# On a machine with a CUDA GPU, from the repository root:
#   bash benchmark/gpu.sh      # Hopper runs of 4,500 env steps, timed from 2,500; tables and logs in RESULTS
#                              (default: benchmark_runs/gpu, which git ignores)
#   STAGES="tests" DEADLINE=400 bash benchmark/gpu.sh   # some stages only (hopper pixels redq sac_atari tests)
# All stages take about 18 minutes on an H100 with a 16-core host; split them where a call is limited to less.
# A machine without a package index needs the wheels of requirements/requirements.txt, and of pytest, pluggy and
# iniconfig, in reach of pip first.
set -uo pipefail
export MUJOCO_GL=${MUJOCO_GL:-egl}
out=$(realpath -m "${RESULTS:-benchmark_runs/gpu}") root=$PWD start=$SECONDS
steps=${STEPS:-4500} warmup=${WARMUP:-500} deadline=${DEADLINE:-1080}
learn_steps=${LEARN_STEPS:-100000} learn_seeds=${LEARN_SEEDS:-1} stages=" ${STAGES:-hopper pixels redq sac_atari tests} "
mkdir -p "$out"
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'error: no CUDA GPU that torch sees')" || exit 2

status=0 pids=()
trap '[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null' EXIT  # no learning run outlives the script
stage() {  # stage NAME LIMIT COMMAND...: the command's output in NAME.log, and its last lines here
  local name=$1 limit=$2 code; shift 2
  [[ $stages == *" $name "* ]] || return 0
  echo "== $name, at $((SECONDS - start)) s, for at most $limit s"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1; code=$?
  echo "== $name: exit $code, at $((SECONDS - start)) s"; tail -n 12 "$out/$name.log"
  [ "$code" -eq 0 ] || status=1
}

stage hopper 420 python3 benchmark/speed.py --gpu --repeats 1 --steps "$steps" --warmup "$warmup" \
  --out "$out/gpu_hopper.md"
stage pixels 150 python3 benchmark/speed.py --gpu --repeats 1 --pairs sac_hil_serl --steps 2600 --warmup 100 \
  --ours-flags="--from-pixels --image-size 84 --buffer-size 100000" --out "$out/gpu_pixels.md"
stage redq 150 python3 benchmark/speed.py --gpu --repeats 1 --pairs sac --steps 2300 --warmup 100 \
  --ours-flags="--num-critics 10 --num-subsample-critics 2 --utd-ratio 20" --out "$out/gpu_redq.md"
stage sac_atari 45 python3 benchmark/speed.py --pairs sac_atari --repeats 1 --out "$out/gpu_sac_atari.md"

[[ $stages == *" tests "* ]] || learn_seeds=""
for seed in $learn_seeds; do
  for script in sac_continuous_action td3_continuous_action; do
    mkdir -p "$out/learn_${script}_$seed"
    (cd "$out/learn_${script}_$seed" && OMP_NUM_THREADS=2 exec python3 "$root/$script.py" --env-id Hopper-v5 \
      --compile --total-timesteps "$learn_steps" --seed "$seed" > "$out/learn_${script}_$seed.log" 2>&1) &
    pids+=($!)
  done
done
left=$((deadline - (SECONDS - start)))
if [ "$left" -gt 30 ]; then
  stage tests $((left - 10)) python3 -m pytest -o addopts="" -p no:cacheprovider -v --durations=0 \
    tests/test_sac_continuous_action.py tests/test_sac_hil_serl.py tests/test_td3_continuous_action.py \
    tests/test_common_block.py tests/test_compile.py -k on_a_gpu
elif [[ $stages == *" tests "* ]]; then
  echo "== tests skipped: $left s left of DEADLINE"; status=1
fi
while [ ${#pids[@]} -gt 0 ] && [ $((SECONDS - start)) -lt "$deadline" ] && kill -0 "${pids[@]}" 2>/dev/null; do sleep 2; done
if [ ${#pids[@]} -gt 0 ]; then kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}"; fi  # stopped runs write checkpoints
for log in "$out"/learn_*.log; do
  [ -e "$log" ] || continue; echo "== $log"; tr '\r' '\n' < "$log" | grep -a "eval/episodic_return\|SPS\|error" | tail -n 12
done
echo "== done at $((SECONDS - start)) s"
exit $status
