#pragma once
// TaskGenerator: a family of built-in problems, generated deterministically
// from a 64-bit seed at a given difficulty. Each problem comes with its
// verifier answer and a reference solution whose reasoning works the problem
// step by step (a scratchpad a tiny byte-level model can learn in minutes).
//
//   arithmetic  "Compute: 47+85"  reasoning "7+5+0=12 c1\n4+8+1=13 c1\n=132"   answer 132
//               (difficulty d: operands of up to d digits; + and -, never negative)
//   sort        "Sort: 42 7 19"   reasoning "7 from 42 7 19\n19 from 42 19\n..." answer "7 19 42"
//               (difficulty d: d + 1 integers in 0..99)
//   reverse     "Reverse: cat"    reasoning "3 t\n2 a\n1 c"                      answer "tac"
//               (difficulty d: a word of d + 2 lowercase letters)
//   chain       "Chain 2 from 3 8"  reasoning "d3\nc8\nb1\na9"                  answer "9"
//               (difficulty d: d more digits, each the sum of the two before mod 10)
//   effort      "Your reasoning effort?"  no reasoning                       answer 37
//               (the problem's own effort, 1..100, always shown in its prompt;
//               difficulty unused): teaches a small model to read the effort line
//
// Generators are immutable and thread-safe.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "loom/tasks/problem.h"

namespace loom::tasks {

class TaskGenerator {
 public:
  virtual ~TaskGenerator() = default;

  // The problem for `seed` at `difficulty` (>= 1). Fills messages (one user
  // turn), answer, verifier, reference and difficulty; not id or dataset.
  virtual Problem Generate(uint64_t seed, int difficulty) const = 0;
};

// "arithmetic" | "sort" | "reverse" | "chain" | "effort"; anything else is INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<TaskGenerator>> MakeGenerator(const std::string& kind);

}  // namespace loom::tasks
