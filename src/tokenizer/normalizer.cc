#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace loom::tokenizer {
namespace {

absl::Status AddSpec(const nlohmann::json& spec, bool* nfc) {
  if (spec.is_null()) return absl::OkStatus();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: expected an object with a string \"type\"");
  }
  const std::string type = spec["type"];
  if (type == "NFC") {
    *nfc = true;
    return absl::OkStatus();
  }
  if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array()) {
      return absl::InvalidArgumentError("normalizer Sequence: \"normalizers\" must be an array");
    }
    for (const auto& part : spec["normalizers"]) {
      absl::Status status = AddSpec(part, nfc);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("normalizer type \"", type, "\" is not supported (supported: NFC, Sequence)"));
}

}  // namespace

absl::StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& spec) {
  Normalizer normalizer;
  absl::Status status = AddSpec(spec, &normalizer.nfc_);
  if (!status.ok()) return status;
  return normalizer;
}

std::string Normalizer::Apply(std::string_view text) const {
  if (!nfc_) return std::string(text);
  // NFC leaves pure ASCII unchanged; skip the library call for it.
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(text);  // Only on invalid UTF-8, which callers rule out.
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace loom::tokenizer
