#include "loom/tasks/generator.h"

#include "absl/status/status.h"
#include "tasks/generators.h"

namespace loom::tasks {

Problem MakeProblem(const std::string& user, const std::string& reasoning,
                    const std::string& answer, VerifierKind verifier, int difficulty) {
  Problem problem;
  problem.messages = nlohmann::json::array({{{"role", "user"}, {"content", user}}});
  problem.answer = answer;
  problem.verifier = verifier;
  problem.reference =
      nlohmann::json{{"role", "assistant"}, {"reasoning_content", reasoning}, {"content", answer}};
  problem.difficulty = difficulty;
  return problem;
}

absl::StatusOr<std::unique_ptr<TaskGenerator>> MakeGenerator(const std::string& kind) {
  if (kind == "arithmetic") return std::make_unique<ArithmeticGenerator>();
  if (kind == "sort") return std::make_unique<SortGenerator>();
  if (kind == "reverse") return std::make_unique<ReverseGenerator>();
  if (kind == "chain") return std::make_unique<ChainGenerator>();
  if (kind == "effort") return std::make_unique<EffortGenerator>();
  return absl::InvalidArgumentError("unknown task generator '" + kind +
                                    "' (expected arithmetic, sort, reverse, chain or effort)");
}

}  // namespace loom::tasks
