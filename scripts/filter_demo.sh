#!/usr/bin/env bash
# The difficulty-filter demonstration (docs/tasks.md, "Online difficulty
# filtering"): for each seed, SFT once (configs/filter-demo.yaml), then GRPO
# from that model three times on the same 200-task file: without and with
# the filter (off, on), and with the filter at half the rollout batch (half),
# into runs/filter-demo/seed<S>/{sft,off,on,half}; then `loom tasks audit`
# on the ledger the GRPO runs share, and `loom tasks dedup` on a copy of the file
# with planted near-duplicates. Prints one JSON summary (scripts/filter_demo.py).
#   scripts/filter_demo.sh [SEED...]   (default: 1 2 3)
# Extra `loom train` arguments come from $LOOM_DEMO_ARGS (e.g.
# "--set run.threads=1 --set run.deterministic=true"), the output directory
# from $LOOM_DEMO_OUT (default runs/filter-demo), the filter's window from
# $LOOM_DEMO_WINDOW (default 8, one group: 0 judges a task on all its attempts).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=("$@")
[[ ${#seeds[@]} -gt 0 ]] || seeds=(1 2 3)
out=${LOOM_DEMO_OUT:-runs/filter-demo}
loom=build/bin/loom
read -r -a extra <<<"${LOOM_DEMO_ARGS:-}"
window=${LOOM_DEMO_WINDOW:-8}
grpo=(--set train.stages=[grpo] --set tasks.datasets.arithmetic.weight=0
      --set tasks.datasets.filter.weight=1)
for seed in "${seeds[@]}"; do
  dir=$out/seed$seed
  mkdir -p "$dir"
  rm -f "$dir"/ledger.sqlite*
  if [[ ! -d $dir/sft/stages/sft ]]; then
    "$loom" train --config configs/filter-demo.yaml --run-dir "$dir/sft" \
      --set run.seed="$seed" --set model.path="$dir/init" --set tasks.eval_every=0 \
      "${extra[@]}" >"$dir/sft.out" 2>&1
  fi
  for filter in off on half; do
    attempts=8 batch=128
    [[ $filter == off ]] && attempts=0
    [[ $filter == half ]] && batch=64
    rm -rf "$dir/$filter"
    "$loom" train --config configs/filter-demo.yaml --run-dir "$dir/$filter" \
      --set run.seed="$seed" --set model.path="$dir/sft/stages/sft" "${grpo[@]}" \
      --set tasks.datasets.filter.filter.after_attempts=$attempts \
      --set tasks.datasets.filter.filter.window="$window" \
      --set async.batch_samples=$batch --set async.max_inflight=$batch \
      --set tasks.ledger="$dir/ledger.sqlite" "${extra[@]}" >"$dir/$filter.out" 2>&1
  done
  "$loom" tasks audit --json --dataset filter "$dir/ledger.sqlite" >"$dir/audit.out"
done
python3 scripts/gen_filter_tasks.py --out "$out/dup" --duplicates 10 >/dev/null
"$loom" tasks dedup --json "$out/dup/filter-train.jsonl" >"$out/dedup.out"
python3 scripts/filter_demo.py "$out" "${seeds[@]}"
