// A checkpointed in-flight sample (PREFIX.json + PREFIX.safetensors) from
// arbitrary bytes: the JSON is the input up to its first NUL, the
// safetensors file the rest. Reading gives a sample or an error naming the
// file and field, never a crash; a sample that reads must have arrays as
// long as its tokens.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "loom/rollout/state_io.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string prefix = "/tmp/loom-fuzz-sample-" + std::to_string(::getpid());
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  Write(prefix + ".json", input.substr(0, nul));
  Write(prefix + ".safetensors", nul == std::string::npos ? "" : input.substr(nul + 1));
  auto state = loom::rollout::ReadSampleState(prefix);
  if (state.ok() && (state->loss_mask.size() != state->tokens.size() ||
                     state->logprobs.size() != state->tokens.size() ||
                     state->versions.size() != state->tokens.size())) {
    std::abort();
  }
  return 0;
}
