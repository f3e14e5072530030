#pragma once
// Agent tasks from files (`kind: agent_jsonl`): one task per JSON line, the
// triple of problem, environment and verification, with an optional
// reference solution and tags. docs/tasks.md describes the format:
//
//   {"id": "py-fix-0007",                      unique in the file; [A-Za-z0-9._-]
//    "problem": "stats.py fails its tests ...",  the user message
//    "environment": {"files": {PATH: TEXT}, "dir": DIR, "archive": TAR,
//                    "setup": BASH, "setup_timeout_s": N, "health": BASH},
//    "verification": {"runner": "unittest"|"pytest", "test_command": "... {test}",
//                     "fail_to_pass": [...], "pass_to_pass": [...],
//                     "command": BASH, "exact_answer": TEXT,
//                     "output_regex": {"command": BASH, "regex": PCRE2},
//                     "files": {PATH: TEXT}, "answer_paths": [GLOB, ...]},
//    "reference": {"files": {PATH: TEXT}},
//    "tags": ["python", "repair"]}
//
// A verification is exactly one of: test lists (fail_to_pass, with a runner
// or a test_command), a command, an exact answer, an output regex. `dir` is
// a directory relative to the task file whose regular files join `files`,
// `archive` a tar archive (plain or gzip) likewise: the trainer reads both,
// so remote workers need no copy, and refuses links inside. Every path is
// relative and stays inside the workspace. The reference solution is the
// files it writes over the environment: the SFT demonstration writes them
// with the write_file tool and answers, and `loom tasks check` verifies it.
//
// Reading reports every malformed line at once, each as "FILE:LINE: FIELD:
// what is wrong".

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/tasks/agent_tasks.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::tasks {

struct AgentTask {
  v1::Task task;  // id, problem, environment (dir read into files), verification
  std::map<std::string, std::string> reference;  // path -> content; empty: no reference
  std::vector<std::string> tags;
  std::string source;  // "FILE:LINE"
};

// The most a task's files (environment, hidden and reference together) may
// hold: they travel in one worker message.
inline constexpr size_t kMaxAgentTaskBytes = size_t{16} << 20;

// Parses one line. `base_dir` resolves environment.dir. Returns the
// problems found, each "FIELD: what" (none: `task` is set).
std::vector<std::string> ParseAgentTaskLine(const std::string& line, const std::string& base_dir,
                                            AgentTask& task);

// Every task of `path`, in file order. INVALID_ARGUMENT listing every
// malformed line (the first 50 in full, then a count), duplicate ids
// included; NOT_FOUND for a missing file; an empty file is an error.
absl::StatusOr<std::vector<AgentTask>> ReadAgentTasks(const std::string& path);

// The demonstration of `task`'s reference: a write_file call per file, then
// a one-line answer. Empty without a reference.
std::vector<DemonstrationTurn> ReferenceDemonstration(const AgentTask& task);

}  // namespace loom::tasks
