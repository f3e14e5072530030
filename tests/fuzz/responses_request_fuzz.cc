// The OpenAI Responses request parser on arbitrary bodies: a request or a
// named refusal, never a crash.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/serve/openai_responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto request = loom::serve::ParseResponsesRequest(input);
  if (!request.ok() && request.status().message().empty()) __builtin_trap();
  return 0;
}
