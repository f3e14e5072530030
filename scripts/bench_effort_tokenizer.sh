#!/usr/bin/env bash
# Side by side: SFT steps of a config with `model.init_tokenizer` bytes (A)
# and bytes+effort (B), alternating A, B, B, A, ... for ROUNDS rounds, each
# run from a fresh model of the same seed. Prints the load average, then one
# JSON line per run: the median step time and tokens per step over its steps
# after the first five. Usage:
#   scripts/bench_effort_tokenizer.sh [CONFIG] [ROUNDS] [STEPS]
set -euo pipefail
config=${1:-configs/effort.yaml} rounds=${2:-2} steps=${3:-30}
loom=${LOOM:-build/bin/loom}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  order="bytes bytes+effort"; ((round % 2 == 0)) && order="bytes+effort bytes"
  for tokenizer in $order; do
    run=$dir/$round-$tokenizer
    "$loom" train --config "$config" --run-dir "$run" --set model.path="$run/model" \
      --set model.init_tokenizer="$tokenizer" --set train.stages=[sft] \
      --set train.sft.steps="$steps" --set tasks.eval_every=0 >"$run.log" 2>&1
    python3 - "$run/metrics.jsonl" "$tokenizer" "$round" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in rows if r.get("stage") == "sft" and "step_seconds" in r][5:]
print(json.dumps({"tokenizer": sys.argv[2], "round": int(sys.argv[3]), "steps": len(steps),
                  "median_step_s": round(statistics.median(r["step_seconds"] for r in steps), 4),
                  "tokens_per_step": round(statistics.mean(r["tokens"] for r in steps), 1)}))
EOF
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
