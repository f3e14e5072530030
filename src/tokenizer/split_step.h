#pragma once
// One regex split of a pre-tokenizer (PCRE2 with JIT, Unicode properties),
// with the Hugging Face split behaviours. Immutable and thread-safe: match
// state lives in thread-local storage.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::tokenizer {

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

class SplitStep {
 public:
  // Compiles `regex` (Oniguruma-compatible syntax as used by tokenizer.json).
  static absl::StatusOr<std::unique_ptr<SplitStep>> Create(const std::string& regex,
                                                           SplitBehavior behavior, bool invert);
  ~SplitStep();

  // Appends the pieces of `text` to `out`.
  absl::Status Apply(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  SplitStep() = default;
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  absl::Status FindSpans(std::string_view text, std::vector<Span>* spans) const;

  void* code_ = nullptr;  // pcre2_code_8*, owned
  SplitBehavior behavior_ = SplitBehavior::kIsolated;
  bool invert_ = false;
};

}  // namespace loom::tokenizer
