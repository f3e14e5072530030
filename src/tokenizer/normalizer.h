#pragma once
// Text normalizers of tokenizer.json: none, NFC, or a Sequence of those.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom::tokenizer {

class Normalizer {
 public:
  // Parses the `normalizer` field (null allowed). Unsupported types are an
  // error naming the type.
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& spec);

  bool IsIdentity() const { return !nfc_; }
  // Normalized form of valid UTF-8 `text`.
  std::string Apply(std::string_view text) const;

 private:
  bool nfc_ = false;
};

}  // namespace loom::tokenizer
