#!/usr/bin/python3
"""Independent reference for `loom logprobs`: the Hugging Face equations.

Usage: reference_logprobs.py MODEL_DIR INPUT.jsonl OUTPUT.jsonl

Reads config.json and model.safetensors (parsed here with numpy, not with
loom's reader), and for every input line {"tokens": [ids]} writes
{"logprobs": [...]}: log p(token[i] | token[:i]) for i >= 1, computed in
float64 from the equations of transformers' Llama / Qwen2 / Qwen3 /
Qwen3-MoE modelling code (RMSNorm, rotate-half RoPE, GQA, SwiGLU, softmax
top-k router). Run with Debian's /usr/bin/python3 (python3-torch, numpy).
"""
import json
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        chunk = data[begin:end]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(chunk, dtype=np.uint16).astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(chunk, dtype=DTYPES[entry["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(array.reshape(entry["shape"]).copy()).double()
    return out


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, positions, theta):
    # x: [heads, T, hd]
    hd = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = positions[:, None].double() * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    rotated = torch.cat([-x2, x1], -1)
    return x * cos + rotated * sin


def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def attention(cfg, W, p, x):
    T = x.shape[0]
    nh, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    q = linear(x, W[p + "q_proj.weight"], W.get(p + "q_proj.bias")).view(T, nh, hd).transpose(0, 1)
    k = linear(x, W[p + "k_proj.weight"], W.get(p + "k_proj.bias")).view(T, kvh, hd).transpose(0, 1)
    v = linear(x, W[p + "v_proj.weight"], W.get(p + "v_proj.bias")).view(T, kvh, hd).transpose(0, 1)
    if p + "q_norm.weight" in W:
        q = rms_norm(q, W[p + "q_norm.weight"], cfg["rms_norm_eps"])
        k = rms_norm(k, W[p + "k_norm.weight"], cfg["rms_norm_eps"])
    pos = torch.arange(T)
    q, k = rope(q, pos, cfg["rope_theta"]), rope(k, pos, cfg["rope_theta"])
    k = k.repeat_interleave(nh // kvh, dim=0)
    v = v.repeat_interleave(nh // kvh, dim=0)
    scores = q @ k.transpose(1, 2) / hd ** 0.5
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    probs = torch.softmax(scores.masked_fill(causal, float("-inf")), -1)
    out = (probs @ v).transpose(0, 1).reshape(T, nh * hd)
    return linear(out, W[p + "o_proj.weight"], W.get(p + "o_proj.bias"))


def mlp(W, p, x):
    gate = torch.nn.functional.silu(linear(x, W[p + "gate_proj.weight"]))
    return linear(gate * linear(x, W[p + "up_proj.weight"]), W[p + "down_proj.weight"])


def moe(cfg, W, p, x):
    probs = torch.softmax(linear(x, W[p + "gate.weight"]), -1)
    weights, experts = torch.topk(probs, cfg["num_experts_per_tok"], -1)
    if cfg.get("norm_topk_prob", False):
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(experts.shape[1]):
            e = int(experts[t, j])
            out[t] += weights[t, j] * mlp(W, f"{p}experts.{e}.", x[t:t + 1])[0]
    return out


def is_moe_layer(cfg, i):
    if cfg["model_type"] != "qwen3_moe" or cfg.get("num_experts", 0) <= 0:
        return False
    if i in cfg.get("mlp_only_layers", []):
        return False
    return (i + 1) % cfg.get("decoder_sparse_step", 1) == 0


def full_logprobs(cfg, W, tokens, temperature=1.0):
    """[T, V] log-softmax of the next-token logits / temperature at every position."""
    x = W["model.embed_tokens.weight"][torch.tensor(tokens)]
    eps = cfg["rms_norm_eps"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = x + attention(cfg, W, p + "self_attn.", rms_norm(x, W[p + "input_layernorm.weight"], eps))
        normed = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        x = h + (moe(cfg, W, p + "mlp.", normed) if is_moe_layer(cfg, i) else mlp(W, p + "mlp.", normed))
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return torch.log_softmax(x @ head.T / temperature, -1)


def load(model_dir):
    with open(model_dir + "/config.json") as f:
        cfg = json.load(f)
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return cfg, read_safetensors(model_dir + "/model.safetensors")


def logprobs(cfg, W, tokens):
    lp = full_logprobs(cfg, W, tokens)
    return [float(lp[i, tokens[i + 1]]) for i in range(len(tokens) - 1)]


def main():
    model_dir, input_path, output_path = sys.argv[1:4]
    cfg, W = load(model_dir)
    with open(input_path) as f, open(output_path, "w") as out:
        for line in f:
            if line.strip():
                out.write(json.dumps({"logprobs": logprobs(cfg, W, json.loads(line)["tokens"])}) + "\n")


if __name__ == "__main__":
    main()
