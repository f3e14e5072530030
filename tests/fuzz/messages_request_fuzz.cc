// The Anthropic Messages request parser on arbitrary bodies, as a turn and
// as a count_tokens body: a request or a named refusal, never a crash.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/serve/anthropic_messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (bool count_tokens : {false, true}) {
    auto request = loom::serve::ParseMessagesRequest(input, count_tokens);
    if (!request.ok() && request.status().message().empty()) __builtin_trap();
  }
  return 0;
}
