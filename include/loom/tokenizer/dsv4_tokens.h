#pragma once
// The special strings of the DeepSeek-V4 chat format (shared/dsv4-format.md).
// The tokenizer module owns them because the tiny tokenizer registers each
// one as a special added token; the chat module renders and parses with them.
// The bar is U+FF5C, the space mark U+2581.

#include <string_view>

namespace loom::tokenizer::dsv4 {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kAction = "<｜action｜>";
inline constexpr std::string_view kQuery = "<｜query｜>";
inline constexpr std::string_view kAuthority = "<｜authority｜>";
inline constexpr std::string_view kDomain = "<｜domain｜>";
inline constexpr std::string_view kTitle = "<｜title｜>";
inline constexpr std::string_view kReadUrl = "<｜read_url｜>";

// Every special string above, in the order the tiny tokenizer numbers them.
inline constexpr std::string_view kAllSpecial[] = {
    kBos,    kEos,   kThinkOpen, kThinkClose, kDsml,  kUser,   kAssistant, kLatestReminder,
    kAction, kQuery, kAuthority, kDomain,     kTitle, kReadUrl};

// The fixed text around a numeric reasoning effort b on the first line of a
// prompt: kEffortLineStart, b, kEffortLineEnd. Plain text, not special; a
// tiny tokenizer made with effort phrases gives each one token (tiny.h).
inline constexpr std::string_view kEffortLineStart = "Reasoning Effort: ";
inline constexpr std::string_view kEffortLineEnd =
    " (range 1–100; higher values request more thorough reasoning)\n\n";

}  // namespace loom::tokenizer::dsv4
