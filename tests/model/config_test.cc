// config.json parsing, validation and overrides.

#include "loom/model/config.h"

#include <gtest/gtest.h>

namespace loom::model {
namespace {

const char* kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-6,
  "rope_theta": 1000000.0, "max_position_embeddings": 4096, "tie_word_embeddings": false,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
  "norm_topk_prob": true, "decoder_sparse_step": 2, "mlp_only_layers": [3],
  "hidden_act": "silu", "rope_scaling": null, "bos_token_id": 1, "transformers_version": "4.51.0"
})";

TEST(ModelConfigTest, ParsesQwen3MoeAndItsLayerRule) {
  auto c = ParseModelConfig(kQwen3Moe, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, "qwen3_moe");
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_FALSE(c->IsMoeLayer(3));  // sparse step would pick it, mlp_only_layers wins
  EXPECT_EQ(c->NumMoeLayers(), 1);
  EXPECT_TRUE(c->HasQkNorm());
}

TEST(ModelConfigTest, RoundTripKeepsUninterpretedKeys) {
  auto c = ParseModelConfig(kQwen3Moe, "config.json");
  ASSERT_TRUE(c.ok());
  std::string text = ModelConfigToJson(*c);
  EXPECT_NE(text.find("\"bos_token_id\": 1"), std::string::npos) << text;
  auto again = ParseModelConfig(text, "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ModelConfigToJson(*again), text);
}

TEST(ModelConfigTest, UnsupportedRopeScalingIsNamed) {
  std::string text = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})";
  auto c = ParseModelConfig(text, "dir/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dir/config.json: rope_scaling type 'llama3'"),
            std::string::npos) << c.status();
}

TEST(ModelConfigTest, MalformedInputsAreErrors) {
  EXPECT_FALSE(ParseModelConfig("{not json", "x").ok());
  EXPECT_FALSE(ParseModelConfig("[1, 2]", "x").ok());
  EXPECT_FALSE(ParseModelConfig(R"({"model_type": "gpt2"})", "x").ok());
  auto wrong_type = ParseModelConfig(R"({"model_type": "llama", "hidden_size": "big"})", "x");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("hidden_size"), std::string::npos);
  auto bad_heads = ParseModelConfig(R"({"model_type": "llama", "vocab_size": 10,
    "hidden_size": 12, "intermediate_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 3, "num_key_value_heads": 2, "head_dim": 4})", "x");
  ASSERT_FALSE(bad_heads.ok());
  EXPECT_NE(bad_heads.status().message().find("multiple of num_key_value_heads"),
            std::string::npos);
  auto act = ParseModelConfig(R"({"model_type": "llama", "hidden_act": "gelu"})", "x");
  ASSERT_FALSE(act.ok());
  EXPECT_NE(act.status().message().find("hidden_act"), std::string::npos);
}

TEST(ModelConfigTest, OverridesParseJsonValuesAndRevalidate) {
  auto c = DefaultModelConfig("qwen3_moe");
  ASSERT_TRUE(c.ok());
  c->vocab_size = 300;
  ASSERT_TRUE(ApplyConfigOverride(*c, "hidden_size=96").ok());
  ASSERT_TRUE(ApplyConfigOverride(*c, "mlp_only_layers=[0]").ok());
  ASSERT_TRUE(ApplyConfigOverride(*c, "tie_word_embeddings=true").ok());
  EXPECT_EQ(c->hidden_size, 96);
  EXPECT_EQ(c->mlp_only_layers, std::vector<int64_t>{0});
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(ApplyConfigOverride(*c, "num_attention_heads=3").ok());
  EXPECT_EQ(c->num_attention_heads, 4);  // unchanged after a failed override
  EXPECT_FALSE(ApplyConfigOverride(*c, "no_equals_sign").ok());
  EXPECT_FALSE(DefaultModelConfig("gpt2").ok());
}

}  // namespace
}  // namespace loom::model
