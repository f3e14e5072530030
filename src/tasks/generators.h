#pragma once
// The built-in generators (see loom/tasks/generator.h for the formats) and
// the helper they share.

#include <string>

#include "loom/tasks/generator.h"

namespace loom::tasks {

// A problem with one user turn and its reference assistant turn.
Problem MakeProblem(const std::string& user, const std::string& reasoning,
                    const std::string& answer, VerifierKind verifier, int difficulty);

class ArithmeticGenerator : public TaskGenerator {
 public:
  Problem Generate(uint64_t seed, int difficulty) const override;
};

class SortGenerator : public TaskGenerator {
 public:
  Problem Generate(uint64_t seed, int difficulty) const override;
};

class ReverseGenerator : public TaskGenerator {
 public:
  Problem Generate(uint64_t seed, int difficulty) const override;
};

class ChainGenerator : public TaskGenerator {
 public:
  Problem Generate(uint64_t seed, int difficulty) const override;
};

class EffortGenerator : public TaskGenerator {
 public:
  Problem Generate(uint64_t seed, int difficulty) const override;
};

}  // namespace loom::tasks
