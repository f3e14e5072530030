// Multi-digit addition and subtraction worked column by column, right to
// left. One scratchpad line per column: "a+b+carry=sum cC" for addition,
// "a-b-borrow=digit bB" for subtraction (digit after borrowing 10), then
// "=result".

#include <string>

#include "tasks/generators.h"
#include "tasks/random.h"

namespace loom::tasks {
namespace {

int64_t Pow10(int digits) {
  int64_t p = 1;
  for (int i = 0; i < digits; ++i) p *= 10;
  return p;
}

// Decimal digit i (0 = units) of x.
int Digit(int64_t x, int i) { return static_cast<int>(x / Pow10(i) % 10); }

int Digits(int64_t x) {
  int n = 1;
  while (x >= 10) x /= 10, ++n;
  return n;
}

std::string AddScratchpad(int64_t a, int64_t b) {
  std::string pad;
  int carry = 0;
  const int columns = std::max(Digits(a), Digits(b));
  for (int i = 0; i < columns; ++i) {
    const int x = Digit(a, i), y = Digit(b, i);
    const int sum = x + y + carry;
    pad += std::to_string(x) + "+" + std::to_string(y) + "+" + std::to_string(carry) + "=" +
           std::to_string(sum) + " c" + std::to_string(sum / 10) + "\n";
    carry = sum / 10;
  }
  return pad + "=" + std::to_string(a + b);
}

// a >= b.
std::string SubScratchpad(int64_t a, int64_t b) {
  std::string pad;
  int borrow = 0;
  for (int i = 0; i < Digits(a); ++i) {
    const int x = Digit(a, i), y = Digit(b, i);
    int diff = x - y - borrow;
    const int next_borrow = diff < 0 ? 1 : 0;
    diff += 10 * next_borrow;
    pad += std::to_string(x) + "-" + std::to_string(y) + "-" + std::to_string(borrow) + "=" +
           std::to_string(diff) + " b" + std::to_string(next_borrow) + "\n";
    borrow = next_borrow;
  }
  return pad + "=" + std::to_string(a - b);
}

}  // namespace

Problem ArithmeticGenerator::Generate(uint64_t seed, int difficulty) const {
  Rng rng(seed);
  const int64_t limit = Pow10(difficulty) - 1;
  int64_t a = rng.Uniform(0, limit), b = rng.Uniform(0, limit);
  const bool subtract = rng.Uniform(0, 1) == 1;
  if (subtract && a < b) std::swap(a, b);
  const std::string op = subtract ? "-" : "+";
  const int64_t result = subtract ? a - b : a + b;
  return MakeProblem("Compute: " + std::to_string(a) + op + std::to_string(b),
                     subtract ? SubScratchpad(a, b) : AddScratchpad(a, b), std::to_string(result),
                     VerifierKind::kNumeric, difficulty);
}

}  // namespace loom::tasks
