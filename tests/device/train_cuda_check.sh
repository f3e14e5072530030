#!/usr/bin/env bash
# Issue #22: builds the WHOLE loom binary against the GPU machine's CUDA
# LibTorch (pip torch 2.x) and runs `loom train` on CUDA: the quickstart in
# float32 and in bfloat16 with short stages, then a preempt (SIGTERM mid-GRPO)
# and `--resume auto` of the same run.
# Run ON THE GPU MACHINE from the repository root, with carry [".device/deps"]
# (made here by tests/device/pack_deps.sh: the Debian 12 packages the build
# needs and the machine lacks). Results land in $OUT:
#   summary.json  env.txt  build.log (configure + the build's tail)
#   train_fp32.log  train_bf16.log  resume.log  runs.tar.gz (metrics.jsonl, log.txt, config.yaml)
set -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/.device/out}
mkdir -p "$OUT"
T0=$(date +%s)
DEADLINE=$((T0 + ${LOOM_CHECK_SECONDS:-395}))
# left N: N seconds, or what is left before the deadline if that is less.
left() { local l=$((DEADLINE - $(date +%s))); if ((l > $1)); then echo "$1"; elif ((l > 5)); then echo "$l"; else echo 5; fi; }
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}
DEPS=$ROOT/.device/deps/usr
LIBARCH=$DEPS/lib/x86_64-linux-gnu
BUILD=/tmp/loom-build-cuda
RUNS=/tmp/loom-runs
declare -A R=([configure]=skipped [build]=skipped [link_workaround]=unused [fp32]=skipped
              [bf16]=skipped [preempt]=skipped [resume]=skipped)
declare -A S=()

# Per-run figures from metrics.jsonl, as JSON (the last line of each step counts).
metrics_json() {
  "$PY" - "$1" <<'EOF' 2>/dev/null || echo null
import json, sys, statistics as st
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = {}
for r in recs:
    if "step" in r and "stage" in r and "loss" in r: steps[(r["stage"], r["step"])] = r
def stage(name, keys):
    rs = [r for (s, _), r in sorted(steps.items()) if s == name]
    out = {"steps": len(rs), "last_step": rs[-1]["step"] if rs else None}
    for k in keys:
        v = [r[k] for r in rs[1:] or rs if k in r]  # the first step includes warm-up
        if v: out[k + "_median"] = round(st.median(v), 4)
    if rs: out["loss_first_last"] = [round(rs[0]["loss"], 4), round(rs[-1]["loss"], 4)]
    return out
evals = [{k: r[k] for k in ("stage", "step", "eval_accuracy", "eval_mean_length")}
         for r in recs if "eval_accuracy" in r]
print(json.dumps({"sft": stage("sft", ["step_seconds", "train_tokens_per_s"]),
                  "grpo": stage("grpo", ["time_rollout_s", "time_train_s", "rollout_tokens_per_s",
                                         "train_tokens_per_s", "reward_mean", "ratio_mean"]),
                  "resume_events": [r for r in recs if r.get("event") == "resume"],
                  "evals": evals}))
EOF
}

finish() {
  [[ -n ${SMI_PID:-} ]] && kill "$SMI_PID" 2>/dev/null
  {
    echo "=== GPU utilization / memory every 2 s during train (first 60 lines) ==="
    head -n 60 /tmp/gpu_util.csv 2>/dev/null
  } >> "$OUT/env.txt"
  (cd "$RUNS" 2>/dev/null && find . \( -name metrics.jsonl -o -name log.txt -o -name config.yaml \) \
     -not -path '*/checkpoints/*' | tar czf "$OUT/runs.tar.gz" -T - 2>/dev/null)
  {
    echo "{\"torch\": \"${TORCH_VERSION:-?}\", \"total_s\": $(( $(date +%s) - T0 )),"
    for k in configure build link_workaround fp32 bf16 preempt preempt_signal resume; do
      echo "\"$k\": \"${R[$k]}\", \"${k}_s\": ${S[$k]:-0},"
    done
    for run in fp32 bf16 preempt; do
      f=$RUNS/$run/metrics.jsonl
      [[ -f $f ]] && echo "\"metrics_$run\": $(metrics_json "$f"),"
    done
    echo "\"checkpoints_preempt\": \"$(ls "$RUNS/preempt/checkpoints" 2>/dev/null | tr '\n' ' ')\"}"
  } > "$OUT/summary.json"
  "$PY" -m json.tool "$OUT/summary.json" > /dev/null 2>&1 || echo "(summary.json is not valid JSON)"
  cat "$OUT/summary.json"
  ls -la "$OUT"
}
trap finish EXIT

# --- environment -------------------------------------------------------------
{
  cat /etc/os-release | head -2; nproc; g++ --version | head -1; cmake --version | head -1
  nvcc --version | tail -1
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available())'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
} > "$OUT/env.txt" 2>&1
read -r TORCH_VERSION TORCH_PREFIX TORCH_LIB < <("$PY" -c '
import torch, torch.utils.cpp_extension as e
print(torch.__version__, torch.utils.cmake_prefix_path, e.library_paths()[0])')
# pip LibTorch has exported copies of libstdc++'s std::filesystem (pytorch
# issue 133437); loom segfaulted in checkpoint retention (fs::remove_all) here.
{
  echo "=== std::filesystem symbols defined by libtorch_cpu.so (count; remove_all ones) ==="
  nm -D --defined-only "$TORCH_LIB/libtorch_cpu.so" | grep -c " _ZNSt10filesystem"
  nm -D --defined-only "$TORCH_LIB/libtorch_cpu.so" | grep "remove_all" | head -n 4
  command -v gdb || echo "no gdb"
} >> "$OUT/env.txt" 2>&1

# --- relocate the carried Debian packages -------------------------------------
if [[ ! -d $DEPS ]]; then
  echo "no .device/deps/usr: carry it (see the header)" | tee -a "$OUT/env.txt"
  exit 1
fi
for pc in "$LIBARCH"/pkgconfig/*.pc "$DEPS"/share/pkgconfig/*.pc; do
  sed -i -E -e "s#^(prefix|exec_prefix|libdir|includedir)=/usr(/|\$)#\1=$DEPS\2#" \
    -e 's#^libdir=\$\{exec_prefix\}/lib$#libdir=${exec_prefix}/lib/x86_64-linux-gnu#' "$pc"
done
export PATH=$DEPS/bin:$PATH
export LD_LIBRARY_PATH=$LIBARCH:$TORCH_LIB:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_LIBDIR=$LIBARCH/pkgconfig:$DEPS/share/pkgconfig
export PKG_CONFIG_PATH=$PKG_CONFIG_LIBDIR
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export TORCH_CUDA_ARCH_LIST=9.0

# --- (1) configure and build the whole binary ---------------------------------
# --no-as-needed: Ubuntu's linker would otherwise drop libtorch_cuda.so, whose
# symbols loom never names, and with it LibTorch's CUDA backend.
configure() {  # configure [extra cmake args]: a second call reconfigures in place
  timeout "$(left 90)" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLOOM_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$DEPS" -DTorch_DIR="$TORCH_PREFIX/Torch" \
    -DPKG_CONFIG_EXECUTABLE="$DEPS/bin/pkgconf" -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed" \
    "$@" >> "$OUT/configure.full" 2>&1
}
build() {
  timeout "$(left 240)" cmake --build "$BUILD" --target loom -j 16 -- -k 0 > /tmp/build.full 2>&1
}
say "configure"; s=$(date +%s)
rm -rf "$BUILD"
configure && R[configure]=ok || R[configure]=failed
S[configure]=$(( $(date +%s) - s ))
say "build"; s=$(date +%s)
if [[ ${R[configure]} == ok ]]; then
  build && R[build]=ok || R[build]="failed_rc$?"
  # Fallback, should cmake/Dependencies.cmake's ordering not be enough on some
  # LibTorch: put libprotobuf on the link line by hand and link again.
  if [[ ${R[build]} != ok ]] && grep -q "undefined reference to \`google::protobuf" /tmp/build.full; then
    say "protobuf link failure: retrying with libprotobuf appended by hand"
    cp /tmp/build.full /tmp/build.first
    configure -DCMAKE_CXX_STANDARD_LIBRARIES="$LIBARCH/libprotobuf.so" && build &&
      R[build]=ok || R[build]="failed_rc$?"
    R[link_workaround]=used
  fi
fi
S[build]=$(( $(date +%s) - s ))
{
  echo "=== configure (loom lines, protobuf cache) ==="
  grep -E "loom|Torch|CUDA|Error|error|protobuf" "$OUT/configure.full" | head -n 30
  grep -i "^protobuf_LIBRARY\|^gRPC_DIR" "$BUILD/CMakeCache.txt" 2>/dev/null
  echo "=== build: warnings and errors (deduplicated) ==="
  grep -E "warning:|error:|undefined reference" /tmp/build.first /tmp/build.full 2>/dev/null |
    sed 's/^[^:]*://' | sort | uniq -c | sort -rn | head -n 40
  echo "=== build tail ==="; tail -n 15 /tmp/build.full
} > "$OUT/build.log" 2>&1
rm -f "$OUT/configure.full"
say "build ${R[build]} in ${S[build]} s"
LOOM=$BUILD/bin/loom
[[ -x $LOOM && ${R[build]} == ok ]] || exit 1
{ echo "=== loom version ==="; timeout 30 "$LOOM" version; } >> "$OUT/env.txt" 2>&1

# --- (2) loom train on CUDA ----------------------------------------------------
rm -rf "$RUNS"; mkdir -p "$RUNS"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 > /tmp/gpu_util.csv 2>&1 &
SMI_PID=$!
# train <run> <seconds> <extra args...>: the quickstart on CUDA with short
# stages. timeout is loom's parent and forwards a SIGTERM sent to it.
train() {
  local run=$1 secs=$2; shift 2
  exec timeout -s TERM "$(left "$secs")" "$LOOM" train --config configs/quickstart.yaml \
    --run-dir "$RUNS/$run" --set model.device=cuda --set model.path="$RUNS/model_$run" \
    --set run.threads=4 --set tasks.eval_every=0 "$@"
}
run_train() { (train "$@"); }
timed() {  # timed <key> <command...>: runs it, records result and seconds
  local key=$1 s; shift; s=$(date +%s)
  "$@" && R[$key]=ok || R[$key]="failed_rc$?"
  S[$key]=$(( $(date +%s) - s ))
  say "$key: ${R[$key]} in ${S[$key]} s"
}
# skip_uninformative=off: 50 SFT steps leave every reward 0, and skipped
# subgroups would leave GRPO's scoring and loss unexercised on the GPU.
SHORT=(--set train.sft.steps=50 --set train.grpo.steps=10 --set grpo.skip_uninformative=off)
timed fp32 run_train fp32 110 "${SHORT[@]}" > "$OUT/train_fp32.log" 2>&1
tail -n 8 "$OUT/train_fp32.log"
timed bf16 run_train bf16 100 "${SHORT[@]}" --set model.dtype=bfloat16 > "$OUT/train_bf16.log" 2>&1
tail -n 8 "$OUT/train_bf16.log"

# --- (3) preempt mid-GRPO, then --resume auto ------------------------------------
# Checkpoints every 3 steps with the default retention (keep_last 3): old
# checkpoints are deleted while the run goes on (that deletion crashed under
# pip LibTorch's own std::filesystem::remove_all before loom's RemoveTree).
PRE=(--set train.sft.steps=20 --set train.grpo.steps=8 --set ckpt.every_steps=3
     --set grpo.skip_uninformative=off)
preempt() {  # SIGTERM once the second GRPO step is in metrics.jsonl
  train preempt 90 "${PRE[@]}" &  # a subshell that execs timeout: $! is timeout's pid
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '"stage":"grpo".*"step":2\b' "$RUNS/preempt/metrics.jsonl" 2>/dev/null; then
      say "SIGTERM to loom (pid $pid)"; kill -TERM "$pid"; R[preempt_signal]=sent; break
    fi
    sleep 0.2
  done
  wait "$pid"
}
R[preempt_signal]=not_sent
timed preempt preempt > "$OUT/resume.log" 2>&1
grep -q "preempted; checkpoint written" "$OUT/resume.log" && R[preempt_signal]+=_checkpointed
if [[ -d $RUNS/preempt/checkpoints ]]; then
  echo "=== checkpoints after the preemption: $(ls "$RUNS/preempt/checkpoints" | tr '\n' ' ')" >> "$OUT/resume.log"
  timed resume run_train preempt 90 "${PRE[@]}" --resume auto >> "$OUT/resume.log" 2>&1
  grep -q '"stage":"grpo".*"step":8\b' "$RUNS/preempt/metrics.jsonl" || R[resume]="${R[resume]}_unfinished"
fi
tail -n 12 "$OUT/resume.log"
[[ ${R[fp32]} == ok ]]
