#!/usr/bin/env python3
"""Loads every loom model directory under --models with Hugging Face
transformers (AutoModelForCausalLM.from_pretrained, float32, eager attention)
and compares its teacher-forced log-probs with the ones `loom logprobs` wrote
there (scripts/device/prepare.sh): for each line of tokens.jsonl, log p(token[i]
| token[:i]) for i >= 1 against logprobs.jsonl. Runs on the CPU (the bound,
1e-4) and, when CUDA is available, on the GPU too (reported, TF32 off, bound
1e-3). Writes one JSON object to --out and stdout; exits 1 if a model fails to
load or a bound is exceeded.

Usage: hf_compare.py --models DIR --out FILE.json
"""
import argparse
import json
import os
import sys
import traceback

import torch

CPU_BOUND = 1e-4
CUDA_BOUND = 1e-3


def load(model_dir):
    from transformers import AutoModelForCausalLM
    kwargs = {"attn_implementation": "eager"}
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kwargs)
    except TypeError:  # transformers before `dtype` was the keyword
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kwargs)
    return model.float().eval()


def read_jsonl(path, key):
    with open(path) as f:
        return [json.loads(line)[key] for line in f if line.strip()]


def max_diff(model, device, sequences, expected):
    model = model.to(device)
    worst = 0.0
    with torch.no_grad():
        for tokens, loom_lp in zip(sequences, expected):
            ids = torch.tensor([tokens], device=device)
            logits = model(input_ids=ids).logits[0].float()
            lp = torch.log_softmax(logits, -1)[:-1].gather(1, ids[0, 1:, None])[:, 0].cpu()
            if len(loom_lp) != lp.numel():
                raise ValueError(f"{len(loom_lp)} loom log-probs for {len(tokens)} tokens")
            if lp.numel():
                worst = max(worst, (lp.double() - torch.tensor(loom_lp).double()).abs().max().item())
    return worst


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    result = {"torch": torch.__version__, "models": {}}
    try:
        import transformers
        result["transformers"] = transformers.__version__
    except Exception as e:  # reported below per model as a load failure
        result["transformers"] = f"unavailable: {e}"
    ok = True
    archs = sorted(os.listdir(args.models))
    if not archs:
        ok = False
    for arch in archs:
        d = os.path.join(args.models, arch)
        entry = {}
        try:
            sequences = read_jsonl(os.path.join(d, "tokens.jsonl"), "tokens")
            expected = read_jsonl(os.path.join(d, "logprobs.jsonl"), "logprobs")
            model = load(d)
            entry["hf_class"] = type(model).__name__
            entry["cpu_max_abs_diff"] = max_diff(model, "cpu", sequences, expected)
            entry["cpu_ok"] = entry["cpu_max_abs_diff"] <= CPU_BOUND
            ok = ok and entry["cpu_ok"]
            if torch.cuda.is_available():
                entry["cuda_max_abs_diff"] = max_diff(model, "cuda", sequences, expected)
                entry["cuda_ok"] = entry["cuda_max_abs_diff"] <= CUDA_BOUND
                ok = ok and entry["cuda_ok"]
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc()[-2000:]
            ok = False
        result["models"][arch] = entry
    result["bounds"] = {"cpu": CPU_BOUND, "cuda": CUDA_BOUND}
    result["ok"] = ok
    text = json.dumps(result, indent=2)
    print(text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
