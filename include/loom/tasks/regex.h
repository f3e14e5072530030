#pragma once
// Regular expressions on untrusted text (dataset answers, task files, model
// output), through PCRE2 with a match limit and a depth limit. Unlike
// std::regex, which recurses once per character of the subject (a long
// answer overflows the stack) and overflows on quantifiers such as
// {999999999999999999} (found by fuzz_jsonl), a match here always ends: a
// pattern that would backtrack without end gives an error, which verifiers
// score as no match. Syntax: PCRE2 (Perl); subjects need not be valid UTF-8.
//
// Immutable after Compile; Matches is thread-safe.

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom::tasks {

class Regex {
 public:
  // INVALID_ARGUMENT naming the offset and PCRE2's reason for a bad pattern.
  static absl::StatusOr<Regex> Compile(std::string_view pattern);

  // Whether the whole of `text` matches (`whole`) or some part of it does.
  // RESOURCE_EXHAUSTED when the match limits were hit.
  absl::StatusOr<bool> Matches(std::string_view text, bool whole) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

}  // namespace loom::tasks
