#include "loom/tasks/verifier.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/status/status.h"
#include "loom/tasks/regex.h"

namespace loom::tasks {
namespace {

// The whole of `text` as a finite number, or nothing.
std::optional<double> ParseNumber(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

bool FullMatch(const std::string& pattern, const std::string& text) {
  auto regex = Regex::Compile(pattern);
  if (!regex.ok()) return false;
  auto matched = regex->Matches(text, /*whole=*/true);
  return matched.ok() && *matched;  // a match past the limits scores 0
}

}  // namespace

absl::StatusOr<VerifierKind> ParseVerifierKind(const std::string& name) {
  if (name == "exact") return VerifierKind::kExact;
  if (name == "numeric") return VerifierKind::kNumeric;
  if (name == "regex") return VerifierKind::kRegex;
  return absl::InvalidArgumentError("unknown verifier '" + name +
                                    "' (expected exact, numeric or regex)");
}

const char* VerifierName(VerifierKind kind) {
  switch (kind) {
    case VerifierKind::kExact:
      return "exact";
    case VerifierKind::kNumeric:
      return "numeric";
    case VerifierKind::kRegex:
      return "regex";
  }
  return "?";
}

absl::Status CheckAnswer(VerifierKind kind, const std::string& answer) {
  if (kind == VerifierKind::kNumeric && !ParseNumber(NormalizeSpaces(answer))) {
    return absl::InvalidArgumentError("answer '" + answer + "' is not a number (verifier numeric)");
  }
  if (kind == VerifierKind::kRegex) {
    if (auto regex = Regex::Compile(answer); !regex.ok()) {
      return absl::InvalidArgumentError("answer '" + answer + "' is not a valid regex " +
                                        std::string(regex.status().message()));
    }
  }
  return absl::OkStatus();
}

std::string NormalizeSpaces(const std::string& text) {
  std::string out;
  bool pending_space = false;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

double Verify(VerifierKind kind, const std::string& answer, const std::string& response) {
  const std::string got = NormalizeSpaces(response);
  switch (kind) {
    case VerifierKind::kExact:
      return got == NormalizeSpaces(answer) ? 1.0 : 0.0;
    case VerifierKind::kNumeric: {
      const auto want = ParseNumber(NormalizeSpaces(answer));
      const auto value = ParseNumber(got);
      if (!want || !value) return 0.0;
      const double tolerance = 1e-6 * std::max(1.0, std::fabs(*want));
      return std::fabs(*value - *want) <= tolerance ? 1.0 : 0.0;
    }
    case VerifierKind::kRegex:
      return FullMatch(answer, got) ? 1.0 : 0.0;
  }
  return 0.0;
}

}  // namespace loom::tasks
