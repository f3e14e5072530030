#!/usr/bin/env python3
"""Summarises scripts/filter_demo.sh's runs as one JSON object.

    scripts/filter_demo.py OUT_DIR SEED...

Per seed and run (off: no filter, on: the filter, half: the filter at half
the rollout batch):
  steps                the GRPO steps taken (fewer than train.grpo.steps when
                       the filter retired every task);
  informative          mean informative_subgroup_fraction over the GRPO steps
                       after the first epoch of the task file (the steps
                       that start after one prompt of 8 samples per task);
  accuracy             held-out accuracy after SFT and at every evaluation;
  rollout_tokens       generated tokens over the whole GRPO stage;
  tokens_to_match      (on, half) generated tokens until the run's held-out
                       accuracy first reached the unfiltered run's final one,
                       and its ratio to the unfiltered run's tokens;
  off_at_same_tokens   (on, half) the unfiltered run's held-out accuracy at
                       its last evaluation within this run's rollout tokens;
  retired              (on, half) the tasks retired, by kind (the id's prefix).
Then the audit's always_solved and never_solved flags against the task kinds
(precision and recall), and the planted near-duplicates dedup found.
"""

import json
import os
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def kind(task_id):
    return task_id.split("-")[0]


def run_summary(run_dir, tasks):
    steps, evals, tokens = [], [], 0
    for r in lines(os.path.join(run_dir, "metrics.jsonl")):
        if r.get("stage") != "grpo":
            continue
        if "eval_accuracy" in r:
            evals.append((r["step"], r["eval_accuracy"], tokens))
        elif "event" not in r and "informative_subgroup_fraction" in r:
            tokens += r["decode_tokens"]
            steps.append(r)
    late, drawn = [], 0
    for s in steps:
        if drawn >= tasks * 8:
            late.append(s["informative_subgroup_fraction"])
        drawn += s["samples"]
    return {
        "steps": len(steps),
        "informative": sum(late) / max(len(late), 1),
        "informative_first_steps": [round(s["informative_subgroup_fraction"], 3) for s in steps[:8]],
        "accuracy": [(step, round(acc, 4)) for step, acc, _ in evals],
        "rollout_tokens": tokens,
        "evals": evals,
    }


def main():
    out, seeds = sys.argv[1], sys.argv[2:]
    labels = {}
    with open("configs/tasks/filter-train.jsonl") as f:
        for l in f:
            labels[json.loads(l)["id"]] = kind(json.loads(l)["id"])
    tasks = len(labels)
    result = {"seeds": {}}
    for seed in seeds:
        d = os.path.join(out, "seed" + seed)
        sft = [r for r in lines(os.path.join(d, "sft", "metrics.jsonl")) if "eval_accuracy" in r]
        runs = {name: run_summary(os.path.join(d, name), tasks) for name in ("off", "on", "half")}
        target = runs["off"]["evals"][-1][1]
        for name in ("on", "half"):
            run = runs[name]
            within = [acc for _, acc, t in runs["off"]["evals"] if t <= run["rollout_tokens"]]
            run["off_at_same_tokens"] = within[-1] if within else None
            reached = [t for _, acc, t in run["evals"] if acc >= target]
            run["tokens_to_match"] = reached[0] if reached else None
            run["tokens_ratio"] = (reached[0] / runs["off"]["rollout_tokens"]) if reached else None
            retired = {}
            path = os.path.join(d, name, "retired_tasks.jsonl")
            for r in lines(path) if os.path.exists(path) else []:
                retired[kind(r["task"])] = retired.get(kind(r["task"]), 0) + 1
            run["retired"] = retired
        for r in runs.values():
            del r["evals"]
        audit_text = open(os.path.join(d, "audit.out")).read()
        audit = json.loads(audit_text[audit_text.rfind("\n{") + 1:])
        scores = {}
        for flag, truth in (("always_solved", "trivial"), ("never_solved", "unsolvable")):
            flagged = {f["task_id"] for f in audit["flags"] if f["flag"] == flag}
            actual = {t for t, k in labels.items() if k == truth}
            hit = len(flagged & actual)
            scores[flag] = {
                "flagged": len(flagged),
                "precision": hit / max(len(flagged), 1),
                "recall": hit / len(actual),
                "others_flagged": sorted(flagged - actual),
            }
        result["seeds"][seed] = {"sft_accuracy": sft[-1]["eval_accuracy"] if sft else None,
                                 "off": runs["off"], "on": runs["on"], "half": runs["half"],
                                 "audit": scores}
    dedup_text = open(os.path.join(out, "dedup.out")).read()
    dedup = json.loads(dedup_text[dedup_text.rfind("\n{") + 1:])
    planted = {(p["a"], p["b"]) for p in dedup["pairs"]}
    dups = [p for p in dedup["pairs"] if "dup" in (kind(p["a"]), kind(p["b"]))]
    result["dedup"] = {"pairs": len(planted), "planted_found": len(dups), "planted": 10}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
