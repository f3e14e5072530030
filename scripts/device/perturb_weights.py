#!/usr/bin/env python3
"""Rewrites the float32 tensors of a model.safetensors in place with weights
large enough that every detail of the forward shows in the log-probs (a fresh
`loom init-model` uses std 0.02, whose log-probs are nearly uniform and would
hide a wrong RoPE, norm or router): matrices ~ N(0, 0.15^2), norm weights
~ 1 + N(0, 0.2^2), biases ~ N(0, 0.2^2). numpy only.

Usage: perturb_weights.py MODEL.safetensors SEED
"""
import json
import struct
import sys

import numpy as np


def main():
    path, seed = sys.argv[1], int(sys.argv[2])
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    rng = np.random.default_rng(seed)
    for name in sorted(header):
        entry = header[name]
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {entry['dtype']}, expected F32")
        begin, end = entry["data_offsets"]
        shape = entry["shape"]
        if len(shape) == 1:
            values = (1.0 if "norm" in name else 0.0) + 0.2 * rng.standard_normal(shape)
        else:
            values = 0.15 * rng.standard_normal(shape)
        data[begin:end] = values.astype("<f4").tobytes()
    with open(path, "wb") as f:
        f.write(raw[:8 + n])
        f.write(data)


if __name__ == "__main__":
    main()
