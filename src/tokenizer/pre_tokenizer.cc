#include "tokenizer/pre_tokenizer.h"

#include <cctype>
#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/split_step.h"

namespace loom::tokenizer {
namespace {

using Json = nlohmann::json;

// GPT-2's pre-tokenization regex, used by ByteLevel with use_regex.
constexpr char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool BoolField(const Json& spec, const char* key, bool fallback) {
  auto it = spec.find(key);
  return it != spec.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string EscapeLiteral(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

absl::StatusOr<SplitBehavior> ParseBehavior(const Json& spec) {
  const std::string name = spec.value("behavior", std::string("Isolated"));
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  return absl::UnimplementedError(
      absl::StrCat("pre_tokenizer Split: behavior \"", name, "\" is not supported"));
}

absl::StatusOr<std::string> SplitPattern(const Json& spec) {
  auto pattern = spec.find("pattern");
  if (pattern == spec.end() || !pattern->is_object()) {
    return absl::InvalidArgumentError("pre_tokenizer Split: missing object \"pattern\"");
  }
  if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
    return (*pattern)["Regex"].get<std::string>();
  }
  if (pattern->contains("String") && (*pattern)["String"].is_string()) {
    return EscapeLiteral((*pattern)["String"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      "pre_tokenizer Split: \"pattern\" needs a string \"Regex\" or \"String\"");
}

}  // namespace

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& spec) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  absl::Status status = pre->AddStep(spec, /*first=*/true);
  if (!status.ok()) return status;
  if (!pre->has_byte_level_) {
    return absl::UnimplementedError(
        "pre_tokenizer: only byte-level BPE is supported and it needs a ByteLevel pre-tokenizer");
  }
  return pre;
}

absl::Status PreTokenizer::AddStep(const Json& spec, bool first) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: expected an object with a string \"type\"");
  }
  const std::string type = spec["type"];
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array()) {
      return absl::InvalidArgumentError(
          "pre_tokenizer Sequence: \"pretokenizers\" must be an array");
    }
    for (const Json& part : spec["pretokenizers"]) {
      absl::Status status = AddStep(part, first && steps_.empty() && !has_byte_level_);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
  std::string regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  if (type == "Split") {
    absl::StatusOr<std::string> pattern = SplitPattern(spec);
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<SplitBehavior> parsed = ParseBehavior(spec);
    if (!parsed.ok()) return parsed.status();
    regex = *pattern;
    behavior = *parsed;
    invert = BoolField(spec, "invert", false);
  } else if (type == "Digits") {
    regex = BoolField(spec, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)";
  } else if (type == "ByteLevel") {
    has_byte_level_ = true;
    if (BoolField(spec, "add_prefix_space", false)) {
      if (!first) {
        return absl::UnimplementedError(
            "pre_tokenizer ByteLevel: add_prefix_space is only supported on the first step");
      }
      add_prefix_space_ = true;
    }
    if (!BoolField(spec, "use_regex", true)) return absl::OkStatus();
    regex = kGpt2Regex;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("pre_tokenizer type \"", type,
                     "\" is not supported (supported: Sequence, Split, ByteLevel, Digits)"));
  }
  absl::StatusOr<std::unique_ptr<SplitStep>> step = SplitStep::Create(regex, behavior, invert);
  if (!step.ok()) {
    return absl::Status(step.status().code(),
                        absl::StrCat("pre_tokenizer ", type, ": ", step.status().message()));
  }
  steps_.push_back(std::move(*step));
  return absl::OkStatus();
}

absl::Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* out) const {
  thread_local std::vector<std::string_view> current, next;
  current.assign(1, text);
  for (const auto& step : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      absl::Status status = step->Apply(piece, &next);
      if (!status.ok()) return status;
    }
    current.swap(next);
  }
  for (std::string_view piece : current) {
    if (!piece.empty()) out->push_back(piece);
  }
  return absl::OkStatus();
}

}  // namespace loom::tokenizer
