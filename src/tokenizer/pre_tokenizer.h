#pragma once
// Pre-tokenizers of tokenizer.json: each step cuts every piece of the text
// into smaller pieces (views into the caller's string, in order).
// A PreTokenizer is immutable and thread-safe once built.

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::tokenizer {

class SplitStep;

class PreTokenizer {
 public:
  // Parses the `pre_tokenizer` field. Fails on unsupported types or options,
  // naming them, and when there is no ByteLevel step (byte-level BPE needs one).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& spec);
  ~PreTokenizer();

  // Whether a space must be put before a segment that does not start with one
  // (ByteLevel add_prefix_space) before calling Split.
  bool add_prefix_space() const { return add_prefix_space_; }

  // Appends the pieces of valid UTF-8 `text` to `out` (empty pieces dropped).
  absl::Status Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  PreTokenizer();
  absl::Status AddStep(const nlohmann::json& spec, bool first);

  std::vector<std::unique_ptr<SplitStep>> steps_;
  bool add_prefix_space_ = false;
  bool has_byte_level_ = false;
};

}  // namespace loom::tokenizer
