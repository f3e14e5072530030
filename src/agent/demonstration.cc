#include "loom/agent/demonstration.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "loom/agent/chat_bridge.h"
#include "loom/agent/episodes.h"
#include "loom/tasks/conversation.h"

namespace loom::agent {
namespace {

// The ids the policy generates for `assistant` after the conversation so
// far (`so_far`, encoded as `prior`): its rendering in the conversation,
// without the EOS the engine does not generate after a tool-call block.
absl::StatusOr<std::vector<int64_t>> GeneratedIds(const AgentConversation& conversation,
                                                  const std::vector<int64_t>& prior,
                                                  const chat::Message& assistant,
                                                  const tokenizer::Tokenizer& tokenizer,
                                                  int64_t eos_id) {
  std::vector<chat::Message> with = conversation.messages();
  with.push_back(assistant);
  absl::StatusOr<std::vector<int32_t>> after =
      chat::EncodeIds(with, conversation.options(), tokenizer);
  if (!after.ok()) return after.status();
  if (after->size() <= prior.size() || !std::equal(prior.begin(), prior.end(), after->begin())) {
    return absl::InvalidArgumentError("the conversation before the turn is not a prefix of it");
  }
  std::vector<int64_t> ids(after->begin() + static_cast<int64_t>(prior.size()), after->end());
  if (!assistant.tool_calls.empty() && ids.back() == eos_id) ids.pop_back();
  return ids;
}

}  // namespace

absl::StatusOr<DemonstrationExample> EncodeDemonstration(
    const v1::Task& task, const std::vector<tasks::DemonstrationTurn>& turns,
    const v1::ScaffoldOptions& options, const tokenizer::Tokenizer& tokenizer, int effort,
    int64_t eos_id) {
  const v1::ScaffoldOptions scaffold = tasks::WithDefaults(options);
  if (turns.empty()) return absl::InvalidArgumentError("task " + task.id() + ": no turns");
  if (static_cast<int>(turns.size()) > scaffold.max_steps()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task ", task.id(), ": ", turns.size(), " turns exceed max_steps ", scaffold.max_steps()));
  }
  AgentConversation conversation(tokenizer, effort, eos_id);
  DemonstrationExample example;
  auto add = [&example](const std::vector<int64_t>& ids, uint8_t loss) {
    example.tokens.insert(example.tokens.end(), ids.begin(), ids.end());
    example.loss_mask.insert(example.loss_mask.end(), ids.size(), loss);
  };
  v1::GenerateRequest request;
  for (v1::Message& m : tasks::OpeningMessages(task, scaffold)) {
    *request.add_append() = std::move(m);
  }
  for (size_t t = 0; t < turns.size(); ++t) {
    const std::string at = absl::StrCat("task ", task.id(), " turn ", t, ": ");
    request.set_turn(static_cast<int>(t));
    absl::StatusOr<std::vector<int64_t>> observed = conversation.Observe(request);
    if (!observed.ok()) return absl::InvalidArgumentError(at + observed.status().ToString());
    add(*observed, 0);

    absl::StatusOr<chat::Message> assistant = agent::ToChatMessage(turns[t].assistant);
    if (!assistant.ok()) return absl::InvalidArgumentError(at + assistant.status().ToString());
    absl::StatusOr<std::vector<int64_t>> generated =
        GeneratedIds(conversation, example.tokens, *assistant, tokenizer, eos_id);
    if (!generated.ok()) return absl::InvalidArgumentError(at + generated.status().ToString());
    add(*generated, 1);
    absl::StatusOr<std::string> text =
        tokenizer.Decode(std::vector<int32_t>(generated->begin(), generated->end()));
    if (!text.ok()) return absl::InvalidArgumentError(at + text.status().ToString());
    const v1::GenerateReply reply = conversation.Reply(*text, static_cast<int>(t));
    if (!reply.has_assistant()) {
      return absl::InvalidArgumentError(at + "does not parse back: " + reply.parse_error());
    }

    const auto& calls = reply.assistant().tool_calls();
    if (calls.size() != static_cast<int>(turns[t].results.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, calls.size(), " tool calls but ", turns[t].results.size(), " results"));
    }
    const bool last = t + 1 == turns.size();
    if (calls.empty() != last) {
      return absl::InvalidArgumentError(
          at + (last ? "the last turn must answer, not call a tool"
                     : "only the last turn may answer without a tool call"));
    }
    request.clear_append();
    for (int k = 0; k < calls.size(); ++k) {
      v1::ToolResult result = turns[t].results[k];
      result.set_call_id(calls[k].id());
      result.set_name(calls[k].name());
      *request.add_append() = tasks::ToolMessage(calls[k], result);
    }
  }
  return example;
}

}  // namespace loom::agent
