#include "loom/chat/special_tokens.h"

#include <string>

#include "loom/chat/encoder.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::chat {

absl::StatusOr<SpecialTokenIds> SpecialTokenIds::Resolve(const tokenizer::Tokenizer& tokenizer) {
  SpecialTokenIds ids;
  const std::optional<int32_t> eos = tokenizer.TokenToId(tokenizer::dsv4::kEos);
  if (!eos) {
    return absl::InvalidArgumentError("tokenizer.json has no " +
                                      std::string(tokenizer::dsv4::kEos));
  }
  ids.eos = *eos;
  const std::optional<int32_t> think_end = tokenizer.TokenToId(tokenizer::dsv4::kThinkClose);
  ids.think_end = think_end ? *think_end : -1;
  return ids;
}

bool EndsWithEos(std::string_view text) {
  const std::string_view eos = tokenizer::dsv4::kEos;
  return text.size() >= eos.size() && text.substr(text.size() - eos.size()) == eos;
}

absl::StatusOr<std::vector<int64_t>> ToolCallsEndIds(const tokenizer::Tokenizer& tokenizer) {
  auto before = PiecesToIds({{"\n</", false}}, tokenizer);
  auto rest =
      PiecesToIds({{std::string(tokenizer::dsv4::kDsml), true}, {"tool_calls>", false}}, tokenizer);
  if (!before.ok()) return before.status();
  if (!rest.ok()) return rest.status();
  if (before->empty()) return absl::InternalError("empty encoding of the tool-call end tag");
  std::vector<int64_t> ids = {before->back()};
  ids.insert(ids.end(), rest->begin(), rest->end());
  return ids;
}

}  // namespace loom::chat
