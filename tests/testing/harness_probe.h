#pragma once
// A harness for tests, as a task's probe.py: it calls the endpoint the worker
// gives it once (Chat Completions, the problem as the user's message, for
// $PROBE_MAX_TOKENS tokens) and exits 0, or non-zero when the call fails or
// the variable is missing.

namespace loom::testing {

inline constexpr char kHarnessProbe[] = R"(import json, os, urllib.request as u
body = {"model": "loom", "max_tokens": int(os.environ["PROBE_MAX_TOKENS"]),
        "messages": [{"role": "user", "content": os.environ["LOOM_PROBLEM"]}]}
u.urlopen(u.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                    json.dumps(body).encode(),
                    {"Content-Type": "application/json",
                     "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})).read()
)";

}  // namespace loom::testing
