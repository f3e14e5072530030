// `loom generate` through the real binary, on a model whose weights are set
// by hand so that greedy decoding is known in advance: it must keep the end
// of sentence the model writes and parse the completion with it.

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "loom/model/transformer.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tokenizer.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

// Rewrites the model in `dir` so that greedy decoding after `<think>` writes
// "</think>x" and then the end of sentence. Every layer's output projections
// are zero, so the last position's hidden state is the final norm of its own
// token's embedding; the embeddings are basis vectors and the LM head maps
// each one to the token that should follow it.
void MakeModelAnswerX(const std::string& dir) {
  auto tok = tokenizer::Tokenizer::FromFile(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int64_t think = *(*tok)->TokenToId(tokenizer::dsv4::kThinkOpen);
  const int64_t think_end = *(*tok)->TokenToId(tokenizer::dsv4::kThinkClose);
  const int64_t eos = *(*tok)->TokenToId(tokenizer::dsv4::kEos);
  const auto x = (*tok)->Encode("x");
  ASSERT_TRUE(x.ok() && x->size() == 1u);
  auto model = model::Transformer::Load(dir, {});
  ASSERT_TRUE(model.ok()) << model.status();
  at::NoGradGuard no_grad;
  for (auto& [name, weight] : (*model)->NamedParameters()) {
    if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos) {
      weight.zero_();
    } else if (name.find("embed_tokens") != std::string::npos) {
      weight.zero_();
      weight.select(1, 3).fill_(1);  // every other token: a direction the head ignores
      weight[think].zero_()[0] = 1;
      weight[think_end].zero_()[1] = 1;
      weight[(*x)[0]].zero_()[2] = 1;
    } else if (name.find("lm_head") != std::string::npos) {
      weight.zero_();
      weight[think_end][0] = 1;  // after <think>
      weight[(*x)[0]][1] = 1;    // after </think>
      weight[eos][2] = 1;        // after x
    }
  }
  ASSERT_TRUE((*model)->Save(dir).ok());
}

TEST(GenerateCliTest, KeepsTheEndOfSentenceAndParsesTheCompletion) {
  TempDir dir;
  const std::string model = dir / "model";
  auto made = RunLoom("init-model --arch llama --out " + model +
                      " --seed 3 --set hidden_size=64 --set num_hidden_layers=2");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_NO_FATAL_FAILURE(MakeModelAnswerX(model));
  auto run = RunLoom("generate --model " + model +
                     " --prompt 'Say x.' --temperature 0 --max-new-tokens 8 --effort max");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string completion =
      std::string(tokenizer::dsv4::kThinkClose) + "x" + std::string(tokenizer::dsv4::kEos);
  ASSERT_EQ(run.out.rfind(completion + "\n", 0), 0u) << run.out;
  const auto parsed = nlohmann::json::parse(run.out.substr(completion.size() + 1));
  EXPECT_EQ(parsed["content"], "x") << run.out;
  EXPECT_EQ(parsed.value("reasoning_content", ""), "") << run.out;
}

}  // namespace
}  // namespace loom
