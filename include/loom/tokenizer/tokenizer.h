#pragma once
// A Hugging Face `tokenizer.json` with a byte-level BPE model, giving the same
// ids as the Hugging Face tokenizers library.
//
// Supported: normalizers none / NFC / Sequence of those; pre-tokenizers
// Sequence, Split (regex or string pattern; behaviours Isolated, Removed,
// MergedWithPrevious, MergedWithNext), ByteLevel, Digits; BPE (merges as
// "a b" strings or [a, b] pairs, ignore_merges); added tokens (special and
// normal, matched before pre-tokenisation, leftmost then longest); the
// ByteLevel decoder. Anything else is a load error that names the feature.
//
// Thread safety: a loaded Tokenizer is immutable apart from an internal,
// mutex-guarded word cache; every const method may be called from any number
// of threads at once. Ownership: FromFile/FromJson return a unique owner.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::tokenizer {

class TokenizerImpl;

class Tokenizer {
 public:
  // Loads `path` (a tokenizer.json). Errors name the path and the JSON field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // Loads tokenizer.json text; `origin` names it in error messages.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text,
                                                             std::string_view origin);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Ids of `text`, exactly as HF `encode(text, add_special_tokens=False)`:
  // added tokens (special or not) inside the text become their ids.
  // Invalid UTF-8 is an INVALID_ARGUMENT error naming the byte offset.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;

  // Like Encode, but added tokens in `text` are not recognised: they are
  // encoded as ordinary text (for untrusted content).
  absl::StatusOr<std::vector<int32_t>> EncodeOrdinary(std::string_view text) const;

  // Bytes of `ids` joined, as HF's ByteLevel decoder produces them (before
  // its lossy UTF-8 step): may end inside a multi-byte character when the ids
  // are a prefix of a longer text. Unknown ids are an INVALID_ARGUMENT error.
  // With skip_special, special added tokens are left out.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                                     bool skip_special = false) const;

  // Id of a token string (vocabulary entry or added token), if any.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Token string of an id, if the id exists.
  std::optional<std::string> IdToToken(int32_t id) const;
  // Whether `id` is a special added token.
  bool IsSpecial(int32_t id) const;
  // Id of `token` only when it is a special added token.
  std::optional<int32_t> SpecialTokenId(std::string_view token) const;
  // Id of `token` when it is an added token (special or not).
  std::optional<int32_t> AddedTokenId(std::string_view token) const;
  // One past the largest id (vocabulary and added tokens).
  int32_t VocabSize() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

}  // namespace loom::tokenizer
