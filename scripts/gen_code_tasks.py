#!/usr/bin/env python3
"""Generates loom's shipped agent task set (kind agent_jsonl, docs/tasks.md).

    scripts/gen_code_tasks.py [--out DIR] [--seed N] [--train N] [--eval N]

Writes DIR/code-train.jsonl and DIR/code-eval.jsonl (default DIR:
configs/tasks): small repair and implementation tasks, in Python and in
shell, four kinds:

  py-fix   a module of three functions, one with a planted bug;
  py-impl  a module of three functions, one a stub to write from its docstring;
  sh-fix   a shell script with a planted bug;
  sh-impl  a shell script to write from its usage comment.

Every task has unittest tests (the verification runs them with loom's own
runner), a reference solution (the fixed or written file) and tags. Which
tests are fail-to-pass and which pass-to-pass is not declared but measured:
the generator runs every test against the task as given and against its
reference, in a scratch directory. A reference that fails a test is a
generator bug (it stops); an instance whose given code passes every test
(its planted bug does not show on the drawn inputs) or hangs is drawn again. The
same seed gives the same files, byte for byte. The held-out split takes
whole instances by a seeded draw; no two tasks share their files.
`loom tasks check` then checks the same in real sandboxes.
"""

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------- python

# Each function: its signature, docstring, correct body, planted bugs (a
# replacement in the body) and a case generator (rng -> argument tuples),
# with fixed edge cases. Expected values come from running the body.
FUNCTIONS = [
    dict(name="clamp", args="value, low, high",
         doc="Returns value limited to the closed range [low, high].",
         body="if value < low:\n    return low\nif value > high:\n    return high\nreturn value",
         bugs=[("    return high", "    return low"), ("value < low", "value <= high")],
         cases=lambda r: [(r.randint(-50, 50), -r.randint(0, 20), r.randint(0, 20)) for _ in range(6)],
         edges=[(5, 0, 10), (-3, 0, 10), (99, 0, 10), (10, 0, 10)]),
    dict(name="mean", args="values",
         doc="Returns the arithmetic mean of values, or 0.0 for an empty list.",
         body="if not values:\n    return 0.0\nreturn sum(values) / len(values)",
         bugs=[("return sum(values) / len(values)", "return sum(values) / (len(values) + 1)"),
               ("return sum(values) / len(values)", "return sum(values) // len(values)")],
         cases=lambda r: [([r.randint(-9, 9) for _ in range(r.randint(1, 6))],) for _ in range(5)],
         edges=[([],), ([3, 4],), ([7],)]),
    dict(name="count_above", args="values, threshold",
         doc="Returns how many values are strictly greater than threshold.",
         body="return sum(1 for v in values if v > threshold)",
         bugs=[("v > threshold", "v >= threshold"), ("v > threshold", "v < threshold")],
         cases=lambda r: [([r.randint(0, 9) for _ in range(r.randint(3, 8))], r.randint(2, 7)) for _ in range(5)],
         edges=[([], 3), ([3, 3, 4], 3), ([1, 2], 5)]),
    dict(name="last_n", args="items, n",
         doc="Returns the last n items of the list (all of them when n exceeds its length; none when n <= 0).",
         body="if n <= 0:\n    return []\nreturn items[-n:]",
         bugs=[("return items[-n:]", "return items[-n + 1:]"), ("if n <= 0:", "if n < 0:")],
         cases=lambda r: [([r.randint(0, 99) for _ in range(r.randint(2, 7))], r.randint(1, 4)) for _ in range(5)],
         edges=[([1, 2, 3], 0), ([1, 2], 5), ([4, 5, 6], 1)]),
    dict(name="is_palindrome", args="text",
         doc="Whether text reads the same backwards, ignoring case and every character that is not a letter or digit.",
         body="kept = [c.lower() for c in text if c.isalnum()]\nreturn kept == kept[::-1]",
         bugs=[("c.lower() for c", "c for c"), ("if c.isalnum()", "if c != ' '")],
         cases=lambda r: [(w,) for w in r.sample(["Level", "No lemon, no melon", "abcba", "abca", "Was it a car", "Step on no pets!", "loom", "A man, a plan, a canal: Panama"], 5)],
         edges=[("",), ("Aa",), ("ab",), ("Racecar!",)]),
    dict(name="dedupe", args="items",
         doc="Returns the items without repeats, each kept where it first appears.",
         body="seen = set()\nout = []\nfor item in items:\n    if item not in seen:\n        seen.add(item)\n        out.append(item)\nreturn out",
         bugs=[("        seen.add(item)\n", ""), ("out.append(item)", "out.insert(0, item)")],
         cases=lambda r: [([r.randint(0, 5) for _ in range(r.randint(3, 9))],) for _ in range(5)],
         edges=[([],), ([2, 1, 2, 1],), ([5],)]),
    dict(name="chunk", args="items, size",
         doc="Splits the list into consecutive chunks of `size` items; the last may be shorter.",
         body="return [items[i:i + size] for i in range(0, len(items), size)]",
         bugs=[("range(0, len(items), size)", "range(0, len(items) - 1, size)"), ("items[i:i + size]", "items[i:i + size - 1]")],
         cases=lambda r: [(list(range(r.randint(2, 9))), r.randint(2, 4)) for _ in range(5)],
         edges=[([], 3), ([1, 2, 3, 4], 2), ([1], 5)]),
    dict(name="running_total", args="values",
         doc="Returns the list of running sums: element i is the sum of values[0..i].",
         body="out = []\ntotal = 0\nfor v in values:\n    total += v\n    out.append(total)\nreturn out",
         bugs=[("    total += v\n    out.append(total)", "    out.append(total)\n    total += v"), ("total += v", "total = v")],
         cases=lambda r: [([r.randint(-5, 9) for _ in range(r.randint(2, 6))],) for _ in range(5)],
         edges=[([],), ([4],), ([1, 1, 1],)]),
    dict(name="rle_encode", args="text",
         doc="Run-length encodes text: each run of one character becomes the character and the run's length, e.g. 'aab' -> 'a2b1'.",
         body="out = ''\ni = 0\nwhile i < len(text):\n    j = i\n    while j < len(text) and text[j] == text[i]:\n        j += 1\n    out += text[i] + str(j - i)\n    i = j\nreturn out",
         bugs=[("str(j - i)", "str(j - i - 1)"), ("out += text[i] + str(j - i)", "out += str(j - i) + text[i]")],
         cases=lambda r: [("".join(r.choice("ab") * r.randint(1, 3) for _ in range(r.randint(1, 4))),) for _ in range(5)],
         edges=[("",), ("x",), ("aaab",)]),
    dict(name="caesar", args="text, shift",
         doc="Shifts every lower-case letter of text `shift` places along the alphabet, wrapping from z to a; other characters stay.",
         body="out = ''\nfor c in text:\n    if 'a' <= c <= 'z':\n        out += chr((ord(c) - ord('a') + shift) % 26 + ord('a'))\n    else:\n        out += c\nreturn out",
         bugs=[("% 26", "% 25"), ("'a' <= c <= 'z'", "'a' <= c < 'z'")],
         cases=lambda r: [(r.choice(["hello", "xyz", "loom weaves", "zebra!", "abc"]), r.randint(1, 25)) for _ in range(5)],
         edges=[("", 3), ("z", 1), ("A-b", 2)]),
    dict(name="digit_sum", args="n",
         doc="Returns the sum of the decimal digits of the integer n (of its absolute value).",
         body="n = abs(n)\ntotal = 0\nwhile n > 0:\n    total += n % 10\n    n //= 10\nreturn total",
         bugs=[("n = abs(n)\n", ""), ("while n > 0:", "while n > 9:")],
         cases=lambda r: [(r.randint(10, 99999),) for _ in range(5)],
         edges=[(0,), (-42,), (7,)]),
    dict(name="max_gap", args="values",
         doc="Returns the largest difference between neighbours of the sorted values, or 0 with fewer than two values.",
         body="if len(values) < 2:\n    return 0\nordered = sorted(values)\nreturn max(b - a for a, b in zip(ordered, ordered[1:]))",
         bugs=[("ordered = sorted(values)", "ordered = list(values)"), ("zip(ordered, ordered[1:])", "zip(ordered, ordered[2:])")],
         cases=lambda r: [(r.sample(range(0, 60), r.randint(3, 7)),) for _ in range(5)],
         edges=[([],), ([5],), ([9, 1],)]),
    dict(name="median", args="values",
         doc="Returns the median of a non-empty list: the middle value, or the mean of the two middle values.",
         body="ordered = sorted(values)\nmid = len(ordered) // 2\nif len(ordered) % 2:\n    return ordered[mid]\nreturn (ordered[mid - 1] + ordered[mid]) / 2",
         bugs=[("ordered = sorted(values)", "ordered = list(values)"), ("(ordered[mid - 1] + ordered[mid]) / 2", "ordered[mid]")],
         cases=lambda r: [(r.sample(range(-20, 40), r.randint(2, 7)),) for _ in range(5)],
         edges=[([4],), ([1, 2],), ([3, 1, 2],)]),
    dict(name="second_largest", args="values",
         doc="Returns the second largest distinct value, or None when there are fewer than two distinct values.",
         body="distinct = sorted(set(values))\nif len(distinct) < 2:\n    return None\nreturn distinct[-2]",
         bugs=[("sorted(set(values))", "sorted(values)"), ("return distinct[-2]", "return distinct[1]")],
         cases=lambda r: [([r.randint(0, 9) for _ in range(r.randint(4, 8))],) for _ in range(5)],
         edges=[([],), ([3, 3],), ([1, 5, 5],), ([2, 9, 4, 7],)]),
    dict(name="count_vowels", args="text",
         doc="Returns how many vowels (a, e, i, o, u, either case) text holds.",
         body="return sum(1 for c in text.lower() if c in 'aeiou')",
         bugs=[("text.lower()", "text"), ("'aeiou'", "'aeio'")],
         cases=lambda r: [(r.choice(["Loom", "queue", "rhythm", "Ukulele", "AEIOU and you", "bureau"]),) for _ in range(5)],
         edges=[("",), ("U",), ("xyz",)]),
    dict(name="merge_sorted", args="a, b",
         doc="Merges two ascending lists into one ascending list.",
         body="out = []\ni = j = 0\nwhile i < len(a) and j < len(b):\n    if a[i] <= b[j]:\n        out.append(a[i])\n        i += 1\n    else:\n        out.append(b[j])\n        j += 1\nreturn out + a[i:] + b[j:]",
         bugs=[("return out + a[i:] + b[j:]", "return out + a[i:]"), ("a[i] <= b[j]", "a[i] >= b[j]")],
         cases=lambda r: [(sorted(r.sample(range(30), r.randint(1, 5))), sorted(r.sample(range(30), r.randint(1, 5)))) for _ in range(5)],
         edges=[([], []), ([1], []), ([], [2, 3])]),
    dict(name="flatten", args="nested",
         doc="Flattens a list of lists by one level.",
         body="out = []\nfor part in nested:\n    out.extend(part)\nreturn out",
         bugs=[("out.extend(part)", "out.append(part)"), ("for part in nested:", "for part in nested[1:]:")],
         cases=lambda r: [([[r.randint(0, 9) for _ in range(r.randint(0, 3))] for _ in range(r.randint(1, 4))],) for _ in range(5)],
         edges=[([],), ([[1], [2, 3]],), ([[], [4]],)]),
    dict(name="word_lengths", args="text",
         doc="Returns a dict from each word of text (split on whitespace) to its length.",
         body="return {word: len(word) for word in text.split()}",
         bugs=[("text.split()", "text.split(' ')"), ("len(word)", "len(word) - 1")],
         cases=lambda r: [(" ".join(r.sample(["loom", "weave", "thread", "a", "shuttle", "warp"], r.randint(1, 4))),) for _ in range(5)],
         edges=[("",), ("one  two",), ("x",)]),
    dict(name="fizzbuzz", args="n",
         doc="Returns the FizzBuzz words for 1..n: 'Fizz' for multiples of 3, 'Buzz' of 5, 'FizzBuzz' of both, else the number as a string.",
         body="out = []\nfor i in range(1, n + 1):\n    if i % 15 == 0:\n        out.append('FizzBuzz')\n    elif i % 3 == 0:\n        out.append('Fizz')\n    elif i % 5 == 0:\n        out.append('Buzz')\n    else:\n        out.append(str(i))\nreturn out",
         bugs=[("range(1, n + 1)", "range(1, n)"), ("i % 15 == 0", "i % 10 == 0")],
         cases=lambda r: [(r.randint(15, 31),) for _ in range(3)],
         edges=[(0,), (5,), (15,)]),
    dict(name="gcd", args="a, b",
         doc="Returns the greatest common divisor of two non-negative integers (gcd(0, 0) is 0).",
         body="while b:\n    a, b = b, a % b\nreturn a",
         bugs=[("a, b = b, a % b", "a, b = b, a // b"), ("return a", "return b")],
         cases=lambda r: [(r.randint(1, 500), r.randint(1, 500)) for _ in range(5)],
         edges=[(0, 0), (12, 0), (0, 9), (21, 6)]),
]

MODULES = ["util", "helpers", "tools", "common", "core", "misc", "funcs", "lib"]


def indent(text, prefix="    "):
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(True))


def function_source(f, body=None, stub=False):
    doc = f'    """{f["doc"]}"""\n'
    code = "    raise NotImplementedError\n" if stub else indent(body or f["body"]) + "\n"
    return f"def {f['name']}({f['args']}):\n{doc}{code}"


def call(f, args):
    scope = {}
    exec(function_source(f), scope)
    return scope[f["name"]](*args)


def class_name(name):
    return "".join(part.capitalize() for part in name.split("_")) + "Test"


def test_module(module, functions, rng):
    """Returns the test file's text and its test ids, a class per function."""
    lines = ["import unittest", "", f"from {module} import {', '.join(f['name'] for f in functions)}", ""]
    ids = []
    for f in functions:
        cls = class_name(f["name"])
        lines += ["", f"class {cls}(unittest.TestCase):"]
        for method, cases in (("test_typical", f["cases"](rng)), ("test_edges", f["edges"])):
            lines.append(f"    def {method}(self):")
            for args in cases:
                expected = call(f, args)
                shown = ", ".join(repr(a) for a in args)
                lines.append(f"        self.assertEqual({f['name']}({shown}), {expected!r})")
            lines.append("")
            ids.append(f"test_{module}.{cls}.{method}")
    lines += ["", 'if __name__ == "__main__":', "    unittest.main()", ""]
    return "\n".join(lines), ids


def python_task(rng, kind):
    module = rng.choice(MODULES)
    functions = rng.sample(FUNCTIONS, 3)
    target = rng.randrange(3)
    f = functions[target]
    given, fixed = [], []
    bug = None
    for i, g in enumerate(functions):
        fixed.append(function_source(g))
        if i != target:
            given.append(function_source(g))
        elif kind == "impl":
            given.append(function_source(g, stub=True))
        else:
            old, new = bug = rng.choice(g["bugs"])
            assert old in g["body"], (g["name"], old)
            given.append(function_source(g, body=g["body"].replace(old, new, 1)))
    tests, ids = test_module(module, functions, rng)
    path = f"{module}.py"
    if kind == "impl":
        problem = (f"Implement `{f['name']}` in {path} as its docstring says; the other functions "
                   f"there already work. The tests are in test_{module}.py "
                   f"(`python3 -m unittest`).")
    else:
        problem = (f"{path} fails its unit tests (`python3 -m unittest`). Find the bug and fix "
                   f"{path}, not the tests.")
    return dict(
        problem=problem,
        files={path: "\n\n".join(given), f"test_{module}.py": tests},
        reference={path: "\n\n".join(fixed)},
        answer=path, ids=ids, tags=["python", "repair" if kind == "fix" else "implement", f["name"]],
        detail=f["name"] + ("" if bug is None else f": {bug[0].strip()!r} -> {bug[1].strip()!r}"))


# ----------------------------------------------------------------- shell

# Each script: what it does, its correct body (argument: the input file),
# bugs, and input generators. The tests run it with bash on inputs the test
# writes, and compare its output with what the correct script printed here.
SCRIPTS = [
    dict(name="count_nonempty", usage="Prints how many lines of FILE are not empty.",
         body='grep -c . "$1"',
         bugs=[('grep -c . "$1"', 'wc -l < "$1"'), ('grep -c . "$1"', 'grep -c "" "$1"')],
         inputs=lambda r: ["\n".join(r.choice(["a", "", "bc", "", "d e"]) for _ in range(r.randint(3, 7))) + "\n" for _ in range(3)]),
    dict(name="sum_column", usage="Prints the sum of the second whitespace-separated column of FILE.",
         body="awk '{ s += $2 } END { print s + 0 }' \"$1\"",
         bugs=[("s += $2", "s += $1"), ("s += $2", "s = $2")],
         inputs=lambda r: ["".join(f"{r.randint(1, 9)} {r.randint(1, 99)}\n" for _ in range(r.randint(2, 6))) for _ in range(3)]),
    dict(name="sort_numbers", usage="Prints the numbers of FILE, one per line, in ascending numeric order.",
         body='sort -n "$1"',
         bugs=[('sort -n "$1"', 'sort "$1"'), ('sort -n "$1"', 'sort -rn "$1"')],
         inputs=lambda r: ["".join(f"{r.randint(1, 200)}\n" for _ in range(r.randint(3, 7))) for _ in range(3)]),
    dict(name="count_unique", usage="Prints how many distinct lines FILE holds.",
         body='sort -u "$1" | wc -l',
         bugs=[('sort -u "$1" | wc -l', 'uniq "$1" | wc -l'), ('sort -u "$1" | wc -l', 'wc -l < "$1"')],
         inputs=lambda r: ["".join(r.choice(["x\n", "y\n", "z\n"]) for _ in range(r.randint(4, 8))) for _ in range(3)]),
    dict(name="upper_case", usage="Prints FILE with every lower-case letter made upper case.",
         body="tr '[:lower:]' '[:upper:]' < \"$1\"",
         bugs=[("tr '[:lower:]' '[:upper:]'", "tr '[:upper:]' '[:lower:]'"), ("tr '[:lower:]' '[:upper:]'", "tr 'a-y' 'A-Y'")],
         inputs=lambda r: [" ".join(r.sample(["loom", "Zig", "zag", "warp", "weft"], 3)) + "\n" for _ in range(3)]),
    dict(name="last_field", usage="Prints the last comma-separated field of every line of FILE.",
         body="awk -F, '{ print $NF }' \"$1\"",
         bugs=[("-F,", "-F' '"), ("$NF", "$2")],
         inputs=lambda r: ["".join(",".join(str(r.randint(0, 9)) for _ in range(r.randint(3, 4))) + "\n" for _ in range(r.randint(2, 4))) for _ in range(3)]),
    dict(name="first_lines", usage="Prints the first three lines of FILE.",
         body='head -n 3 "$1"',
         bugs=[('head -n 3 "$1"', 'head -n 2 "$1"'), ('head -n 3 "$1"', 'tail -n 3 "$1"')],
         inputs=lambda r: ["".join(f"line {i}\n" for i in range(r.randint(4, 7))) for _ in range(3)]),
    dict(name="count_word", usage="Prints how many lines of FILE contain the word ERROR (upper case, as a whole word).",
         body='grep -cw ERROR "$1"',
         bugs=[('grep -cw ERROR "$1"', 'grep -c ERROR "$1"'), ('grep -cw ERROR "$1"', 'grep -ciw ERROR "$1"')],
         inputs=lambda r: ["".join(r.choice(["ERROR disk\n", "ok\n", "ERRORS seen\n", "error low\n", "x ERROR\n"]) for _ in range(r.randint(3, 6))) for _ in range(3)]),
    dict(name="reverse_lines", usage="Prints the lines of FILE in reverse order.",
         body='tac "$1"',
         bugs=[('tac "$1"', 'cat "$1"'), ('tac "$1"', 'sort -r "$1"')],
         inputs=lambda r: ["".join(f"{w}\n" for w in r.sample(["alpha", "delta", "beta", "gamma", "omega"], 4)) for _ in range(3)]),
    dict(name="max_value", usage="Prints the largest number in FILE (one number per line).",
         body='sort -n "$1" | tail -n 1',
         bugs=[('sort -n "$1" | tail -n 1', 'sort "$1" | tail -n 1'), ('sort -n "$1" | tail -n 1', 'sort -n "$1" | head -n 1')],
         inputs=lambda r: ["".join(f"{r.randint(1, 150)}\n" for _ in range(r.randint(3, 6))) for _ in range(3)]),
]


def script_text(s, body):
    return f"#!/bin/bash\n# Usage: {s['name']}.sh FILE\n# {s['usage']}\n{body}\n"


def run_script(text, data):
    with tempfile.TemporaryDirectory() as d:
        script, path = os.path.join(d, "s.sh"), os.path.join(d, "in.txt")
        with open(script, "w") as out:
            out.write(text)
        with open(path, "w") as out:
            out.write(data)
        return subprocess.run(["bash", script, path], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}).stdout


SHELL_TEST = '''import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def run(data):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "input.txt")
        with open(path, "w") as out:
            out.write(data)
        return subprocess.run(["bash", os.path.join(HERE, "{name}.sh"), path],
                              capture_output=True, text=True, timeout=10,
                              env={{"PATH": "/usr/bin:/bin", "LC_ALL": "C"}}).stdout


class {cls}(unittest.TestCase):
{methods}

if __name__ == "__main__":
    unittest.main()
'''


def shell_task(rng, kind):
    s = rng.choice(SCRIPTS)
    good = script_text(s, s["body"])
    if kind == "impl":
        given = f"#!/bin/bash\n# Usage: {s['name']}.sh FILE\n# {s['usage']}\n# TODO: write it.\nexit 1\n"
        bug = None
    else:
        old, new = bug = rng.choice(s["bugs"])
        given = script_text(s, s["body"].replace(old, new, 1))
    cls = class_name(s["name"])
    methods, ids = [], []
    for i, data in enumerate(s["inputs"](rng)):
        methods.append(f"    def test_input_{i}(self):\n"
                       f"        self.assertEqual(run({data!r}), {run_script(good, data)!r})\n")
        ids.append(f"test_{s['name']}.{cls}.test_input_{i}")
    tests = SHELL_TEST.format(name=s["name"], cls=cls, methods="\n".join(methods))
    path = f"{s['name']}.sh"
    if kind == "impl":
        problem = (f"Write {path}: {s['usage'][0].lower()}{s['usage'][1:]} (FILE is its first "
                   f"argument). test_{s['name']}.py tests it (`python3 -m unittest`).")
    else:
        problem = (f"{path} should do what its usage comment says, but its test "
                   f"(test_{s['name']}.py, `python3 -m unittest`) fails. Fix {path}.")
    return dict(problem=problem, files={path: given, f"test_{s['name']}.py": tests},
                reference={path: good}, answer=path, ids=ids,
                tags=["shell", "repair" if kind == "fix" else "implement", s["name"]],
                detail=s["name"] + ("" if bug is None else f": {bug[0]!r} -> {bug[1]!r}"))


# ------------------------------------------------------------ classifying

# Runs the test ids given as arguments, each on its own, and prints
# {id: passed} as JSON.
RUNNER = """import json, sys, unittest
outcome = {}
for test in sys.argv[1:]:
    result = unittest.TestResult()
    try:
        unittest.defaultTestLoader.loadTestsFromName(test).run(result)
        outcome[test] = result.wasSuccessful()
    except Exception:
        outcome[test] = False
print(json.dumps(outcome))
"""


def test_outcomes(files, ids):
    """Runs every test id on `files`; returns {id: passed}, or None when they hang."""
    with tempfile.TemporaryDirectory() as d:
        for path, text in files.items():
            with open(os.path.join(d, path), "w") as out:
                out.write(text)
        try:
            done = subprocess.run([sys.executable, "-c", RUNNER, *ids], cwd=d, capture_output=True,
                                  text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return None
        return json.loads(done.stdout.splitlines()[-1])


def finish(task_id, spec):
    before = test_outcomes(spec["files"], spec["ids"])
    after = test_outcomes({**spec["files"], **spec["reference"]}, spec["ids"])
    if before is None:
        return None  # the planted bug hangs: draw another
    failing = [t for t, ok in (after or {"(all: they hang)": False}).items() if not ok]
    if failing:
        raise SystemExit(f"{task_id} ({spec['detail']}): the reference fails {failing}")
    fail_to_pass = [t for t in spec["ids"] if not before[t]]
    if not fail_to_pass:
        return None  # the planted bug does not show on these inputs: draw another
    return {
        "id": task_id,
        "problem": spec["problem"],
        "environment": {"files": spec["files"]},
        "verification": {
            "runner": "unittest",
            "fail_to_pass": fail_to_pass,
            "pass_to_pass": [t for t in spec["ids"] if before[t]],
            "answer_paths": [spec["answer"]],
        },
        "reference": {"files": spec["reference"]},
        "tags": spec["tags"],
    }


KINDS = [("py-fix", python_task, "fix"), ("py-impl", python_task, "impl"),
         ("sh-fix", shell_task, "fix"), ("sh-impl", shell_task, "impl")]
SHARES = {"py-fix": 0.35, "py-impl": 0.3, "sh-fix": 0.2, "sh-impl": 0.15}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.relpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "tasks")))
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--train", type=int, default=200)
    parser.add_argument("--eval", type=int, default=48)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    total = args.train + args.eval
    tasks, seen = [], set()
    for prefix, make, kind in KINDS:
        want = round(total * SHARES[prefix]) if prefix != KINDS[-1][0] else total - len(tasks)
        made, tries = 0, 0
        while made < want:
            tries += 1
            if tries > want * 50:
                raise SystemExit(f"{prefix}: only {made} distinct tasks of {want}")
            spec = make(rng, kind)
            key = hashlib.sha256(json.dumps(spec["files"], sort_keys=True).encode()).hexdigest()
            if key in seen:
                continue
            task = finish(f"{prefix}-{made + 1:04d}", spec)
            if task is None:
                continue
            seen.add(key)
            made += 1
            tasks.append(task)
    rng.shuffle(tasks)
    held_out = set(t["id"] for t in tasks[:args.eval])
    os.makedirs(args.out, exist_ok=True)
    for name, part in (("code-train.jsonl", [t for t in tasks if t["id"] not in held_out]),
                       ("code-eval.jsonl", [t for t in tasks if t["id"] in held_out])):
        part.sort(key=lambda t: t["id"])
        with open(os.path.join(args.out, name), "w") as out:
            for task in part:
                out.write(json.dumps(task, ensure_ascii=False) + "\n")
        print(f"{os.path.join(args.out, name)}: {len(part)} tasks")


if __name__ == "__main__":
    main()
