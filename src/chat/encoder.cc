#include "loom/chat/encoder.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "chat/preprocess.h"
#include "chat/render.h"
#include "loom/config/effort_tiers.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::chat {
namespace {

bool AnyTools(const std::vector<Message>& messages) {
  for (const Message& m : messages) {
    if (m.tools) return true;
  }
  return false;
}

// Appends the ids of `text` (added tokens in it recognised, as HF does).
absl::Status AppendTextIds(const std::string& text, const tokenizer::Tokenizer& tok,
                           std::vector<int32_t>* ids) {
  if (text.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<int32_t>> part = tok.Encode(text);
  if (!part.ok()) return part.status();
  ids->insert(ids->end(), part->begin(), part->end());
  return absl::OkStatus();
}

// Number of leading pieces of `full` that spell `prior` exactly, ending on a
// special piece the tokenizer has an id for; -1 when there is no such cut.
int CleanCut(const std::vector<PromptPiece>& prior, const std::vector<PromptPiece>& full,
             const tokenizer::Tokenizer& tok) {
  if (prior.empty() || prior.size() > full.size()) return -1;
  for (size_t i = 0; i < prior.size(); ++i) {
    if (prior[i].text != full[i].text || prior[i].special != full[i].special) return -1;
  }
  const PromptPiece& last = prior.back();
  if (!last.special || !tok.AddedTokenId(last.text)) return -1;
  return static_cast<int>(prior.size());
}

}  // namespace

absl::StatusOr<ReasoningEffort> ParseReasoningEffort(const std::string& text) {
  ReasoningEffort effort;
  if (text.empty() || text == "none") return effort;
  if (text == "v4-high") {
    effort.kind = ReasoningEffort::Kind::kHigh;
    return effort;
  }
  if (text == "v4-max") {
    effort.kind = ReasoningEffort::Kind::kMax;
    return effort;
  }
  effort.kind = ReasoningEffort::Kind::kNumeric;
  for (const auto& [name, b] : config::EffortTiers()) {
    if (text == name) {
      effort.b = b;
      return effort;
    }
  }
  char* end = nullptr;
  const long b = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || b < 1 || b > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("reasoning effort \"", text,
                     "\": expected an integer 1..100, max (100), high (75), low (50), none, or "
                     "the DeepSeek-V4 literal modes v4-max and v4-high"));
  }
  effort.b = static_cast<int>(b);
  return effort;
}

absl::StatusOr<std::vector<PromptPiece>> EncodePieces(const std::vector<Message>& messages,
                                                      const EncodeOptions& options) {
  const ReasoningEffort& effort = options.reasoning_effort;
  if (effort.kind == ReasoningEffort::Kind::kNumeric && (effort.b < 1 || effort.b > 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reasoning effort ", effort.b, " is outside 1..100"));
  }
  std::vector<Message> list = MergeToolMessages(messages);
  SortToolResults(&list);
  RenderContext context;
  context.thinking = options.thinking_mode == ThinkingMode::kThinking;
  context.drop_thinking = options.drop_thinking && !AnyTools(list);
  context.effort = effort;
  if (context.thinking && context.drop_thinking) list = DropThinking(list);
  context.last_user = LastUserIndex(list);
  PromptBuilder out;
  if (options.add_bos) out.Special(tokenizer::dsv4::kBos);
  for (size_t i = 0; i < list.size(); ++i) RenderMessage(list, i, context, &out);
  return out.Take();
}

absl::StatusOr<std::string> EncodePrompt(const std::vector<Message>& messages,
                                         const EncodeOptions& options) {
  absl::StatusOr<std::vector<PromptPiece>> pieces = EncodePieces(messages, options);
  if (!pieces.ok()) return pieces.status();
  std::string text;
  for (const PromptPiece& piece : *pieces) text += piece.text;
  return text;
}

absl::StatusOr<std::vector<int32_t>> PiecesToIds(const std::vector<PromptPiece>& pieces,
                                                 const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  std::string pending;  // text not yet encoded (special strings without an id join it)
  for (const PromptPiece& piece : pieces) {
    std::optional<int32_t> id = piece.special ? tokenizer.AddedTokenId(piece.text) : std::nullopt;
    if (!id) {
      pending += piece.text;
      continue;
    }
    absl::Status status = AppendTextIds(pending, tokenizer, &ids);
    if (!status.ok()) return status;
    pending.clear();
    ids.push_back(*id);
  }
  absl::Status status = AppendTextIds(pending, tokenizer, &ids);
  if (!status.ok()) return status;
  return ids;
}

absl::StatusOr<std::vector<int32_t>> EncodeIds(const std::vector<Message>& messages,
                                               const EncodeOptions& options,
                                               const tokenizer::Tokenizer& tokenizer) {
  absl::StatusOr<std::vector<PromptPiece>> pieces = EncodePieces(messages, options);
  if (!pieces.ok()) return pieces.status();
  return PiecesToIds(*pieces, tokenizer);
}

absl::StatusOr<std::vector<int32_t>> EncodeContinuation(const std::vector<Message>& prior,
                                                        const std::vector<Message>& added,
                                                        const EncodeOptions& options,
                                                        const tokenizer::Tokenizer& tokenizer) {
  std::vector<Message> all = prior;
  all.insert(all.end(), added.begin(), added.end());
  absl::StatusOr<std::vector<PromptPiece>> before = EncodePieces(prior, options);
  if (!before.ok()) return before.status();
  absl::StatusOr<std::vector<PromptPiece>> after = EncodePieces(all, options);
  if (!after.ok()) return after.status();
  const int cut = CleanCut(*before, *after, tokenizer);
  if (cut < 0) {
    return absl::FailedPreconditionError(
        "the earlier prompt changes or ends mid-text when these messages are appended "
        "(drop_thinking removes earlier reasoning, or the last message has wo_eos); "
        "re-encode the whole conversation");
  }
  return PiecesToIds(std::vector<PromptPiece>(after->begin() + cut, after->end()), tokenizer);
}

}  // namespace loom::chat
