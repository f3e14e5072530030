#include "loom/serve/completion_view.h"

#include <algorithm>
#include <initializer_list>

#include "loom/chat/parser.h"
#include "loom/tokenizer/dsv4_tokens.h"

namespace loom::serve {
namespace {

namespace t = tokenizer::dsv4;

const std::string kToolCallsStart = "\n\n<" + std::string(t::kDsml) + "tool_calls";

struct Found {
  size_t at = std::string_view::npos;  // where the first marker starts
  size_t size = 0;                     // its length
};

Found First(std::string_view text, size_t from, std::initializer_list<std::string_view> markers) {
  Found best;
  for (std::string_view marker : markers) {
    const size_t at = text.find(marker, from);
    if (at < best.at) best = {at, marker.size()};
  }
  return best;
}

// How many trailing bytes of `text` to hold back: a tail that is the start of
// a marker, or of a UTF-8 character whose other bytes are still to come.
size_t HeldBack(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t held = 0;
  for (std::string_view marker : markers) {
    for (size_t k = std::min(text.size(), marker.size() - 1); k > held; --k) {
      if (text.substr(text.size() - k) == marker.substr(0, k)) {
        held = k;
        break;
      }
    }
  }
  for (size_t k = 1; k <= std::min<size_t>(3, text.size()); ++k) {
    const auto c = static_cast<unsigned char>(text[text.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > k) held = std::max(held, k);
    break;
  }
  return held;
}

std::string_view WithoutEos(std::string_view text) {
  if (text.size() >= t::kEos.size() && text.substr(text.size() - t::kEos.size()) == t::kEos) {
    text.remove_suffix(t::kEos.size());
  }
  return text;
}

}  // namespace

size_t CompletionView::ContentEnd(std::string_view rest, bool final) {
  size_t end = final ? WithoutEos(rest).size() : std::string_view::npos;
  if (!final) {
    const Found marker = First(rest, 0, {kToolCallsStart, t::kEos});
    end = marker.at != std::string_view::npos
              ? marker.at
              : rest.size() - HeldBack(rest, {kToolCallsStart, t::kEos});
  }
  for (const std::string& stop : stops_) {
    const size_t at = rest.find(stop);
    if (at != std::string_view::npos && at <= end) {
      end = at;
      stopped_ = true;
      stop_sequence_ = stop;
    } else if (!final) {
      end = std::min(end, rest.size() - HeldBack(rest, {stop}));
    }
  }
  return end;
}

void CompletionView::Visible(std::string_view text, bool final, std::string* reasoning,
                             std::string* content) {
  size_t content_from = 0;
  reasoning->clear();
  content->clear();
  if (mode_ == chat::ThinkingMode::kThinking) {
    const Found end = First(text, 0, {t::kThinkClose, kToolCallsStart, t::kEos});
    if (end.at == std::string_view::npos) {
      const size_t keep =
          final ? text.size()
                : text.size() - HeldBack(text, {t::kThinkClose, kToolCallsStart, t::kEos});
      *reasoning = std::string(text.substr(0, keep));
      return;
    }
    *reasoning = std::string(text.substr(0, end.at));
    const bool closed = text.compare(end.at, end.size, t::kThinkClose) == 0;
    if (!closed && !final) return;  // the reasoning never closed: the rest waits for Finish
    content_from = closed ? end.at + end.size : end.at;
  }
  std::string_view rest = text.substr(content_from);
  *content = std::string(rest.substr(0, ContentEnd(rest, final)));
}

CompletionDelta CompletionView::Advance(const std::string& reasoning, const std::string& content) {
  // What is visible only grows (a held-back tail is released or becomes a
  // marker that ends the region), so the shown text is always a prefix.
  CompletionDelta delta;
  if (reasoning.size() > reasoning_.size()) delta.reasoning = reasoning.substr(reasoning_.size());
  if (content.size() > content_.size()) delta.content = content.substr(content_.size());
  reasoning_ += delta.reasoning;
  content_ += delta.content;
  return delta;
}

CompletionDelta CompletionView::Update(std::string_view text) {
  std::string reasoning, content;
  Visible(text, /*final=*/false, &reasoning, &content);
  return Advance(reasoning, content);
}

CompletionEnd CompletionView::Finish(std::string_view text, bool complete,
                                     const ToolCallCheck& check) {
  CompletionEnd end;
  std::string reasoning, content;
  if (complete) {
    auto parsed = chat::ParseCompletion(text, mode_);
    absl::Status status = parsed.status();
    if (parsed.ok() && check) status = check(parsed->tool_calls);
    if (status.ok()) {
      end.delta = Advance(parsed->reasoning_content, parsed->content);
      end.tool_calls = std::move(parsed->tool_calls);
      return end;
    }
    end.format_error = true;
    end.parse_error = std::string(status.message());
  }
  Visible(text, /*final=*/true, &reasoning, &content);
  end.delta = Advance(reasoning, content);
  return end;
}

}  // namespace loom::serve
