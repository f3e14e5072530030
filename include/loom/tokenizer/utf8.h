#pragma once
// UTF-8 rules, in one place: the tokenizer validates its input with them,
// and the sandbox repairs command output with them.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace loom::tokenizer {

// The length (1-4) of the well-formed UTF-8 sequence at `text[pos]`, or 0
// when none starts there: a stray continuation byte, a lead byte that no
// sequence has, a truncated sequence, an overlong form, a surrogate or a
// code point past U+10FFFF.
int Utf8SequenceAt(std::string_view text, size_t pos);

// OK when `text` is well-formed UTF-8; otherwise INVALID_ARGUMENT naming the
// byte offset.
absl::Status ValidateUtf8(std::string_view text);

// `text` with every byte that starts no well-formed sequence replaced by
// U+FFFD, so that any bytes become a valid string.
std::string RepairUtf8(std::string_view text);

// Decodes the code point at `*pos` of valid UTF-8 and advances `*pos`.
uint32_t NextCodePoint(std::string_view text, size_t* pos);

}  // namespace loom::tokenizer
