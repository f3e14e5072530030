#pragma once
// Built-in agentic tasks for sandbox datasets, generated deterministically
// from a seed. Only the task description (a v1::Task: problem, files,
// verification spec) is built here, so the trainer can make one without
// linking the sandbox; the worker (loom/sandbox/) runs and verifies it.
//  - arithmetic: a product of two large numbers, too large to do by heart;
//    the python tool helps; reward: the exact answer.
//  - fix_repo: a tiny Python package whose test fails because of a bug;
//    reward: its tests pass (fail-to-pass and pass-to-pass lists).

#include <cstdint>
#include <string>

#include "loom/v1/sandbox.pb.h"

namespace loom::tasks {

v1::Task ArithmeticTask(uint64_t seed);
v1::Task FixRepoTask(uint64_t seed);

// Either kind by name ("arithmetic", "fix_repo"); INVALID_ARGUMENT otherwise
// is the caller's job: unknown names return a task with an empty id.
v1::Task BuiltinTask(const std::string& kind, uint64_t seed);

}  // namespace loom::tasks
