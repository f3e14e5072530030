#!/usr/bin/env bash
# Side by side: `loom bench sandbox` against a worker of binary A and one of
# binary B (64 slots each, both on 127.0.0.1), alternating A, B, B, A, ...
# for ROUNDS rounds. Prints the load average, then one JSON line per run
# with the binary's label added. Usage:
#   [A_ARGS=...] [B_ARGS=...] scripts/bench_sandbox_ab.sh A_LOOM B_LOOM [ROUNDS] [SESSIONS] [EPISODES]
# A_ARGS and B_ARGS are extra `loom worker` flags for each side (the same
# binary twice with A_ARGS=--no-kernel-limits compares the worker's watch
# with the kernel's limits).
set -euo pipefail
a=$1 b=$2 rounds=${3:-3} sessions=${4:-100} episodes=${5:-64}
dir=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for label in a b; do
  bin=${!label}
  args_var=${label^^}_ARGS
  # shellcheck disable=SC2086  # the extra flags are split on purpose
  "$bin" worker --listen 127.0.0.1:0 --max-sandboxes 64 --log-level warn \
    --port-file "$dir/$label.port" ${!args_var:-} >/dev/null 2>&1 &
  pids+=($!)
done
for _ in $(seq 50); do [[ -s $dir/a.port && -s $dir/b.port ]] && break; sleep 0.2; done
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  order="a b"; ((round % 2 == 0)) && order="b a"
  for label in $order; do
    bin=${!label}
    args_var=${label^^}_ARGS
    "$b" bench sandbox --json --sessions "$sessions" --episodes "$episodes" \
      --worker "127.0.0.1:$(cat "$dir/$label.port")" 2>/dev/null | tail -1 |
      sed "s|^{|{\"binary\":\"$label:$bin\",\"args\":\"${!args_var:-}\",\"round\":$round,|"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
