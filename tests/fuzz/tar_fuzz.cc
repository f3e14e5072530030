// A task environment's tar archive (plain or gzip): its files or an error
// naming what is wrong, never a crash, and never a path that leaves the
// workspace. The bytes go through a memfd, as the reader takes a path.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tasks/tar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("tar_fuzz", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  auto files = loom::tasks::ReadTarFiles("/proc/self/fd/" + std::to_string(fd), 1 << 20);
  close(fd);
  if (!files.ok()) return 0;
  for (const auto& [path, text] : *files) {
    const std::string parts = "/" + path + "/";
    if (path.empty() || path[0] == '/' || parts.find("/../") != std::string::npos ||
        parts.find("/./") != std::string::npos || parts.find("//") != std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
