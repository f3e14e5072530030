"""loom's test runner for verification (docs/sandbox.md, "Verdicts").

The worker runs it in the verification sandbox as

    exec python3 -I -B /etc/loom/test_runner.py [--pytest]

(unittest ids by default, pytest node ids with --pytest) and sends three lines on stdin: a fresh key, the JSON list of the workspace's
trusted files (the task's, not the agent's), and the JSON list of test ids.

Two processes. This one, the judge, loads only trusted files and runs the
tests. Every other module under /workspace is the agent's and is loaded in a
second process, the answer host (this script with --host); the tests reach it
only by calls whose arguments and results are plain data (None, bool, int,
float, str, bytes, list, tuple, dict, set), decoded here into exact builtin
types. No code of the agent's runs in the judge, so it can neither end the
judge early, patch unittest, nor hand back an object whose __eq__ lies. The
judge is not dumpable (no other process may read its memory or descriptors)
and writes its report as one line on its own stdout, authenticated with
HMAC-SHA256 under the key: a line the agent's code forges does not verify.
"""

import builtins
import hmac
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import types

WORKSPACE = "/workspace"
MAX_LINE = 64 << 20  # bytes of one message from the answer host
MAX_DEPTH = 64  # nesting of one value


class AnswerError(Exception):
    """What the answer's code did that a test cannot use."""


# Plain data on the wire: JSON's str, bool and null as they are; every other
# type tagged, so that a tuple stays a tuple and 2**100 stays exact.
def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise AnswerError("a value nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return {"int": str(value)}
    if kind is float:
        return {"float": repr(value)}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    raise AnswerError(f"a {kind.__name__} is not plain data")


def decode(value, depth=0):
    if depth > MAX_DEPTH:
        raise AnswerError("a value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, str, int, float):
        return value
    if kind is list:
        return [decode(v, depth + 1) for v in value]
    if kind is dict and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "int" and type(inner) is str:
            return int(inner)
        if tag == "float" and type(inner) is str:
            return float(inner)
        if tag == "bytes" and type(inner) is str:
            return bytes.fromhex(inner)
        if tag in ("tuple", "set", "frozenset") and type(inner) is list:
            return getattr(builtins, tag)(decode(v, depth + 1) for v in inner)
        if tag == "dict" and type(inner) is list:
            pairs = [decode(p, depth + 1) for p in inner]
            if all(type(p) is list and len(p) == 2 for p in pairs):
                return {k: v for k, v in pairs}
    raise AnswerError("the answer host sent a value that is not plain data")


# ---------------------------------------------------------------- the host


def describe(module):
    """The module's public attributes: functions by name, plain values as values."""
    attrs = {}
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            attrs[name] = {"function": True}
            continue
        try:
            attrs[name] = {"value": encode(value)}
        except AnswerError:
            attrs[name] = {"other": type(value).__name__}
    return attrs


def host():
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the answer prints goes to stderr, not into replies
    sys.path.append(WORKSPACE)
    modules = {}
    for line in requests:
        request = json.loads(line)
        try:
            if request["op"] == "import":
                module = importlib.import_module(request["name"])
                modules[request["name"]] = module
                reply = {"attrs": describe(module)}
            else:
                function = getattr(modules[request["module"]], request["name"])
                args = decode(request["args"])
                kwargs = decode(request["kwargs"])
                reply = {"value": encode(function(*args, **kwargs))}
        except BaseException as error:  # SystemExit too: it ends nothing here
            reply = {"raise": {"type": type(error).__name__, "message": str(error)[:2000]}}
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


# --------------------------------------------------------------- the judge


class Host:
    """The answer host's process, started on first use."""

    def __init__(self):
        self.process = None

    def ask(self, request):
        if self.process is None:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-B", os.path.abspath(__file__), "--host"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=WORKSPACE, close_fds=True)
        try:
            self.process.stdin.write(json.dumps(encode_request(request)).encode() + b"\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline(MAX_LINE)
        except OSError as error:
            raise AnswerError(f"the answer's process is gone ({error})") from None
        if not line.endswith(b"\n"):
            raise AnswerError("the answer's process ended (or sent a message too long)")
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise AnswerError("the answer's process sent a message that does not parse") from None
        if type(reply) is not dict:
            raise AnswerError("the answer's process sent a message that is not an object")
        if "raise" in reply:
            raise_from_answer(reply["raise"])
        return reply


def encode_request(request):
    if request["op"] == "call":
        return dict(request, args=encode(list(request["args"])), kwargs=encode(request["kwargs"]))
    return request


# Exceptions a test may expect from the answer: the builtin ones, re-raised
# here as themselves; anything else (SystemExit included) is an AnswerError.
def raise_from_answer(raised):
    name = raised.get("type") if type(raised) is dict else None
    message = str(raised.get("message", "")) if type(raised) is dict else ""
    kind = getattr(builtins, name, None) if type(name) is str else None
    if (isinstance(kind, type) and issubclass(kind, Exception)
            and kind.__module__ == "builtins"):
        raise kind(message)
    raise AnswerError(f"the answer raised {name}: {message}")


class RemoteFunction:
    def __init__(self, host, module, name):
        self.host, self.module, self.name = host, module, name

    def __call__(self, *args, **kwargs):
        reply = self.host.ask({"op": "call", "module": self.module, "name": self.name,
                               "args": args, "kwargs": kwargs})
        return decode(reply.get("value"))


class Unavailable:
    """An attribute of the answer's that is neither a function nor plain data."""

    def __init__(self, what):
        self._what = what

    def __getattr__(self, name):
        raise AnswerError(f"{self._what}: loom's test runner passes only functions and plain data")

    def __call__(self, *args, **kwargs):
        self.__getattr__("__call__")


class HostLoader(importlib.abc.Loader):
    def __init__(self, host):
        self.host = host

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        reply = self.host.ask({"op": "import", "name": module.__name__})
        attrs = reply.get("attrs")
        if type(attrs) is not dict:
            raise AnswerError(f"the answer's module {module.__name__} could not be described")
        for name, attr in attrs.items():
            if type(name) is not str or type(attr) is not dict:
                continue
            if "function" in attr:
                setattr(module, name, RemoteFunction(self.host, module.__name__, name))
            elif "value" in attr:
                setattr(module, name, decode(attr["value"]))
            else:
                setattr(module, name, Unavailable(f"{module.__name__}.{name}"))


class TrustedLoader(importlib.abc.Loader):
    """A trusted file from its source (never a .pyc), opened without following a link."""

    def __init__(self, path):
        self.path = path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if os.path.realpath(os.path.dirname(self.path)) != os.path.dirname(self.path):
            raise ImportError(f"{self.path}: a directory on its way is a link")
        with os.fdopen(os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as source:
            code = compile(source.read(), self.path, "exec", dont_inherit=True)
        exec(code, module.__dict__)


class WorkspaceFinder(importlib.abc.MetaPathFinder):
    """Modules under /workspace: trusted files here, everything else in the host."""

    def __init__(self, trusted, host):
        self.trusted, self.host = trusted, host

    def find_spec(self, name, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not spec.has_location or not spec.origin.startswith(WORKSPACE + "/"):
            return None
        rel = spec.origin[len(WORKSPACE) + 1:]
        locations = spec.submodule_search_locations
        loader = TrustedLoader(spec.origin) if rel in self.trusted else HostLoader(self.host)
        return importlib.util.spec_from_file_location(
            name, spec.origin, loader=loader, submodule_search_locations=locations)


def run_test(loader, test_id):
    """(passed, tests run, why) for one id: a module, class or method."""
    import unittest
    try:
        suite = loader.loadTestsFromName(test_id)
    except Exception as error:
        return False, 0, f"cannot load: {type(error).__name__}: {error}"
    result = unittest.TestResult()
    suite.run(result)
    problems = result.errors + result.failures
    why = problems[0][1].strip().splitlines()[-1] if problems else ""
    if result.skipped:
        why = why or f"skipped: {result.skipped[0][1]}"
    passed = (result.testsRun > 0 and not problems and not result.skipped
              and not result.unexpectedSuccesses)
    if result.testsRun == 0:
        why = "no test ran"
    return passed, result.testsRun, why[:300]


class PytestResults:
    """A pytest plugin: each test's outcome over its setup, call and teardown."""

    def __init__(self):
        self.tests = {}  # node id -> [called, why it did not pass]
        self.broken = {}  # collected node id (a file) -> why it could not be collected

    def pytest_runtest_logreport(self, report):
        test = self.tests.setdefault(report.nodeid, [False, ""])
        if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
            test[0] = True
        elif not report.passed or hasattr(report, "wasxfail"):
            what = "skipped" if report.skipped else "failed"
            test[1] = test[1] or f"{what} in {report.when}: {last_line(report.longreprtext)}"

    def pytest_collectreport(self, report):
        if report.failed:
            self.broken[report.nodeid] = f"cannot collect: {last_line(report.longreprtext)}"


def last_line(text):
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def run_pytest(test_ids, trusted):
    """(passed, tests run, why) for each id: a file of the task's or a node in one."""
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import pytest
    ids = [test_id[2:] if test_id.startswith("./") else test_id for test_id in test_ids]
    runnable = [test_id for test_id in ids if test_id.split("::")[0] in trusted]
    plugin = PytestResults()
    if runnable:
        # No configuration file of the workspace's (-c /dev/null), conftest.py
        # files from /workspace down (through loom's finder too), no assertion
        # rewriting (its import hook would load modules ahead of loom's finder),
        # test files imported through sys.meta_path, and so through loom's finder.
        pytest.main(["-q", "-c", os.devnull, "--rootdir", WORKSPACE, "--confcutdir", WORKSPACE,
                     "--import-mode=importlib",
                     "--assert=plain", "-p", "no:cacheprovider", "-p", "no:pastebin", "--"]
                    + runnable, plugins=[plugin])
    results = []
    for test_id in ids:
        if test_id not in runnable:
            results.append((False, 0, f"{test_id.split('::')[0]} is not a file of the task's"))
            continue
        nodes = [(node, outcome) for node, outcome in plugin.tests.items()
                 if node == test_id or node.startswith(test_id + "::")
                 or node.startswith(test_id + "[")]
        failures = [why for _, (called, why) in nodes if why or not called]
        why = failures[0] if failures else ""
        if not nodes:
            why = plugin.broken.get(test_id.split("::")[0], "no test ran")
        results.append((bool(nodes) and not failures, len(nodes), why[:300]))
    return results


def run_unittests(test_ids):
    import unittest
    loader = unittest.TestLoader()
    return [run_test(loader, test_id) for test_id in test_ids]


def judge(runner):
    key = sys.stdin.buffer.readline().strip()
    trusted = set(json.loads(sys.stdin.buffer.readline()))
    test_ids = json.loads(sys.stdin.buffer.readline())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    report = os.dup(1)
    os.dup2(2, 1)  # what the tests print goes to stderr
    sys.path.append(WORKSPACE)
    os.chdir(WORKSPACE)
    sys.meta_path.insert(0, WorkspaceFinder(trusted, Host()))
    outcomes = run_pytest(test_ids, trusted) if runner == "pytest" else run_unittests(test_ids)
    results = [{"id": test_id, "passed": passed, "ran": ran, "why": why}
               for test_id, (passed, ran, why) in zip(test_ids, outcomes)]
    body = json.dumps({"results": results}, sort_keys=True)
    mac = hmac.new(key, body.encode(), "sha256").hexdigest()
    line = f"loom-test-report {mac} {body}\n".encode()
    while line:
        line = line[os.write(report, line):]


if __name__ == "__main__":
    if sys.argv[1:] == ["--host"]:
        host()
    else:
        judge("pytest" if sys.argv[1:] == ["--pytest"] else "unittest")
