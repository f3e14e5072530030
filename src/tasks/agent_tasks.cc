#include "loom/tasks/agent_tasks.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace loom::tasks {
namespace {

constexpr char kCalcModule[] = R"(def clamp(value, low, high):
    """Returns value limited to the closed range [low, high]."""
    if value < low:
        return low
    if value > high:
        return low
    return value


def scale(value, factor):
    return value * factor
)";

constexpr char kCalcTest[] = R"(import unittest

from calc import clamp, scale


class ClampTest(unittest.TestCase):
    def test_inside(self):
        self.assertEqual(clamp(5, 0, 10), 5)

    def test_above(self):
        self.assertEqual(clamp(HIGH_INPUT, 0, 10), 10)


class ScaleTest(unittest.TestCase):
    def test_scale(self):
        self.assertEqual(scale(3, 4), 12)


if __name__ == "__main__":
    unittest.main()
)";

}  // namespace

v1::Task ArithmeticTask(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> digits(100000000ULL, 999999999ULL);
  uint64_t a = digits(rng), b = digits(rng);
  unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  std::string answer;
  do {
    answer.insert(answer.begin(), static_cast<char>('0' + static_cast<int>(product % 10)));
    product /= 10;
  } while (product > 0);
  v1::Task task;
  task.set_id(absl::StrCat("arithmetic-", seed));
  task.set_problem(
      absl::StrCat("What is ", a, " * ", b, "? Submit the exact integer with no separators."));
  task.mutable_verification()->set_exact_answer(answer);
  return task;
}

v1::Task FixRepoTask(uint64_t seed) {
  std::mt19937_64 rng(seed);
  int high_input = 11 + static_cast<int>(rng() % 89);
  v1::Task task;
  task.set_id(absl::StrCat("fix_repo-", seed));
  task.set_problem(
      "The repository in /workspace has a failing unit test (run `python3 -m unittest` there). "
      "Fix the bug in calc.py without changing the tests, then submit a one-line summary.");
  auto& files = *task.mutable_environment()->mutable_files();
  files["calc.py"] = kCalcModule;
  files["test_calc.py"] =
      absl::StrReplaceAll(kCalcTest, {{"HIGH_INPUT", absl::StrCat(high_input)}});
  v1::TestLists* tests = task.mutable_verification()->mutable_tests();
  tests->set_command("python3 -m unittest -q {test}");
  tests->add_fail_to_pass("test_calc.ClampTest.test_above");
  tests->add_pass_to_pass("test_calc.ClampTest.test_inside");
  tests->add_pass_to_pass("test_calc.ScaleTest.test_scale");
  // The fix is calc.py; everything else (the tests above all) is verified as given.
  task.mutable_verification()->add_answer_paths("calc.py");
  return task;
}

v1::Task BuiltinTask(const std::string& kind, uint64_t seed) {
  if (kind == "arithmetic") return ArithmeticTask(seed);
  if (kind == "fix_repo") return FixRepoTask(seed);
  return v1::Task();
}

}  // namespace loom::tasks
