#!/usr/bin/python3
"""Independent reference for `loom kl`: the per-token reverse KL of OPD.

Usage: reference_kl.py STUDENT_DIR TEACHER_DIR TEMPERATURE INPUT.jsonl OUTPUT.jsonl

For every input line {"tokens": [ids], "response_start": k} writes
{"kl": [...]}: for each response token t >= k, KL(p_student || p_teacher) of
the two models' distributions over token t given tokens[:t], both at the
temperature, summed over the whole vocabulary in float64. The forward passes
are reference_logprobs.py's (the Hugging Face equations, weights parsed with
numpy). Run with Debian's /usr/bin/python3 (python3-torch, numpy).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_logprobs import full_logprobs, load  # noqa: E402

import torch  # noqa: E402


def main():
    student_dir, teacher_dir, temperature, input_path, output_path = sys.argv[1:6]
    temperature = float(temperature)
    student, teacher = load(student_dir), load(teacher_dir)
    with open(input_path) as f, open(output_path, "w") as out:
        for line in f:
            if not line.strip():
                continue
            item = json.loads(line)
            tokens, k = item["tokens"], item["response_start"]
            log_p = full_logprobs(*student, tokens, temperature)[k - 1:len(tokens) - 1]
            log_q = full_logprobs(*teacher, tokens, temperature)[k - 1:len(tokens) - 1]
            kl = (torch.exp(log_p) * (log_p - log_q)).sum(-1)
            out.write(json.dumps({"kl": [float(v) for v in kl]}) + "\n")


if __name__ == "__main__":
    main()
