#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/split_step.h"

#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace loom::tokenizer {
namespace {

// Per-thread match state shared by every SplitStep (one match at a time).
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

}  // namespace

absl::StatusOr<std::unique_ptr<SplitStep>> SplitStep::Create(const std::string& regex,
                                                             SplitBehavior behavior, bool invert) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("Split regex does not compile at offset ",
                                                   offset, ": ", reinterpret_cast<char*>(message)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // Falls back to the interpreter if JIT is absent.
  std::unique_ptr<SplitStep> step(new SplitStep());
  step->code_ = code;
  step->behavior_ = behavior;
  step->invert_ = invert;
  return step;
}

SplitStep::~SplitStep() { pcre2_code_free(Code(code_)); }

absl::Status SplitStep::FindSpans(std::string_view text, std::vector<Span>* spans) const {
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0, previous_end = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(Code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::ResourceExhaustedError(
          absl::StrCat("Split regex match failed: ", reinterpret_cast<char*>(message)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // Empty matches do not split; step one character on.
      start = end + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (begin > previous_end) spans->push_back({previous_end, begin, false});
    spans->push_back({begin, end, true});
    previous_end = start = end;
  }
  if (previous_end < text.size()) spans->push_back({previous_end, text.size(), false});
  return absl::OkStatus();
}

absl::Status SplitStep::Apply(std::string_view text, std::vector<std::string_view>* out) const {
  thread_local std::vector<Span> spans;
  spans.clear();
  absl::Status status = FindSpans(text, &spans);
  if (!status.ok()) return status;
  const size_t first_out = out->size();
  bool merge_next = false;      // MergedWithNext: the last match waits for the next piece.
  bool previous_match = false;  // MergedWithPrevious: a match joins only a non-match.
  size_t pending_begin = 0;
  for (const Span& span : spans) {
    const bool is_match = span.is_match != invert_;
    std::string_view piece = text.substr(span.begin, span.end - span.begin);
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        out->push_back(piece);
        break;
      case SplitBehavior::kRemoved:
        if (!is_match) out->push_back(piece);
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (is_match && !previous_match && out->size() > first_out) {
          out->back() = std::string_view(out->back().data(), out->back().size() + piece.size());
        } else {
          out->push_back(piece);
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (merge_next) piece = text.substr(pending_begin, span.end - pending_begin);
        merge_next = is_match;
        if (is_match) {
          pending_begin = piece.data() - text.data();
        } else {
          out->push_back(piece);
        }
        break;
    }
    previous_match = is_match;
  }
  if (merge_next) out->push_back(text.substr(pending_begin));
  return absl::OkStatus();
}

}  // namespace loom::tokenizer
