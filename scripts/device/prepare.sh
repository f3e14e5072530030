#!/usr/bin/env bash
# Run HERE (the development machine), before scripts/device/cuda_check.sh on
# the GPU machine. Fills .device/ (git-ignored; carry it: carry [".device"]):
#   .device/models/<arch>/   a `loom init-model` directory per arch (config.json,
#                            model.safetensors, tokenizer.json) with weights
#                            rescaled by perturb_weights.py so every detail
#                            matters, plus tokens.jsonl (a few random token
#                            sequences) and logprobs.jsonl (`loom logprobs` of them)
#   .device/deps/include/    nlohmann/json.hpp (header-only; the GPU machine
#                            may not have it)
# Needs build/bin/loom (scripts/build.sh --target loom) and a python3 with numpy
# (Debian's /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
LOOM=${LOOM:-build/bin/loom}
PY=${PYTHON:-/usr/bin/python3}
rm -rf .device/models .device/deps .device/build .device/build-py
mkdir -p .device/models .device/deps/include
cp -r /usr/include/nlohmann .device/deps/include/

seed=11
for arch in llama qwen2 qwen3 qwen3_moe; do
  dir=.device/models/$arch
  extra=()
  [[ $arch == llama ]] && extra=(--set attention_bias=true)
  "$LOOM" init-model --arch "$arch" --out "$dir" --seed "$seed" \
    --set num_hidden_layers=3 --set rope_theta=500 "${extra[@]}" >/dev/null
  "$PY" scripts/device/perturb_weights.py "$dir/model.safetensors" "$seed"
  "$PY" - "$dir" "$seed" <<'PYEOF'
import json, random, sys
d, seed = sys.argv[1], int(sys.argv[2])
vocab = json.load(open(d + "/config.json"))["vocab_size"]
rng = random.Random(seed)
with open(d + "/tokens.jsonl", "w") as f:
    for n in (2, 9, 33, 70):
        f.write(json.dumps({"tokens": [rng.randrange(vocab) for _ in range(n)]}) + "\n")
PYEOF
  "$LOOM" logprobs --model "$dir" --input "$dir/tokens.jsonl" > "$dir/logprobs.jsonl"
  seed=$((seed + 1))
done
echo "prepared .device/models ($(ls .device/models | tr '\n' ' ')) and .device/deps"
