#!/usr/bin/env python3
"""Generates the difficulty-filter demonstration's task files (docs/tasks.md,
"Online difficulty filtering").

    scripts/gen_filter_tasks.py [--out DIR] [--seed N] [--train N] [--eval N]
                                [--duplicates N]

Writes DIR/filter-train.jsonl and DIR/filter-eval.jsonl (default DIR:
configs/tasks), single-turn JSONL problems in the arithmetic generator's
own prompt format ("Compute: 47+38"), so that a model taught that format
by SFT (configs/filter-demo-sft.yaml) reads them all alike. Three kinds,
named by each line's id:

  trivial-NNN     30%: a regex verifier that takes any answer (".*"): every
                  sample passes, so no GRPO subgroup of it has variance;
  unsolvable-NNN  30%: an answer key off by a constant (a+b+37): no sample
                  of a model that adds passes, so none has variance either;
  medium-NNN      40%: the true result (numeric verifier): what the SFT
                  model gets right part of the time and GRPO improves.

The held-out file holds medium problems only, none of whose prompts is a
training prompt. `--duplicates N` plants N near-duplicate pairs in the
training file (a medium problem's prompt again with a trailing period) for
`loom tasks dedup` to find; they are named dup-NNN. The same seed gives the
same files, byte for byte.
"""

import argparse
import json
import os
import random


def problem(a, b, op):
    result = a + b if op == "+" else a - b
    return "Compute: %d%s%d" % (a, op, b), result


def draw(rng, seen):
    """Operands no earlier problem had in this order ("94+62" and "94-62"
    would read alike to a word-shingle comparison)."""
    while True:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op = rng.choice("+-")
        if op == "-" and a < b:
            a, b = b, a
        if (a, b) not in seen:
            seen.add((a, b))
            return a, b, op


def line(task_id, prompt, answer, verifier):
    return json.dumps(
        {
            "id": task_id,
            "messages": [{"role": "user", "content": prompt}],
            "answer": answer,
            "verifier": verifier,
        },
        sort_keys=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="configs/tasks")
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument("--train", type=int, default=200)
    parser.add_argument("--eval", type=int, default=200)
    parser.add_argument("--duplicates", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen = set()
    trivial = unsolvable = args.train * 3 // 10
    medium = args.train - trivial - unsolvable
    lines = []
    for i in range(trivial):
        prompt, _ = problem(*draw(rng, seen))
        lines.append(line("trivial-%03d" % i, prompt, ".*", "regex"))
    for i in range(unsolvable):
        prompt, result = problem(*draw(rng, seen))
        lines.append(line("unsolvable-%03d" % i, prompt, str(result + 37), "numeric"))
    mediums = []
    for i in range(medium):
        prompt, result = problem(*draw(rng, seen))
        mediums.append((prompt, result))
        lines.append(line("medium-%03d" % i, prompt, str(result), "numeric"))
    for i, (prompt, result) in enumerate(mediums[: args.duplicates]):
        lines.append(line("dup-%03d" % i, prompt + ".", str(result), "numeric"))
    rng.shuffle(lines)
    held_out = []
    for i in range(args.eval):
        prompt, result = problem(*draw(rng, seen))
        held_out.append(line("eval-%03d" % i, prompt, str(result), "numeric"))
    os.makedirs(args.out, exist_ok=True)
    for name, rows in (("filter-train.jsonl", lines), ("filter-eval.jsonl", held_out)):
        with open(os.path.join(args.out, name), "w") as f:
            f.write("\n".join(rows) + "\n")
    print("wrote %d training and %d held-out problems to %s" % (len(lines), len(held_out), args.out))


if __name__ == "__main__":
    main()
