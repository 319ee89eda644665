#!/usr/bin/env bash
# Every figure this project needs from a GPU, in about 35 minutes on one H100-class card:
#   1. bench/warp_speed.py: the Warp game at N = 1,024 ... 16,384 worlds, quadrant and randomwalls
#   2. bench/pod_speed.py: the pod against the local pipeline and against its floor
#   3. bench/learn_chase.py with the pod: the chase seeker learns on the GPU
#   4. bench/reproduce.py: a 15-minute quadrant pod run, cross-play against the untrained policy
# Everything it prints goes to docs/benchmarks/gpu-<date>.md (machine, date, commands, output),
# with the machine-readable last line of each step.
#
#   bash bench/gpu_day.sh            # or: make gpu-day
#   QUICK=1 bash bench/gpu_day.sh    # a few minutes: smaller N, shorter runs (to try it out)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DATE=$(date -u +%Y-%m-%d)
OUT=${OUT:-docs/benchmarks/gpu-$DATE.md}
mkdir -p "$(dirname "$OUT")"
export MUJOCO_GL=${MUJOCO_GL:-egl}

if [ -n "${QUICK:-}" ]; then
  WORLDS="256 1024"; MINUTES=1; POD_WORLDS=1024; CHASE_MIN=2; REPRO_MIN=2
else
  WORLDS="1024 2048 4096 8192 16384"; MINUTES=3; POD_WORLDS=4096; CHASE_MIN=5; REPRO_MIN=15
fi

GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
  || echo "no NVIDIA GPU answered nvidia-smi")
{
  echo "# GPU figures, $DATE"
  echo
  echo "- GPU: $GPU"
  echo "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- started: $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
} > "$OUT"

step() {  # step TITLE COMMAND...: run it, keep its output (and its exit status) in the report
  local title=$1; shift
  echo "== $title: $*" >&2
  local start=$SECONDS log
  log=$(mktemp)
  "$@" 2>&1 | tee "$log" >&2
  local rc=${PIPESTATUS[0]}
  {
    echo "## $title"
    echo
    echo "\`$*\` (exit $rc, $((SECONDS - start)) s)"
    echo
    echo '```'
    tail -n 60 "$log"
    echo '```'
    echo
  } >> "$OUT"
  rm -f "$log"
}

for preset in quadrant randomwalls; do
  # shellcheck disable=SC2086
  step "warp_speed $preset" "$PY" bench/warp_speed.py --device cuda --preset "$preset" \
    --worlds $WORLDS
done
step "pod_speed quadrant" "$PY" bench/pod_speed.py --device cuda --minutes "$MINUTES" \
  "pod.worlds=$POD_WORLDS" pod.physics=warp
step "learn_chase pod" "$PY" bench/learn_chase.py --launcher=local --minutes="$CHASE_MIN" \
  --quiet pipeline.backend=pod pipeline.device=cuda pod.physics=warp pod.worlds=1024
step "reproduce quadrant pod" "$PY" bench/reproduce.py --minutes "$REPRO_MIN" --quiet \
  --config configs/quadrant_pod.yaml --name "gpu-day-$DATE" pipeline.device=cuda pod.physics=warp \
  "pod.worlds=$POD_WORLDS"

echo "finished: $(date -u '+%H:%M UTC')" >> "$OUT"
echo "wrote $OUT" >&2
