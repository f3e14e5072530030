#pragma once
// Collects a prompt as pieces: adjacent text is merged into one piece; each
// special string is a piece of its own.

#include <string_view>
#include <utility>
#include <vector>

#include "loom/chat/encoder.h"

namespace loom::chat {

class PromptBuilder {
 public:
  void Text(std::string_view text) {
    if (text.empty()) return;
    if (pieces_.empty() || pieces_.back().special) pieces_.push_back({std::string(), false});
    pieces_.back().text += text;
  }
  void Special(std::string_view text) { pieces_.push_back({std::string(text), true}); }
  std::vector<PromptPiece> Take() { return std::move(pieces_); }

 private:
  std::vector<PromptPiece> pieces_;
};

}  // namespace loom::chat
