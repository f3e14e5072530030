#pragma once
// Built-in agentic tasks for sandbox datasets, generated deterministically
// from a seed. Only the task description (a v1::Task: problem, files,
// verification spec) is built here, so the trainer can make one without
// linking the sandbox; the worker (loom/sandbox/) runs and verifies it.
//  - arithmetic: a product of two large numbers, too large to do by heart;
//    the python tool helps; reward: the exact answer.
//  - fix_repo: a tiny Python package whose test fails because of a bug;
//    reward: its tests pass (fail-to-pass and pass-to-pass lists).
//  - lookup: a digit that only a file in the workspace holds; reward: the
//    digit. An easy first tool task.
//
// Each also comes with a demonstration: the turns of an episode that solves
// the task with its tools, for SFT.

#include <cstdint>
#include <string>
#include <vector>

#include "loom/v1/sandbox.pb.h"

namespace loom::tasks {

v1::Task ArithmeticTask(uint64_t seed);
v1::Task FixRepoTask(uint64_t seed);
v1::Task LookupTask(uint64_t seed);

// A kind by name ("arithmetic", "fix_repo", "lookup"); INVALID_ARGUMENT
// otherwise is the caller's job: unknown names return a task with an empty id.
v1::Task BuiltinTask(const std::string& kind, uint64_t seed);

// One assistant turn of a demonstration: the message (reasoning, content,
// tool calls without ids) and what each of its tool calls returns.
struct DemonstrationTurn {
  v1::Message assistant;
  std::vector<v1::ToolResult> results;
};

// The demonstration of BuiltinTask(kind, seed); empty for a kind without one.
// fix_repo: a share `slip_fraction` of seeds (chosen deterministically) get a
// demonstration with a systematic slip instead, which the verifier fails: the
// one-line patch goes to the wrong `return low` (line 4, not 6). Like the
// quickstart's reversed answers, it leaves GRPO one decision to learn.
std::vector<DemonstrationTurn> BuiltinDemonstration(const std::string& kind, uint64_t seed,
                                                    double slip_fraction = 0);

}  // namespace loom::tasks
