// Problems that ask the model for the reasoning effort its prompt gave it.
// Each carries its own effort (1..100, uniform over seeds), so it is shown
// at that effort whatever level the run samples. Mixed into SFT they teach
// a small model to read the effort line, which nothing else in its data
// depends on; what to do with the effort is left to the length reward.

#include <string>

#include "tasks/generators.h"
#include "tasks/random.h"

namespace loom::tasks {

Problem EffortGenerator::Generate(uint64_t seed, int difficulty) const {
  Rng rng(seed);
  const int effort = static_cast<int>(rng.Uniform(1, 100));
  Problem problem = MakeProblem("Your reasoning effort?", "", std::to_string(effort),
                                VerifierKind::kNumeric, difficulty);
  problem.effort = effort;
  return problem;
}

}  // namespace loom::tasks
