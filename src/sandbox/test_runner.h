#pragma once
// loom's unittest runner (test_runner.py beside this file, embedded at build
// time), as verification sandboxes see it.

namespace loom::sandbox {

extern const char kTestRunnerPy[];  // the script's text
constexpr char kTestRunnerPath[] = "/etc/loom/test_runner.py";

}  // namespace loom::sandbox
