// Sorting a list of integers ascending by repeated selection of the minimum:
// one scratchpad line per pick, "m from <what is left>".

#include <algorithm>
#include <string>
#include <vector>

#include "tasks/generators.h"
#include "tasks/random.h"

namespace loom::tasks {
namespace {

std::string Join(const std::vector<int>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i ? " " : "") + std::to_string(values[i]);
  return text;
}

std::string SelectionScratchpad(std::vector<int> left) {
  std::string pad;
  while (!left.empty()) {
    auto smallest = std::min_element(left.begin(), left.end());
    pad += std::to_string(*smallest) + " from " + Join(left) + "\n";
    left.erase(smallest);
  }
  pad.pop_back();
  return pad;
}

}  // namespace

Problem SortGenerator::Generate(uint64_t seed, int difficulty) const {
  Rng rng(seed);
  std::vector<int> values(difficulty + 1);
  for (int& v : values) v = static_cast<int>(rng.Uniform(0, 99));
  std::vector<int> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  return MakeProblem("Sort: " + Join(values), SelectionScratchpad(values), Join(sorted),
                     VerifierKind::kExact, difficulty);
}

}  // namespace loom::tasks
