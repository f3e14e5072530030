#pragma once
// UTF-8 helpers for the tokenizer: validation with a located error.

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace loom::tokenizer {

// OK when `text` is well-formed UTF-8 (no overlongs, surrogates or code
// points past U+10FFFF); otherwise INVALID_ARGUMENT naming the byte offset.
absl::Status ValidateUtf8(std::string_view text);

// Decodes the code point at `*pos` of valid UTF-8 and advances `*pos`.
uint32_t NextCodePoint(std::string_view text, size_t* pos);

}  // namespace loom::tokenizer
