#include "train/encoding.h"

#include <algorithm>

#include "loom/agent/demonstration.h"
#include "loom/chat/encoder.h"
#include "loom/chat/message.h"
#include "loom/tasks/agent_jsonl.h"

namespace loom::train {
namespace {

// The effort `problem`'s prompt shows when the run asks for `effort`: its
// own effort when it carries one (and efforts are shown at all).
int ShownEffort(const tasks::Problem& problem, int effort) {
  return effort > 0 && problem.effort > 0 ? problem.effort : effort;
}

// "effort" and one capital letter per started tenth of the effort, from K
// on (25 -> "effort KLM", 60 -> "effort KLMNOP", 100 -> "effort KLMNOPQRST"):
// no digit or small letter the scratchpad could take for its own ("c1" is a
// carry), and a last letter of its own at every level, right before the
// choice to work or not.
std::string RestatedEffort(int effort) {
  std::string restated = "effort ";
  for (int tenth = 0; tenth * 10 < effort; ++tenth) restated += static_cast<char>('K' + tenth);
  return restated;
}

// Thinking mode with the numeric effort line for effort b, or none for 0.
chat::EncodeOptions ThinkingWithEffort(int effort) {
  chat::EncodeOptions options;
  options.thinking_mode = chat::ThinkingMode::kThinking;
  if (effort > 0) {
    options.reasoning_effort.kind = chat::ReasoningEffort::Kind::kNumeric;
    options.reasoning_effort.b = effort;
  }
  return options;
}

std::vector<int64_t> Widen(const std::vector<int32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::vector<chat::Message>> Messages(const nlohmann::json& messages,
                                                    const std::string& problem_id) {
  auto parsed = chat::MessagesFromJson(chat::OrderedJson::parse(messages.dump()));
  if (!parsed.ok()) {
    return absl::InvalidArgumentError("problem " + problem_id + ": " +
                                      std::string(parsed.status().message()));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> EncodeProblemPrompt(const tasks::Problem& problem, int effort,
                                                         const tokenizer::Tokenizer& tokenizer) {
  auto messages = Messages(problem.messages, problem.id);
  if (!messages.ok()) return messages.status();
  auto ids =
      chat::EncodeIds(*messages, ThinkingWithEffort(ShownEffort(problem, effort)), tokenizer);
  if (!ids.ok()) return ids.status();
  return Widen(*ids);
}

absl::StatusOr<SftExample> EncodeSftExample(const tasks::Problem& problem, int effort,
                                            const tokenizer::Tokenizer& tokenizer,
                                            bool restate_effort) {
  if (!problem.reference) {
    return absl::FailedPreconditionError("problem " + problem.id + " has no reference answer");
  }
  auto prompt = EncodeProblemPrompt(problem, effort, tokenizer);
  if (!prompt.ok()) return prompt.status();
  nlohmann::json conversation = problem.messages;
  conversation.push_back(*problem.reference);
  if (restate_effort && effort > 0) {
    nlohmann::json& reasoning = conversation.back()["reasoning_content"];
    const std::string work = reasoning.get<std::string>();
    reasoning = RestatedEffort(ShownEffort(problem, effort)) + (work.empty() ? "" : "\n" + work);
  }
  auto messages = Messages(conversation, problem.id);
  if (!messages.ok()) return messages.status();
  auto ids =
      chat::EncodeIds(*messages, ThinkingWithEffort(ShownEffort(problem, effort)), tokenizer);
  if (!ids.ok()) return ids.status();
  SftExample example;
  example.tokens = Widen(*ids);
  if (example.tokens.size() <= prompt->size() ||
      !std::equal(prompt->begin(), prompt->end(), example.tokens.begin())) {
    return absl::InternalError("problem " + problem.id +
                               ": the prompt is not a prefix of the encoded conversation");
  }
  example.loss_mask.assign(example.tokens.size(), 0);
  std::fill(example.loss_mask.begin() + static_cast<int64_t>(prompt->size()),
            example.loss_mask.end(), 1);
  return example;
}

absl::StatusOr<SftExample> EncodeAgentSftExample(const tasks::Problem& problem,
                                                 const std::string& kind, double slip_fraction,
                                                 const v1::ScaffoldOptions& options, int effort,
                                                 const tokenizer::Tokenizer& tokenizer,
                                                 int64_t eos_id) {
  const bool from_file = problem.agent_task != nullptr;
  std::vector<tasks::DemonstrationTurn> turns =
      from_file ? tasks::ReferenceDemonstration(*problem.agent_task)
                : tasks::BuiltinDemonstration(kind, problem.task_seed, slip_fraction);
  if (turns.empty()) {
    return absl::FailedPreconditionError(
        "problem " + problem.Describe() + ": the agent task " +
        (from_file ? problem.agent_task->task.id() + " has no reference solution"
                   : kind + " has no demonstration") +
        " to train SFT on");
  }
  auto example = agent::EncodeDemonstration(
      from_file ? problem.agent_task->task : tasks::BuiltinTask(kind, problem.task_seed), turns,
      options, tokenizer, effort, eos_id);
  if (!example.ok()) return example.status();
  return SftExample{std::move(example->tokens), std::move(example->loss_mask)};
}

}  // namespace loom::train
