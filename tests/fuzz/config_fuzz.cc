// The YAML config loader on arbitrary files: every input is a config or a
// list of errors, never a crash. Bytes after the first NUL are `--set`
// overrides, one per line.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom/config/logging.h"
#include "loom/config/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/loom-fuzz-config-" + std::to_string(::getpid()) + ".yaml";
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << input.substr(0, nul);
  }
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::istringstream lines(input.substr(nul + 1));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }
  auto config = loom::config::LoadRunConfig(path, overrides);
  if (config.ok()) (void)loom::config::ResolvedYaml(*config);
  return 0;
}
