#pragma once
// The tokenizer of loom's tiny test models: a Hugging Face tokenizer.json with
// a byte-level BPE model of exactly 256 byte tokens (id = byte value, no
// merges) plus every DeepSeek-V4 special string (dsv4_tokens.h) as a special
// added token, numbered from 256 in kAllSpecial order. With effort phrases,
// the two fixed parts of the effort line (dsv4::kEffortLineStart, kEffortLineEnd)
// follow as plain added tokens, so that a prompt with a numeric effort is 80
// positions shorter; every other text encodes as without them. Hugging Face
// tokenizers loads either and gives the same ids as loom.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom::tokenizer {

struct TinyTokenizerOptions {
  bool effort_phrases = false;
};

// The options a name stands for, as `model.init_tokenizer` and `loom
// init-model --tokenizer` take them: "bytes" or "bytes+effort".
inline constexpr std::string_view kTinyTokenizerNames[] = {"bytes", "bytes+effort"};
TinyTokenizerOptions TinyTokenizerNamed(std::string_view name);

// The tokenizer.json text (deterministic: same bytes on every call).
std::string TinyTokenizerJson(const TinyTokenizerOptions& options = {});

// Number of ids of the tiny tokenizer (256 bytes + the special strings [+ the
// effort phrases]); tiny models use it as vocab_size.
int TinyTokenizerVocabSize(const TinyTokenizerOptions& options = {});

// A real vocabulary for a tiny model: a Hugging Face tokenizer.json (for
// example DeepSeek-V3's) with every DeepSeek-V4 special string it lacks added
// as a special token after its highest id, so a prompt takes as many tokens
// as on a real model of that vocabulary. `vocab_size`: the ids it then has.
// INVALID_ARGUMENT naming the problem when the text is not a tokenizer.json.
absl::StatusOr<std::string> WithChatSpecials(std::string_view tokenizer_json, int64_t* vocab_size);

}  // namespace loom::tokenizer
