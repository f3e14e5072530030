#pragma once
// StepInputs: what a batch trainer (GRPO, OPD) reads of the run. The stage
// that owns the trainer builds it; the trainer keeps no other view of the run
// and counts no versions: each batch says which policy version it trains.

#include "loom/chat/special_tokens.h"
#include "loom/config/run_config.h"
#include "loom/dist/group.h"
#include "loom/model/transformer.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::train {

struct StepInputs {
  const config::RunConfig& config;
  model::Transformer& model;  // the policy; trained in place
  const tokenizer::Tokenizer& tokenizer;
  chat::SpecialTokenIds special_tokens;  // EOS, </think>: resolved once from the tokenizer
  dist::Group* group = nullptr;          // the ranks of a multi-rank run; null for one rank
};

}  // namespace loom::train
