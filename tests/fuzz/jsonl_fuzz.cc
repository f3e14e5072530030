// One line of a JSON-lines dataset: a problem or an error saying what is
// wrong, never a crash. A problem that parses must score its own answer 1.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "loom/tasks/jsonl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto problem =
      loom::tasks::ParseProblemLine(std::string(reinterpret_cast<const char*>(data), size));
  if (problem.ok() && problem->verifier != loom::tasks::VerifierKind::kRegex &&
      problem->Score(problem->answer) != 1.0) {
    std::abort();
  }
  return 0;
}
