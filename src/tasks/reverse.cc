// Reversing a lowercase word: the scratchpad spells it from the last letter,
// one "position letter" line each.

#include <string>

#include "tasks/generators.h"
#include "tasks/random.h"

namespace loom::tasks {

Problem ReverseGenerator::Generate(uint64_t seed, int difficulty) const {
  Rng rng(seed);
  std::string word(difficulty + 2, 'a');
  for (char& c : word) c = static_cast<char>('a' + rng.Uniform(0, 25));
  const std::string reversed(word.rbegin(), word.rend());
  std::string pad;
  for (size_t i = word.size(); i > 0; --i) {
    pad += std::to_string(i) + " " + word[i - 1] + (i > 1 ? "\n" : "");
  }
  return MakeProblem("Reverse: " + word, pad, reversed, VerifierKind::kExact, difficulty);
}

}  // namespace loom::tasks
