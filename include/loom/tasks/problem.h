#pragma once
// Problem: one verifiable prompt. A prompt (OpenAI-style messages ending with
// a user turn), the answer its verifier checks responses against, and,
// where one exists, a reference assistant turn (reasoning + answer) for SFT.
// Plain value type; cheap to copy for the short prompts loom's tasks use.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "loom/tasks/verifier.h"

namespace loom::tasks {

struct AgentTask;  // loom/tasks/agent_jsonl.h

// Which part of a dataset: training prompts, or the held-out evaluation set.
// The two are disjoint by prompt content.
enum class Split { kTrain, kEval };

struct Problem {
  std::string id;           // "<dataset>/<train|eval>/<index>"
  std::string dataset;      // the dataset's name
  nlohmann::json messages;  // the prompt: array of {role, content}
  std::string answer;       // what the verifier expects
  VerifierKind verifier = VerifierKind::kExact;
  // The SFT target: {"role": "assistant", "reasoning_content": ..., "content": ...};
  // absent for JSONL lines without a trailing assistant message.
  std::optional<nlohmann::json> reference;
  int difficulty = 0;   // generators only; 0 for files
  std::string source;   // JSONL datasets: "path:line" of the problem; empty for generators
  std::string line_id;  // JSONL datasets: the line's own "id", if it has one
  // Datasets with `environment: sandbox`: the seed of the built-in agentic
  // task (the worker gets the task; `messages` only describes it).
  uint64_t task_seed = 0;
  // Datasets of kind agent_jsonl: the task of the file's line (shared by
  // every problem drawn from it).
  std::shared_ptr<const AgentTask> agent_task;
  // The reasoning effort the problem is always asked at (its prompt's
  // effort line), whatever effort the run samples; 0 = the run's.
  int effort = 0;

  // The problem for messages: its id, and where it came from when known
  // ("arith/train/5", "jsonl/train/3 (data.jsonl:12)").
  std::string Describe() const { return source.empty() ? id : id + " (" + source + ")"; }

  // How people know the task across runs and files: an agent task's id, a
  // JSONL line's id or else its file:line, a generated problem's id.
  std::string TaskId() const;

  // The reward of a response (its final content, reasoning stripped): 1 or 0.
  double Score(const std::string& response) const { return Verify(verifier, answer, response); }
};

}  // namespace loom::tasks
