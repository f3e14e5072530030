// The model endpoint's HTTP request parsers on arbitrary bytes: the head
// (through the first blank line) and a chunked body after it. Every input is
// a request or a refusal, never a crash; a decoded body never claims more
// bytes than it was given.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/serve/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t end = input.find("\r\n\r\n");
  const std::string_view head = input.substr(0, end == std::string_view::npos ? size : end + 4);
  int64_t length = 0;
  auto request = loom::serve::ParseRequestHead(head, &length);
  if (request.ok() && length < -1) __builtin_trap();
  size_t consumed = 0;
  const std::string_view rest = input.substr(head.size());
  auto body = loom::serve::DecodeChunkedBody(rest, 4096, &consumed);
  if (body.ok() && (consumed > rest.size() || body->size() > 4096)) __builtin_trap();
  return 0;
}
