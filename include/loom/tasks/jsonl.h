#pragma once
// Reading problems from JSON lines. Each non-blank line is one object:
//
//   {"messages": [{"role": "user", "content": "2+2?"}, ...],
//    "answer": "4" | 4,               (string or number; required)
//    "verifier": "exact|numeric|regex"   (optional, default exact)}
//
// If the last message is from the assistant it becomes the problem's SFT
// reference (its `reasoning_content` and `content`) and the prompt is the
// messages before it. Every message needs a string `role` (system, developer,
// user, assistant, tool) and a string `content`. The prompt must end with a
// user message.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/tasks/problem.h"

namespace loom::tasks {

// Parses one line. Errors say what is wrong (not where; see ReadJsonlProblems).
absl::StatusOr<Problem> ParseProblemLine(const std::string& line);

// Every problem of `path`, ids "<dataset>/<split>/<line number>". Errors are
// INVALID_ARGUMENT "<path>:<line>: <what>" (NOT_FOUND for a missing file);
// an empty file is an error too.
absl::StatusOr<std::vector<Problem>> ReadJsonlProblems(const std::string& path,
                                                       const std::string& dataset);

}  // namespace loom::tasks
