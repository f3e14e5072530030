// A chain of digits, each the sum of the two before it mod 10 (Fibonacci mod
// 10), run a given number of steps from two starting digits. One scratchpad
// line per digit, a letter counting down the steps still to go and the digit
// ("Chain 2 from 3 8": "d3\nc8\nb1\na9", ending at "a"), so every line
// adds the digits three and six tokens back; the answer is the last digit.
// A step is one small sum, but a bare answer has to do them all in one
// forward pass, and working costs three tokens a step, known from the prompt
// before the first line.

#include <string>

#include "tasks/generators.h"
#include "tasks/random.h"

namespace loom::tasks {

Problem ChainGenerator::Generate(uint64_t seed, int difficulty) const {
  Rng rng(seed);
  int before = static_cast<int>(rng.Uniform(0, 9));
  int last = static_cast<int>(rng.Uniform(0, 9));
  const std::string prompt = "Chain " + std::to_string(difficulty) + " from " +
                             std::to_string(before) + " " + std::to_string(last);
  // The line of the digit with `left` steps still to go after it.
  auto line = [](int left, int digit) {
    return std::string(1, static_cast<char>('a' + left)) + std::to_string(digit);
  };
  std::string pad = line(difficulty + 1, before) + "\n" + line(difficulty, last);
  for (int left = difficulty - 1; left >= 0; --left) {
    const int next = (before + last) % 10;
    before = last;
    last = next;
    pad += "\n" + line(left, last);
  }
  return MakeProblem(prompt, pad, std::to_string(last), VerifierKind::kExact, difficulty);
}

}  // namespace loom::tasks
