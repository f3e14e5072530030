#pragma once
// The parts of a loaded tokenizer (see loom/tokenizer/tokenizer.h), built by
// tokenizer_loader.cc and used by tokenizer.cc. Immutable after loading apart
// from the word cache, which is thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/word_cache.h"

namespace loom::tokenizer {

class TokenizerImpl {
 public:
  // Ids of valid UTF-8 `text`; added tokens recognised when `added` is set.
  absl::Status Encode(std::string_view text, bool added, std::vector<int32_t>* out) const;

  Normalizer normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  Bpe bpe;
  AddedTokenMatcher raw_added;         // added tokens with normalized=false
  AddedTokenMatcher normalized_added;  // added tokens with normalized=true (matched after it)
  absl::flat_hash_map<std::string, int32_t> added_ids;  // content → id
  std::vector<std::string> tokens;   // [vocab size] token string of each id ("" if none)
  std::vector<std::string> decoded;  // [vocab size] bytes the ByteLevel decoder gives
  std::vector<bool> present;         // [vocab size] whether the id exists
  std::vector<bool> special;         // [vocab size] whether the id is a special added token

 private:
  absl::Status EncodeNormalized(std::string_view text, bool added, std::vector<int32_t>* out) const;
  absl::Status EncodePlain(std::string_view text, std::vector<int32_t>* out) const;

  mutable WordCache cache_;
};

}  // namespace loom::tokenizer
