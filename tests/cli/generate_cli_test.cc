// `loom generate` through the real binary, on a model whose weights are set
// by hand so that greedy decoding is known in advance: it must keep the end
// of sentence the model writes and parse the completion with it.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tokenizer.h"
#include "testing/bigram_model.h"
#include "testing/temp_dir.h"

namespace loom {
namespace {

using testing::RunLoom;
using testing::TempDir;

// Greedy decoding after `<think>` writes "</think>x" and then the end of sentence.
void MakeModelAnswerX(const std::string& dir) {
  auto tok = tokenizer::Tokenizer::FromFile(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int64_t think = *(*tok)->TokenToId(tokenizer::dsv4::kThinkOpen);
  const int64_t think_end = *(*tok)->TokenToId(tokenizer::dsv4::kThinkClose);
  const int64_t eos = *(*tok)->TokenToId(tokenizer::dsv4::kEos);
  const auto x = (*tok)->Encode("x");
  ASSERT_TRUE(x.ok() && x->size() == 1u);
  testing::MakeBigramModel(dir, {{think, think_end}, {think_end, (*x)[0]}, {(*x)[0], eos}});
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
