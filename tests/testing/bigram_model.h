#pragma once
// A model whose next token depends only on the current one, set by hand on
// a model `loom init-model` wrote, so that greedy decoding is known in
// advance (no scripted output: the real forward pass produces it). Every
// layer's output projections are zero, so the last position's hidden state
// is the final norm of its own token's embedding; the embeddings are basis
// vectors and the LM head maps each one, by a wide margin, to the token
// that should follow.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/model/transformer.h"

namespace loom::testing {

// `next`: (token, the token that follows it). `otherwise`: what follows every
// token not listed (none: a direction the head ignores, so all logits tie).
inline void MakeBigramModel(const std::string& dir,
                            const std::vector<std::pair<int64_t, int64_t>>& next,
                            std::optional<int64_t> otherwise = std::nullopt) {
  auto model = model::Transformer::Load(dir, {});
  ASSERT_TRUE(model.ok()) << model.status();
  at::NoGradGuard no_grad;
  const int64_t other = static_cast<int64_t>(next.size());  // the unlisted tokens' direction
  for (auto& [name, weight] : (*model)->NamedParameters()) {
    if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos) {
      weight.zero_();
    } else if (name.find("embed_tokens") != std::string::npos) {
      ASSERT_GT(weight.size(1), other);
      weight.zero_();
      weight.select(1, other).fill_(1);
      for (size_t i = 0; i < next.size(); ++i) weight[next[i].first].zero_()[i] = 1;
    } else if (name.find("lm_head") != std::string::npos) {
      // A margin of hundreds of logits: sampling at temperature 1 follows it too.
      weight.zero_();
      for (size_t i = 0; i < next.size(); ++i) weight[next[i].second][i] = 100;
      if (otherwise) weight[*otherwise][other] = 100;
    }
  }
  ASSERT_TRUE((*model)->Save(dir).ok());
}

}  // namespace loom::testing
