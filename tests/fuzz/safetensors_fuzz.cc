// A .safetensors file (8-byte header length, JSON header, data) from
// arbitrary bytes: tensors or an error naming the file and field, never a
// crash or a read outside the file. Every tensor read is summed, so a view
// past the mapped data would fault here.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "loom/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      "/tmp/loom-fuzz-safetensors-" + std::to_string(::getpid()) + ".safetensors";
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto tensors = loom::model::ReadSafetensors(path);
  if (!tensors.ok()) return 0;
  for (const auto& [name, tensor] : *tensors) {
    (void)tensor.to(at::kDouble).sum().item<double>();
  }
  return 0;
}
