#include "loom/tokenizer/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "loom/tokenizer/utf8.h"
#include "tokenizer/string_view_compat.h"
#include "tokenizer/tokenizer_impl.h"

namespace loom::tokenizer {

absl::Status TokenizerImpl::Encode(std::string_view text, bool added,
                                   std::vector<int32_t>* out) const {
  if (!added || raw_added.empty()) return EncodeNormalized(text, added, out);
  std::vector<AddedTokenMatcher::Segment> segments;
  raw_added.Split(text, &segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      out->push_back(segment.id);
      continue;
    }
    absl::Status status = EncodeNormalized(segment.text, added, out);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::EncodeNormalized(std::string_view text, bool added,
                                             std::vector<int32_t>* out) const {
  if (normalizer.IsIdentity() && (!added || normalized_added.empty())) {
    return EncodePlain(text, out);
  }
  const std::string normalized = normalizer.Apply(text);
  if (!added || normalized_added.empty()) return EncodePlain(normalized, out);
  std::vector<AddedTokenMatcher::Segment> segments;
  normalized_added.Split(normalized, &segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      out->push_back(segment.id);
      continue;
    }
    absl::Status status = EncodePlain(segment.text, out);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::EncodePlain(std::string_view text, std::vector<int32_t>* out) const {
  std::string prefixed;
  if (pre_tokenizer->add_prefix_space() && (text.empty() || text[0] != ' ')) {
    prefixed = " ";
    prefixed += text;
    text = prefixed;
  }
  std::vector<std::string_view> words;
  absl::Status status = pre_tokenizer->Split(text, &words);
  if (!status.ok()) return status;
  for (std::string_view word : words) {
    if (word.size() == 1) {
      bpe.EncodeWord(word, out);
      continue;
    }
    if (cache_.Lookup(word, out)) continue;
    const size_t before = out->size();
    bpe.EncodeWord(word, out);
    cache_.Insert(word, out->data() + before, out->size() - before);
  }
  return absl::OkStatus();
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  absl::Status valid = ValidateUtf8(text);
  if (!valid.ok()) return valid;
  std::vector<int32_t> ids;
  absl::Status status = impl_->Encode(text, /*added=*/true, &ids);
  if (!status.ok()) return status;
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeOrdinary(std::string_view text) const {
  absl::Status valid = ValidateUtf8(text);
  if (!valid.ok()) return valid;
  std::vector<int32_t> ids;
  absl::Status status = impl_->Encode(text, /*added=*/false, &ids);
  if (!status.ok()) return status;
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                              bool skip_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= VocabSize() || !impl_->present[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot decode id ", id, " at position ", i, ": not in the vocabulary"));
    }
    if (skip_special && impl_->special[id]) continue;
    out += impl_->decoded[id];
  }
  return out;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto added = impl_->added_ids.find(AsAbsl(token));
  if (added != impl_->added_ids.end()) return added->second;
  auto it = impl_->bpe.vocab().find(AsAbsl(token));
  if (it == impl_->bpe.vocab().end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= VocabSize() || !impl_->present[id]) return std::nullopt;
  return impl_->tokens[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < VocabSize() && impl_->special[id];
}

std::optional<int32_t> Tokenizer::SpecialTokenId(std::string_view token) const {
  auto it = impl_->added_ids.find(AsAbsl(token));
  if (it == impl_->added_ids.end() || !impl_->special[it->second]) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Tokenizer::AddedTokenId(std::string_view token) const {
  auto it = impl_->added_ids.find(AsAbsl(token));
  if (it == impl_->added_ids.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::VocabSize() const { return static_cast<int32_t>(impl_->tokens.size()); }

}  // namespace loom::tokenizer
