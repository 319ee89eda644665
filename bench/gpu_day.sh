#!/usr/bin/env bash
# Every GPU figure this project needs, within DEADLINE seconds (default 480), in order of value:
#   1. warp_compile: Warp's CUDA kernels of quadrant and randomwalls, compiled in two parallel
#      processes (bench/warp_speed.py at a few worlds), compile time of each;
#   2. warp_speed: the Warp game's step rate, quadrant at 1,024 / 4,096 / 16,384 worlds and
#      randomwalls at 1,024 / 8,192, against the C game per core (bench/warp_speed.py);
#   3. warp_pod: the Warp pod at 4,096 worlds with learning (bench/pod_speed.py): env and trained
#      frames/s, the sim / act / learn split, host syncs per step, peak GPU memory;
#   4. c_pod: the pod with the C game and its learner on the device (pod.physics=c);
#   5. learn_chase: the chase seeker learning on the Warp pod (bench/learn_chase.py);
#   6. batch_memory: peak GPU memory of one PPO update of the paper's batch, 64,000 chunks of 10
#      steps, or the largest that fits and the accumulation that reaches it.
# First the interpreter is checked: without torch it stops within 10 s with one line naming
# it; then the stack's versions (torch, numpy, numba, llvmlite, numba-cuda, Warp and whether it
# has its CPU compiler, mujoco, the CUDA device) are printed and head the report. Each step gets
# a share of the time left (its weight over the weights of the steps still to run), is stopped
# at that cap, and the next one runs whatever happened; a step with less than MIN_STEP_S seconds
# left is skipped and named, and so is a step that needs Warp where Warp cannot run (not
# installed, or DEVICE=cpu without Warp's CPU compiler, as from the CUDA-only kit). The report,
# REPORT_DIR/gpu-<date>[-partN].md, holds the machine, each step's command, exit status, seconds
# and output tail; each step's full log is next to it in gpu-<date>[-partN]-logs/. The exit
# status is 0 when at least one step succeeded, 1 when none did, 3 when the interpreter cannot.
#
#   bash bench/gpu_day.sh                       # or: make gpu-day
#   PARTS=1 DEADLINE=150 bash bench/gpu_day.sh  # only the kit's part 1 installed: no Warp
#   PARTS=2 DEADLINE=480 bash bench/gpu_day.sh  # the steps that need Warp (the kit's part 2)
#   DEVICE=cpu DEADLINE=300 bash bench/gpu_day.sh   # rehearse the plumbing at tiny sizes
#   FULL=1 bash bench/gpu_day.sh                # the long version (about 35 minutes)
#   CHECK=1 PY=/opt/torch/.venv/bin/python3 bash bench/gpu_day.sh   # only the stack's versions
#
# Settings: DEADLINE, DEVICE (cuda | cpu), PARTS (1 | 2 | empty: all), REPORT_DIR (default
# docs/benchmarks), PY (default .venv/bin/python, else python3; on the GPU node name its
# interpreter with torch, /opt/torch/.venv/bin/python3), FULL, CHECK. It runs from a checkout
# with the packages installed anywhere on PYTHONPATH (bench/offline_kit.py's kit): the checkout
# is put first on PYTHONPATH, nothing is installed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PY:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export MUJOCO_GL=${MUJOCO_GL:-egl}
export WANDB_MODE=disabled
DEADLINE=${DEADLINE:-480}
DEVICE=${DEVICE:-cuda}
PARTS=${PARTS:-}
FULL=${FULL:-}
CHECK=${CHECK:-}
REPORT_DIR=${REPORT_DIR:-docs/benchmarks}
DATE=$(date -u +%Y-%m-%d)
NAME="gpu-$DATE${PARTS:+-part$PARTS}"
REPORT="$REPORT_DIR/$NAME.md"
LOGS="$REPORT_DIR/$NAME-logs"
CLOCK_START=$SECONDS
# Warp prints this once per process on a machine without an NVIDIA driver: the report keeps one
CUDA_WARNING='NVIDIA CUDA driver'

if ! [[ "$DEADLINE" =~ ^[0-9]+$ ]] || [ "$DEADLINE" -lt 10 ]; then
  echo "gpu_day.sh: DEADLINE must be whole seconds, at least 10; got '$DEADLINE'" >&2; exit 2
fi
case "$PARTS" in
  1) STEPS="c_pod batch_memory" ;;
  2) STEPS="warp_compile warp_speed_quadrant warp_speed_randomwalls warp_pod learn_chase" ;;
  "") STEPS="warp_compile warp_speed_quadrant warp_speed_randomwalls warp_pod c_pod learn_chase
             batch_memory" ;;
  *) echo "gpu_day.sh: PARTS must be 1, 2 or empty (all steps), got '$PARTS'" >&2; exit 2 ;;
esac
case "$DEVICE" in
  cuda | cuda:*) MIN_STEP_S=${MIN_STEP_S:-20}
    Q_WORLDS="1024 4096 16384"; RW_WORLDS="1024 8192"; POD_WORLDS=4096; C_POD_WORLDS=512
    CHASE_WORLDS=1024; CHUNKS=64000; C_MAX=1024; COMPILE_WORLDS=64 ;;
  cpu) MIN_STEP_S=${MIN_STEP_S:-10}
    Q_WORLDS="16 64"; RW_WORLDS="16"; POD_WORLDS=16; C_POD_WORLDS=16
    CHASE_WORLDS=16; CHUNKS=32; C_MAX=64; COMPILE_WORLDS=4 ;;
  *) echo "gpu_day.sh: DEVICE must be cuda, cuda:N or cpu, got '$DEVICE'" >&2; exit 2 ;;
esac
# The interpreter first: find_spec answers without importing anything, so a missing torch is
# named at once instead of as one ModuleNotFoundError per step.
if ! command -v "$PY" > /dev/null 2>&1; then
  echo "gpu_day.sh: PY=$PY is not a command here; give PY the interpreter that holds torch" >&2
  exit 3
fi
timeout 10 "$PY" -c 'import importlib.util as u, sys; sys.exit(3 if u.find_spec("torch") is None else 0)'
rc=$?
case $rc in
  0) ;;
  3) echo "gpu_day.sh: $PY (Python $("$PY" -c 'import sys; print(sys.version.split()[0])'))" \
       "has no torch: give PY the interpreter that holds torch" \
       "(on the GPU node /opt/torch/.venv/bin/python3)" >&2
     exit 3 ;;
  124 | 137) echo "gpu_day.sh: $PY did not say within 10 s whether it has torch" >&2; exit 3 ;;
  *) echo "gpu_day.sh: $PY could not run (exit $rc); give PY the interpreter that holds torch" >&2
     exit 3 ;;
esac

# The stack, imported: what each package is and where it comes from (the kit's folder or the
# site), whether Warp has its CPU compiler, whether CUDA is visible. Its last line is for this
# script: GPU_DAY_STACK torch=0|1 warp=none|cpu|nocpu|broken.
stack() {
  timeout 120 "$PY" - <<'EOF' 2>&1
import importlib, importlib.metadata, importlib.util, sys
print("python", sys.version.split()[0], sys.executable)
# (module, distribution, import it): numba-cuda by its metadata only, importing it may start CUDA
for module, dist, load in (
    ("hns_train", None, False), ("torch", "torch", True), ("numpy", "numpy", True),
    ("numba", "numba", True), ("llvmlite", "llvmlite", True), ("numba_cuda", "numba-cuda", False),
    ("mujoco", "mujoco", False), ("mujoco_warp", "mujoco-warp", False),
    ("warp", "warp-lang", False), ("zmq", "pyzmq", False), ("wandb", "wandb", False),
    ("imageio_ffmpeg", "imageio-ffmpeg", False),
):
    spec = importlib.util.find_spec(module)
    if spec is None:
        print(f"{module}: not installed")
        continue
    try:
        version = importlib.metadata.version(dist) if dist else "checkout"
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    if load:  # numba refuses to import with a numpy newer than it knows: say so here
        try:
            version = importlib.import_module(module).__version__
        except Exception as err:
            print(f"{module} {version} {spec.origin}: not importable ({type(err).__name__}: {err})")
            continue
    print(f"{module} {version} {spec.origin}")
torch_ok, warp_state = 0, "none"
try:
    import torch

    torch_ok = 1
    cuda = torch.cuda.is_available()
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    print(f"torch CUDA {torch.version.cuda}; CUDA visible: {cuda} {', '.join(names)}".rstrip())
except Exception as err:
    print(f"torch: not importable ({type(err).__name__}: {err})")
if importlib.util.find_spec("warp") is not None:
    try:
        import warp

        warp.init()  # its banner names the CUDA toolkit, the driver and NVRTC: kept
        warp_state = "cpu" if warp.is_cpu_available() else "nocpu"
        print("warp CPU compiler:", "yes" if warp_state == "cpu" else
              "no (warp-clang is missing: Warp compiles CUDA kernels only)")
    except Exception as err:
        warp_state = "broken"
        print(f"warp: not usable ({type(err).__name__}: {err})")
print(f"GPU_DAY_STACK torch={torch_ok} warp={warp_state}")
EOF
}
STACK=$(stack | grep -v "$CUDA_WARNING")
echo "$STACK" | grep -v '^GPU_DAY_STACK' >&2
if ! echo "$STACK" | grep -q '^GPU_DAY_STACK torch=1'; then
  echo "gpu_day.sh: $PY cannot import torch: $(echo "$STACK" | grep -m1 '^torch' || echo 'no answer')" >&2
  exit 3
fi
WARP=$(echo "$STACK" | sed -n 's/^GPU_DAY_STACK.* warp=\([a-z]*\).*/\1/p')
[ -n "$CHECK" ] && exit 0

mkdir -p "$LOGS"
if [ -n "$FULL" ]; then
  Q_WORLDS="1024 2048 4096 8192 16384"; RW_WORLDS="1024 2048 4096 8192 16384"
  DEADLINE=${FULL_DEADLINE:-2400}
  STEPS="$STEPS reproduce"
fi

weight() {  # a step's share of the time, in rough seconds of a 480 s run on an H100
  # on a CPU Warp compiles for minutes: the rehearsal gives its time to the steps that can finish
  if [ "$DEVICE" = cpu ]; then
    case $1 in warp_*) echo 25; return ;; learn_chase) echo 40; return ;; esac
  fi
  case $1 in
    warp_compile) echo 150 ;; warp_speed_quadrant) echo 80 ;; warp_speed_randomwalls) echo 60 ;;
    warp_pod) echo 90 ;; c_pod) echo 90 ;; learn_chase) echo 70 ;; batch_memory) echo 50 ;;
    reproduce) echo 900 ;;
  esac
}

warp_compile() {  # both presets' kernels at once, in two processes; the kernel cache keeps them
  local preset pids=() rc=0 pid
  for preset in quadrant randomwalls; do
    "$PY" bench/warp_speed.py --device "$DEVICE" --preset "$preset" --worlds "$COMPILE_WORLDS" \
      --steps 1 --c-max-worlds 0 --diff-worlds 2 --diff-steps 1 \
      > "$LOGS/warp_compile_$preset.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  for preset in quadrant randomwalls; do
    echo "-- $preset (bench/warp_speed.py --worlds $COMPILE_WORLDS --steps 1):"
    grep -v "$CUDA_WARNING" "$LOGS/warp_compile_$preset.log" | grep -E "first Warp build|Error|error" \
      | tail -n 5
  done
  return $rc
}
export -f warp_compile
export PY DEVICE COMPILE_WORLDS LOGS CUDA_WARNING

command_of() {  # command_of STEP CAP: the step's command for a run of at most CAP seconds
  local cap=$2 minutes
  case $1 in
    warp_compile) echo warp_compile ;;
    warp_speed_quadrant)
      echo "$PY" bench/warp_speed.py --device "$DEVICE" --preset quadrant --worlds "$Q_WORLDS" \
        --c-max-worlds "$C_MAX" ;;
    warp_speed_randomwalls)
      echo "$PY" bench/warp_speed.py --device "$DEVICE" --preset randomwalls \
        --worlds "$RW_WORLDS" --c-max-worlds "$C_MAX" ;;
    warp_pod | c_pod)
      # the training run takes about a third of the cap; start-up, in-process split and floor
      # the rest
      minutes=$(awk "BEGIN { printf \"%.2f\", $cap / 3 / 60 }")
      local physics=warp worlds=$POD_WORLDS
      [ "$1" = c_pod ] && physics=c && worlds=$C_POD_WORLDS
      echo "$PY" bench/pod_speed.py --device "$DEVICE" --skip-local --pods 1 --rollouts 1 \
        --minutes "$minutes" --warmup "$(awk "BEGIN { printf \"%.0f\", $cap / 12 }")" \
        "pod.physics=$physics" "pod.worlds=$worlds" ;;
    learn_chase)
      minutes=$(awk "BEGIN { printf \"%.2f\", $cap * 0.55 / 60 }")
      echo "$PY" bench/learn_chase.py --launcher=local --minutes="$minutes" --quiet \
        --eval-episodes 64 pipeline.backend=pod "pipeline.device=$DEVICE" pod.physics=warp \
        "pod.worlds=$CHASE_WORLDS" ;;
    batch_memory)
      echo "$PY" bench/batch_memory.py --device "$DEVICE" --chunks "$CHUNKS" --chunk-len 10 ;;
    reproduce)
      minutes=$(awk "BEGIN { printf \"%.1f\", $cap * 0.6 / 60 }")
      echo "$PY" bench/reproduce.py --minutes "$minutes" --quiet --name "gpu-day-$DATE" \
        --config configs/quadrant_pod.yaml "pipeline.device=$DEVICE" pod.physics=warp \
        "pod.worlds=$POD_WORLDS" ;;
  esac
}

GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
  || echo "no NVIDIA GPU answered nvidia-smi")
{
  echo "# GPU figures, $DATE${PARTS:+ (part $PARTS of the kit)}"
  echo
  echo "- GPU: $GPU"
  echo "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- started: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- settings: DEVICE=$DEVICE DEADLINE=$DEADLINE PARTS=${PARTS:-all} FULL=${FULL:-0}"
  echo "- steps: $STEPS" | tr -s ' \n' ' '
  echo
  echo
  echo "## Environment"
  echo
  echo '```'
  echo "$STACK" | grep -v '^GPU_DAY_STACK'
  echo '```'
  echo
} > "$REPORT"

cannot_run() {  # why STEP cannot run with this interpreter (nothing when it can)
  case $1 in warp_* | learn_chase | reproduce) ;; *) return ;; esac  # these run the Warp game
  case $WARP in
    none) echo "Warp is not installed for $PY (warp-lang: the kit's part 2)" ;;
    broken) echo "Warp does not initialise for $PY (see Environment)" ;;
    nocpu) [ "$DEVICE" = cpu ] && echo "Warp has no CPU compiler here (warp-clang is missing," \
      "as in the CUDA-only kit) and DEVICE=cpu" ;;
  esac
}

# step STEP: run it under its cap, keep its log and a section of the report
SUMMARY=()
left_weight() {
  local total=0 s seen=0
  for s in $STEPS; do
    [ "$s" = "$1" ] && seen=1
    # a step that cannot run here takes no share of the time
    [ $seen = 1 ] && [ -z "$(cannot_run "$s")" ] && total=$((total + $(weight "$s")))
  done
  echo $total
}
run_step() {
  local step=$1 n=$2 left cap cmd start rc status log why
  why=$(cannot_run "$step")
  if [ -n "$why" ]; then
    status="skipped: $why"
    printf '## %s. %s\n\n%s\n\n' "$n" "$step" "$status" >> "$REPORT"
    SUMMARY+=("| $n | $step | $status | 0 | - |")
    echo "== $step $status" >&2
    return
  fi
  left=$((DEADLINE - (SECONDS - CLOCK_START) - 5))
  cap=$((left * $(weight "$step") / $(left_weight "$step")))
  log="$LOGS/$step.log"
  if [ "$cap" -lt "$MIN_STEP_S" ]; then
    status="skipped: $left s left of DEADLINE=$DEADLINE, its share $cap s < $MIN_STEP_S s"
    printf '## %s. %s\n\n%s\n\n' "$n" "$step" "$status" >> "$REPORT"
    SUMMARY+=("| $n | $step | $status | 0 | $cap |")
    echo "== $step $status" >&2
    return
  fi
  cmd=$(command_of "$step" "$cap")
  echo "== $step (cap $cap s): $cmd" >&2
  start=$SECONDS
  # a process group of its own, so that a timeout also stops its workers
  timeout -k 10 "$cap" bash -c "$cmd" > "$log" 2>&1
  rc=$?
  case $rc in
    0) status="exit 0" ;;
    124 | 137) status="timed out after its cap of $cap s (exit $rc)" ;;
    *) status="exit $rc" ;;
  esac
  {
    printf '## %s. %s\n\n' "$n" "$step"
    printf '`%s`\n\n%s, %s s (cap %s s)\n\n' "$cmd" "$status" "$((SECONDS - start))" "$cap"
    echo '```'
    grep -v "$CUDA_WARNING" "$log" | tail -n 40
    echo '```'
    echo
  } >> "$REPORT"
  SUMMARY+=("| $n | $step | $status | $((SECONDS - start)) | $cap |")
  echo "== $step: $status, $((SECONDS - start)) s" >&2
  [ $rc = 0 ] && SUCCEEDED=$((SUCCEEDED + 1))
}
SUCCEEDED=0

n=0
for step in $STEPS; do
  n=$((n + 1))
  run_step "$step" "$n"
done

{
  if grep -qh "$CUDA_WARNING" "$LOGS"/*.log 2>/dev/null; then
    echo "Warp's warning (once for all steps): $(grep -h -m1 "$CUDA_WARNING" "$LOGS"/*.log | head -n1)"
    echo
  fi
  echo "## Summary"
  echo
  echo "| # | step | status | s | cap s |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${SUMMARY[@]}"
  echo
  echo "finished: $(date -u '+%H:%M:%S UTC'), $((SECONDS - CLOCK_START)) s of DEADLINE=$DEADLINE"
} >> "$REPORT"
echo "wrote $REPORT" >&2
if [ $SUCCEEDED = 0 ]; then
  echo "gpu_day.sh: no step succeeded (steps: $(echo $STEPS)); see $REPORT" >&2
  exit 1
fi
