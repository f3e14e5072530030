#pragma once
// Verifiers: turn a response's final content into a task reward in {0, 1}.
//
//   exact    equal to the answer after trimming and collapsing runs of
//            whitespace to one space
//   numeric  the whole trimmed response is a number within 1e-6 (relative,
//            at least absolute 1e-6) of the answer
//   regex    the trimmed response fully matches the answer as a PCRE2
//            regular expression (loom/tasks/regex.h: bounded matching; a
//            match that exceeds the limits scores 0)
//
// Stateless and thread-safe. A malformed response scores 0, never throws.

#include <string>

#include "absl/status/statusor.h"

namespace loom::tasks {

enum class VerifierKind { kExact, kNumeric, kRegex };

// "exact" | "numeric" | "regex" -> kind; anything else is INVALID_ARGUMENT.
absl::StatusOr<VerifierKind> ParseVerifierKind(const std::string& name);
const char* VerifierName(VerifierKind kind);

// OK when `answer` is usable with `kind` (a number for numeric, a valid
// pattern for regex); otherwise INVALID_ARGUMENT saying why.
absl::Status CheckAnswer(VerifierKind kind, const std::string& answer);

// The reward of `response` against `answer`: 1.0 or 0.0.
double Verify(VerifierKind kind, const std::string& answer, const std::string& response);

// Trims and collapses whitespace runs to single spaces.
std::string NormalizeSpaces(const std::string& text);

}  // namespace loom::tasks
