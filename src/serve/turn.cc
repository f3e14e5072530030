#include "loom/serve/turn.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom::serve {
namespace {

chat::ReasoningEffort Numeric(int b) { return {chat::ReasoningEffort::Kind::kNumeric, b}; }

}  // namespace

ApiError ErrorFromStatus(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return {400, message, ""};
    case absl::StatusCode::kOutOfRange:
      return {400, message, "context_length_exceeded"};
    default:
      return {500, message, ""};
  }
}

void PlaceLateSystemMessages(std::vector<chat::Message>* messages) {
  bool started = false;
  for (chat::Message& m : *messages) {
    if (m.role != chat::Role::kSystem) {
      started = true;
    } else if (started) {
      m.role = chat::Role::kDeveloper;
    }
  }
}

EffortNames::EffortNames()
    : names_{{"none", chat::ReasoningEffort{}},
             {"minimal", Numeric(25)},
             {"low", Numeric(50)},
             {"medium", Numeric(62)},
             {"high", Numeric(75)},
             {"xhigh", Numeric(88)},
             {"max", Numeric(100)}} {}

absl::StatusOr<EffortNames> EffortNames::WithOverrides(std::string_view spec) {
  EffortNames names;
  const absl::string_view entries(spec.data(), spec.size());
  for (absl::string_view entry : absl::StrSplit(entries, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("effort name '", entry, "': not NAME=VALUE"));
    }
    auto effort = chat::ParseReasoningEffort(std::string(kv[1]));
    if (!effort.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("effort name '", kv[0], "': ", effort.status().message()));
    }
    names.names_[std::string(kv[0])] = *effort;
  }
  return names;
}

absl::StatusOr<chat::ReasoningEffort> EffortNames::Lookup(std::string_view name) const {
  auto it = names_.find(name);
  if (it != names_.end()) return it->second;
  int b = 0;
  if (absl::SimpleAtoi(absl::string_view(name.data(), name.size()), &b) && b >= 1 && b <= 100) {
    return Numeric(b);
  }
  if (name == "v4-max" || name == "v4-high") return chat::ParseReasoningEffort(std::string(name));
  std::vector<std::string> known;
  for (const auto& [key, value] : names_) known.push_back(key);
  return absl::InvalidArgumentError(absl::StrCat("unknown effort '", std::string(name),
                                                 "' (one of ", absl::StrJoin(known, ", "),
                                                 ", or 1..100)"));
}

}  // namespace loom::serve
