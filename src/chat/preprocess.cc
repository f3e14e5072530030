#include "chat/preprocess.h"

#include <algorithm>
#include <map>

namespace loom::chat {
namespace {

bool IsMergedToolTurn(const Message& m) { return m.role == Role::kUser && !m.blocks.empty(); }

}  // namespace

std::vector<Message> MergeToolMessages(const std::vector<Message>& messages) {
  std::vector<Message> out;
  for (const Message& m : messages) {
    if (m.role == Role::kTool) {
      ContentBlock block{true, m.content, m.tool_call_id};
      if (!out.empty() && IsMergedToolTurn(out.back())) {
        out.back().blocks.push_back(block);
      } else {
        Message user;
        user.role = Role::kUser;
        user.blocks.push_back(block);
        out.push_back(std::move(user));
      }
    } else if (m.role == Role::kUser && !m.task && !out.empty() && IsMergedToolTurn(out.back())) {
      out.back().blocks.push_back(ContentBlock{false, m.content, ""});
    } else {
      out.push_back(m);
    }
  }
  return out;
}

void SortToolResults(std::vector<Message>* messages) {
  std::map<std::string, int> call_order;
  for (Message& m : *messages) {
    if (m.role == Role::kAssistant && !m.tool_calls.empty()) {
      call_order.clear();
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (!m.tool_calls[k].id.empty()) call_order.emplace(m.tool_calls[k].id, k);
      }
      continue;
    }
    if (!IsMergedToolTurn(m) || call_order.empty()) continue;
    std::vector<ContentBlock> results;
    for (const ContentBlock& b : m.blocks) {
      if (b.is_tool_result) results.push_back(b);
    }
    auto rank = [&](const ContentBlock& b) {
      auto it = call_order.find(b.tool_use_id);
      return it == call_order.end() ? 0 : it->second;
    };
    std::stable_sort(
        results.begin(), results.end(),
        [&](const ContentBlock& a, const ContentBlock& b) { return rank(a) < rank(b); });
    size_t next = 0;
    for (ContentBlock& b : m.blocks) {
      if (b.is_tool_result) b = results[next++];
    }
  }
}

int LastUserIndex(const std::vector<Message>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == Role::kUser || messages[i].role == Role::kDeveloper) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::vector<Message> DropThinking(const std::vector<Message>& messages) {
  const int last_user = LastUserIndex(messages);
  std::vector<Message> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const bool always = m.role == Role::kUser || m.role == Role::kSystem || m.role == Role::kTool ||
                        m.role == Role::kLatestReminder;
    if (always || static_cast<int>(i) >= last_user) {
      out.push_back(m);
    } else if (m.role == Role::kAssistant) {
      out.push_back(m);
      out.back().reasoning_content.reset();
    }
  }
  return out;
}

}  // namespace loom::chat
