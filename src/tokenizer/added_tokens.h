#pragma once
// Finds added tokens inside text: at the leftmost position where any token
// starts, the longest token there wins (Hugging Face's LeftmostLongest).
// Immutable after construction; safe from many threads.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tokenizer {

class AddedTokenMatcher {
 public:
  // One cut of the text: either plain text or an added token's id.
  struct Segment {
    std::string_view text;  // empty for a token
    int32_t id = -1;        // -1 for text
  };

  void Add(const std::string& content, int32_t id);
  bool empty() const { return nodes_.size() == 1; }

  // Appends the segments of `text` to `out` (text segments are non-empty).
  void Split(std::string_view text, std::vector<Segment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int>> children;
    int32_t id = -1;  // token ending here
  };
  int Child(int node, uint8_t byte) const;
  // Length of the longest token starting at `pos`, and its id; 0 when none.
  size_t LongestAt(std::string_view text, size_t pos, int32_t* id) const;

  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

}  // namespace loom::tokenizer
