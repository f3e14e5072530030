#!/usr/bin/python3
"""The eager-PyTorch reference of TARGETS.md for `loom bench model`: the same
~18M Llama (hidden 512, 6 layers, 8 heads, 4 KV heads, head_dim 64,
intermediate 1408, vocab 512) written as a plain Python/PyTorch loop the way
an HF-style eager implementation runs it:
  * greedy decode with a concatenated KV cache (torch.cat per step), batch
    1 / 8 / 64, 16-token prompt, N new tokens (prefill excluded from the time)
  * a training step (forward, backward, torch.optim.AdamW), batch 8 x 256
Run beside `loom bench model` in the same session (same --threads) so the two
are compared as a ratio. Prints one JSON line.

Usage: eager_bench.py [--threads N] [--steps N]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

H, L, NH, KVH, HD, I, V = 512, 6, 8, 4, 64, 1408, 512


def init(gen):
    def w(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).requires_grad_()
    layers = [dict(q=w(NH * HD, H), k=w(KVH * HD, H), v=w(KVH * HD, H), o=w(H, NH * HD),
                   g=w(I, H), u=w(I, H), d=w(H, I), n1=torch.ones(H, requires_grad=True),
                   n2=torch.ones(H, requires_grad=True)) for _ in range(L)]
    return dict(e=w(V, H), layers=layers, n=torch.ones(H, requires_grad=True), head=w(V, H))


def params(m):
    out = [m["e"], m["n"], m["head"]]
    for layer in m["layers"]:
        out += list(layer.values())
    return out


def rms(x, w):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def rope(x, pos):
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
    f = pos.float()[:, None] * inv[None]
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(m, ids, start=0, cache=None):
    """ids [B, T] at positions start..start+T-1; cache: per layer [k, v] or None."""
    b, t = ids.shape
    pos = torch.arange(start, start + t)
    x = F.embedding(ids, m["e"])
    s = start + t
    mask = torch.full((t, s), float("-inf")).triu(start + 1)
    for i, l in enumerate(m["layers"]):
        h = rms(x, l["n1"])
        q = rope((h @ l["q"].T).view(b, t, NH, HD).transpose(1, 2), pos)
        k = rope((h @ l["k"].T).view(b, t, KVH, HD).transpose(1, 2), pos)
        v = (h @ l["v"].T).view(b, t, KVH, HD).transpose(1, 2)
        if cache is not None:
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], 2)
                v = torch.cat([cache[i][1], v], 2)
            cache[i] = [k, v]
        k = k.repeat_interleave(NH // KVH, 1)
        v = v.repeat_interleave(NH // KVH, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) / HD ** 0.5 + mask, -1) @ v
        x = x + a.transpose(1, 2).reshape(b, t, -1) @ l["o"].T
        h = rms(x, l["n2"])
        x = x + (F.silu(h @ l["g"].T) * (h @ l["u"].T)) @ l["d"].T
    return rms(x, m["n"]) @ m["head"].T


def decode(m, batch, steps):
    with torch.no_grad():
        ids = torch.stack([torch.tensor([(b * 131 + i * 7919) % V for i in range(16)])
                           for b in range(batch)])
        cache = [None] * L
        nxt = forward(m, ids, 0, cache)[:, -1].argmax(-1)
        start = time.time()
        for s in range(steps):
            nxt = forward(m, nxt[:, None], 16 + s, cache)[:, -1].argmax(-1)
        return batch * steps / (time.time() - start)


def train(m, steps):
    opt = torch.optim.AdamW(params(m), lr=1e-4)
    ids = torch.stack([torch.tensor([(b * 131 + i * 7919) % V for i in range(257)])
                       for b in range(8)])
    seconds = 0.0
    for s in range(steps + 1):  # step 0 warms up
        start = time.time()
        opt.zero_grad()
        loss = F.cross_entropy(forward(m, ids[:, :-1]).reshape(-1, V), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        if s:
            seconds += time.time() - start
    return 8 * 256 * steps / seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--train-steps", type=int, default=3)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    m = init(torch.Generator().manual_seed(0))
    r = {"threads": torch.get_num_threads(),
         "decode_tokens_per_s": {f"batch_{b}": decode(m, b, a.steps) for b in (1, 8, 64)},
         "train_tokens_per_s": train(m, a.train_steps)}
    print(json.dumps(r))


if __name__ == "__main__":
    main()
