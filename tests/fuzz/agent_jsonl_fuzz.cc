// One line of an agent task file: a task or errors naming what is wrong,
// never a crash. Environment dirs resolve under a directory that does not
// exist, so nothing outside is read. A task that parses has an id, a
// problem, a verification of one kind and only workspace paths.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "loom/tasks/agent_jsonl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::tasks::AgentTask task;
  const std::vector<std::string> errors = loom::tasks::ParseAgentTaskLine(
      std::string(reinterpret_cast<const char*>(data), size), "/nonexistent-loom-fuzz", task);
  if (!errors.empty()) return 0;
  const loom::v1::Verification& v = task.task.verification();
  if (task.task.id().empty() || task.task.problem().empty() ||
      v.kind_case() == loom::v1::Verification::KIND_NOT_SET) {
    std::abort();
  }
  for (const auto& [path, text] : task.task.environment().files()) {
    const std::string parts = "/" + path + "/";
    if (path.empty() || path[0] == '/' || parts.find("/../") != std::string::npos ||
        parts.find("/./") != std::string::npos || parts.find("//") != std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
