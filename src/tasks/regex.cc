#define PCRE2_CODE_UNIT_WIDTH 8
#include "loom/tasks/regex.h"

#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace loom::tasks {
namespace {

// Enough for any sensible verifier pattern on answers of a few thousand
// characters; a pattern that needs more backtracks without bound.
constexpr uint32_t kMatchLimit = 1'000'000;
constexpr uint32_t kDepthLimit = 10'000;

std::string ErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code->code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("at offset ", offset, ": ", ErrorText(error)));
  }
  return Regex(std::move(code));
}

absl::StatusOr<bool> Regex::Matches(std::string_view text, bool whole) const {
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(context, kMatchLimit);
  pcre2_set_depth_limit(context, kDepthLimit);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const uint32_t options = whole ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0;
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             options, data, context);
  pcre2_match_data_free(data);
  pcre2_match_context_free(context);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  return absl::ResourceExhaustedError(absl::StrCat("regex match gave up: ", ErrorText(rc)));
}

}  // namespace loom::tasks
