#include "tokenizer/added_tokens.h"

namespace loom::tokenizer {

int AddedTokenMatcher::Child(int node, uint8_t byte) const {
  for (const auto& [b, child] : nodes_[node].children) {
    if (b == byte) return child;
  }
  return -1;
}

void AddedTokenMatcher::Add(const std::string& content, int32_t id) {
  if (content.empty()) return;
  first_byte_[static_cast<uint8_t>(content[0])] = true;
  int node = 0;
  for (char c : content) {
    const auto byte = static_cast<uint8_t>(c);
    int child = Child(node, byte);
    if (child < 0) {
      child = static_cast<int>(nodes_.size());
      nodes_.emplace_back();
      nodes_[node].children.emplace_back(byte, child);
    }
    node = child;
  }
  if (nodes_[node].id < 0) nodes_[node].id = id;  // The first definition of a string wins.
}

size_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, int32_t* id) const {
  size_t best = 0;
  int node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].id >= 0) {
      best = i + 1 - pos;
      *id = nodes_[node].id;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t text_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t id = -1;
    const size_t len = first_byte_[static_cast<uint8_t>(text[pos])] ? LongestAt(text, pos, &id) : 0;
    if (len == 0) {
      ++pos;
      continue;
    }
    if (pos > text_begin) out->push_back({text.substr(text_begin, pos - text_begin), -1});
    out->push_back({std::string_view(), id});
    pos += len;
    text_begin = pos;
  }
  if (text_begin < text.size()) out->push_back({text.substr(text_begin), -1});
}

}  // namespace loom::tokenizer
