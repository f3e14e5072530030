// The Chat Completions request parser on arbitrary bodies (a request or a
// named refusal, never a crash), and the same bytes as a completion streamed
// through CompletionView in 3-byte pieces: the pieces must join to exactly
// what one whole Finish() shows.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/serve/chat_completions.h"
#include "loom/serve/completion_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto request = loom::serve::ParseChatCompletionsRequest(input);
  if (!request.ok() && request.status().message().empty()) __builtin_trap();

  const auto mode = loom::chat::ThinkingMode::kThinking;
  for (bool complete : {true, false}) {
    loom::serve::CompletionView streamed(mode, {"STOP"});
    std::string reasoning, content;
    for (size_t n = 3; n < size + 3 && !streamed.stopped(); n += 3) {
      auto delta = streamed.Update(input.substr(0, n < size ? n : size));
      reasoning += delta.reasoning;
      content += delta.content;
    }
    const bool stopped = streamed.stopped();
    auto end = streamed.Finish(input, complete && !stopped);
    reasoning += end.delta.reasoning;
    content += end.delta.content;
    loom::serve::CompletionView whole(mode, {"STOP"});
    auto once = whole.Finish(input, complete && !stopped);
    if (!stopped && (reasoning != once.delta.reasoning || content != once.delta.content)) {
      __builtin_trap();
    }
  }
  return 0;
}
