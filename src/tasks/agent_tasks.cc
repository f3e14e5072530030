#include "loom/tasks/agent_tasks.h"

#include <nlohmann/json.hpp>
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

struct Product {
  uint64_t a = 0, b = 0;
  std::string answer;  // a * b in decimal
};

Product ArithmeticValues(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> digits(100000000ULL, 999999999ULL);
  Product p;
  p.a = digits(rng);
  p.b = digits(rng);
  unsigned __int128 product = static_cast<unsigned __int128>(p.a) * p.b;
  do {
    p.answer.insert(p.answer.begin(), static_cast<char>('0' + static_cast<int>(product % 10)));
    product /= 10;
  } while (product > 0);
  return p;
}

// The lookup task's secret: one digit, in the file the problem names, which
// only a tool call reveals. It is the only digit in the conversation.
std::string LookupDigit(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return std::string(1, static_cast<char>('0' + rng() % 10));
}

constexpr char kLookupFile[] = "code.txt";

v1::ToolCall Call(const std::string& name, const std::string& key, const std::string& value) {
  v1::ToolCall call;
  call.set_name(name);
  call.set_arguments_json(nlohmann::json{{key, value}}.dump());
  return call;
}

// A turn that calls one tool and the output the tool gives.
DemonstrationTurn CallTurn(const std::string& reasoning, v1::ToolCall call,
                           const std::string& output) {
  DemonstrationTurn turn;
  turn.assistant.set_role("assistant");
  turn.assistant.set_reasoning_content(reasoning);
  *turn.assistant.add_tool_calls() = std::move(call);
  v1::ToolResult& result = turn.results.emplace_back();
  result.set_stdout(output);
  return turn;
}

// The final turn: `answer` as content, no tool call.
DemonstrationTurn AnswerTurn(const std::string& reasoning, const std::string& answer) {
  DemonstrationTurn turn;
  turn.assistant.set_role("assistant");
  turn.assistant.set_reasoning_content(reasoning);
  turn.assistant.set_content(answer);
  return turn;
}

}  // namespace

v1::Task ArithmeticTask(uint64_t seed) {
  const Product p = ArithmeticValues(seed);
  v1::Task task;
  task.set_id(absl::StrCat("arithmetic-", seed));
  task.set_problem(
      absl::StrCat("What is ", p.a, " * ", p.b, "? Submit the exact integer with no separators."));
  task.mutable_verification()->set_exact_answer(p.answer);
  return task;
}

v1::Task LookupTask(uint64_t seed) {
  const std::string digit = LookupDigit(seed);
  v1::Task task;
  task.set_id(absl::StrCat("lookup-", seed));
  task.set_problem(absl::StrCat("The file ", kLookupFile, " holds a digit. Submit the digit."));
  (*task.mutable_environment()->mutable_files())[kLookupFile] = digit + "\n";
  task.mutable_verification()->set_exact_answer(digit);
  return task;
}

v1::Task FixRepoTask(uint64_t seed) {
  std::mt19937_64 rng(seed);
  int high_input = 11 + static_cast<int>(rng() % 89);
  v1::Task task;
  task.set_id(absl::StrCat("fix_repo-", seed));
  task.set_problem(
      "calc.py fails its unit test (`python3 -m unittest`). Fix calc.py, not the tests, then "
      "answer in one line.");
  auto& files = *task.mutable_environment()->mutable_files();
  files["calc.py"] = kCalcModule;
  files["test_calc.py"] =
      absl::StrReplaceAll(kCalcTest, {{"HIGH_INPUT", absl::StrCat(high_input)}});
  v1::TestLists* tests = task.mutable_verification()->mutable_tests();
  // loom's runner: the verdict is its report, which calc.py cannot end, patch or forge.
  tests->set_runner("unittest");
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
  if (kind == "lookup") return LookupTask(seed);
  return v1::Task();
}

namespace {

// Whether the demonstration of task `seed` makes its task's slip: a share
// `fraction` of seeds, drawn apart from the task's own values.
bool Slips(uint64_t seed, double fraction) {
  if (fraction <= 0) return false;
  std::mt19937_64 rng(seed ^ 0x736c6970ULL);
  return std::uniform_real_distribution<double>(0, 1)(rng) < fraction;
}

}  // namespace

std::vector<DemonstrationTurn> BuiltinDemonstration(const std::string& kind, uint64_t seed,
                                                    double slip_fraction) {
  if (kind == "arithmetic") {
    const Product p = ArithmeticValues(seed);
    return {CallTurn("Too large to do by heart; python computes it.",
                     Call("python", "code", absl::StrCat("print(", p.a, " * ", p.b, ")")),
                     p.answer + "\n"),
            AnswerTurn("python printed the product.", p.answer)};
  }
  if (kind == "lookup") {
    const std::string digit = LookupDigit(seed);
    return {CallTurn("I read the file.", Call("read_file", "path", kLookupFile), digit + "\n"),
            AnswerTurn("", digit)};
  }
  if (kind == "fix_repo") {
    // The bug is `return low` on line 6 of calc.py; the slip patches the one
    // on line 4, which no test covers, so test_above still fails.
    const char* line = Slips(seed, slip_fraction) ? "4" : "6";
    return {CallTurn(
                "", Call("bash", "command", absl::StrCat("sed -i '", line, "s/low/high/' calc.py")),
                ""),
            AnswerTurn("", "Fixed clamp.")};
  }
  return {};
}

}  // namespace loom::tasks
