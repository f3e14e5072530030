// The two forward paths against each other, routing replay, gradients,
// chunked log-probs, save/load.

#include "loom/model/transformer.h"

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "model/test_models.h"
#include "testing/temp_dir.h"

namespace loom::model {
namespace {

using testing::TestConfig;
using testing::TestModel;

std::vector<std::vector<int64_t>> RandomSequences(const std::vector<int64_t>& lengths,
                                                  int64_t vocab, uint64_t seed) {
  std::vector<std::vector<int64_t>> out;
  at::manual_seed(seed);
  for (int64_t n : lengths) {
    at::Tensor t = at::randint(vocab, {n}, at::kLong);
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  }
  return out;
}

// Full-vocabulary logits of every position of one sequence from Score.
at::Tensor FullForwardLogprobs(const Transformer& model, const std::vector<int64_t>& seq) {
  PackedBatch batch = TeacherForcingBatch({seq});
  ScoreOptions options;
  options.full_vocab_rows = at::arange(static_cast<int64_t>(seq.size()), at::kLong);
  auto result = model.Score(batch, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result->full_logprobs;  // [n, V]
}

class ArchTest : public ::testing::TestWithParam<std::string> {};

// Prefill chunks and one-token decodes over a paged cache, samples of mixed
// lengths crossing block boundaries, give the logits of the full forward.
TEST_P(ArchTest, IncrementalDecodeMatchesFullForward) {
  ModelConfig config = TestConfig(GetParam());
  auto model = TestModel(config, 7);
  auto seqs = RandomSequences({5, 13, 9, 21}, config.vocab_size, 3);
  KvBlockPool pool(model->PoolOptions(/*max_tokens=*/256, /*block_size=*/4));
  std::vector<KvSequence> kv(seqs.size());
  std::vector<int64_t> prompt = {3, 6, 1, 9};  // prefill sizes, then decode one at a time
  std::vector<std::vector<at::Tensor>> step_logprobs(seqs.size());
  bool first = true;
  while (true) {
    std::vector<StepInput> batch;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      int64_t done = kv[s].length, n = first ? prompt[s] : 1;
      if (done + n > static_cast<int64_t>(seqs[s].size())) continue;
      batch.push_back({&kv[s], {seqs[s].begin() + done, seqs[s].begin() + done + n}});
      who.push_back(s);
    }
    if (batch.empty()) break;
    auto result = model->Step(batch, pool);
    ASSERT_TRUE(result.ok()) << result.status();
    for (size_t i = 0; i < who.size(); ++i) {
      step_logprobs[who[i]].push_back(at::log_softmax(result->logits[i], -1));
    }
    first = false;
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    at::Tensor full = FullForwardLogprobs(*model, seqs[s]);
    at::Tensor inc = at::stack(step_logprobs[s]);  // rows prompt-1 .. n-1
    at::Tensor expect = full.narrow(0, prompt[s] - 1, inc.size(0));
    EXPECT_LE((inc - expect).abs().max().item<double>(), 1e-4) << "sample " << s;
    EXPECT_EQ(kv[s].length, static_cast<int64_t>(seqs[s].size()));
  }
}

// Scoring sequences packed together equals scoring each alone.
TEST_P(ArchTest, PackedScoringMatchesSeparate) {
  ModelConfig config = TestConfig(GetParam());
  auto model = TestModel(config, 11);
  auto seqs = RandomSequences({7, 3, 12}, config.vocab_size, 5);
  auto packed = model->Score(TeacherForcingBatch(seqs));
  ASSERT_TRUE(packed.ok()) << packed.status();
  int64_t offset = 0;
  for (const auto& seq : seqs) {
    auto alone = model->Score(TeacherForcingBatch({seq}));
    ASSERT_TRUE(alone.ok());
    at::Tensor part = packed->logprobs.narrow(0, offset, seq.size());
    EXPECT_LE((part - alone->logprobs).abs().max().item<double>(), 1e-5);
    offset += seq.size();
  }
}

// Chunked target log-probs (forward and backward) equal a direct log_softmax,
// also where rows without a target (a prompt, a gap) cut across the chunks.
TEST_P(ArchTest, ChunkedLogprobsMatchDirectComputation) {
  ModelConfig config = TestConfig(GetParam());
  auto model = TestModel(config, 13);
  model->SetRequiresGrad(true);
  auto seqs = RandomSequences({10, 7}, config.vocab_size, 9);
  PackedBatch batch = TeacherForcingBatch(seqs);
  batch.targets.narrow(0, 0, 4).fill_(-1);
  batch.targets.narrow(0, 11, 2).fill_(-1);
  ScoreOptions options;
  options.chunk_tokens = 3;
  options.full_vocab_rows = at::arange(17, at::kLong);
  auto result = model->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  at::Tensor valid = batch.targets.ge(0);
  at::Tensor direct = result->full_logprobs.gather(1, batch.targets.clamp_min(0).unsqueeze(1))
                          .squeeze(1)
                          .masked_fill(valid.logical_not(), 0);
  EXPECT_LE((direct - result->logprobs).abs().max().item<double>(), 1e-5);
  auto params = model->Parameters();
  auto g_chunked = torch::autograd::grad({result->logprobs.sum()}, params, {}, true, false, true);
  auto g_direct = torch::autograd::grad({direct.sum()}, params, {}, false, false, true);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!g_direct[i].defined()) continue;
    EXPECT_TRUE(at::allclose(g_chunked[i], g_direct[i], 1e-4, 1e-5)) << i;
  }
}

// Score at temperature T gives log softmax(logits / T): checked against the
// temperature-1 full-vocabulary log-probs rescaled by hand (log_softmax is
// shift-invariant, so log_softmax(logprobs / T) == log_softmax(logits / T)).
TEST(TransformerTest, ScoreAtTemperatureIsTheTemperedSoftmax) {
  ModelConfig config = TestConfig("llama");
  auto model = TestModel(config, 17);
  auto seqs = RandomSequences({9, 6}, config.vocab_size, 4);
  PackedBatch batch = TeacherForcingBatch(seqs);
  ScoreOptions plain;
  plain.full_vocab_rows = at::arange(15, at::kLong);
  auto reference = model->Score(batch, plain);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ScoreOptions tempered;
  tempered.temperature = 0.6;
  tempered.chunk_tokens = 4;
  auto result = model->Score(batch, tempered);
  ASSERT_TRUE(result.ok()) << result.status();
  at::Tensor valid = batch.targets.ge(0);
  at::Tensor expected = at::log_softmax(reference->full_logprobs.to(at::kDouble) / 0.6, -1)
                            .gather(1, batch.targets.clamp_min(0).unsqueeze(1))
                            .squeeze(1)
                            .masked_fill(valid.logical_not(), 0);
  EXPECT_LE((expected - result->logprobs.to(at::kDouble)).abs().max().item<double>(), 1e-5);
  EXPECT_GT((result->logprobs - reference->logprobs).abs().max().item<double>(), 1e-2);

  for (double bad : {0.0, -1.0, std::nan("")}) {
    ScoreOptions options;
    options.temperature = bad;
    auto status = model->Score(batch, options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("temperature must be > 0"), std::string::npos) << status;
  }
}

// bfloat16 parameters run both paths and stay close to float32.
TEST_P(ArchTest, Bfloat16FollowsFloat32) {
  ModelConfig config = TestConfig(GetParam());
  auto fp32 = TestModel(config, 37);
  LoadOptions bf16_options;
  bf16_options.dtype = at::kBFloat16;
  auto bf16 = Transformer::FromTensors(config, fp32->StateDict(), bf16_options);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  PackedBatch batch = TeacherForcingBatch(RandomSequences({11, 6}, config.vocab_size, 8));
  auto a = fp32->Score(batch);
  auto b = (*bf16)->Score(batch);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(b->logprobs.scalar_type(), at::kFloat);
  EXPECT_LE((a->logprobs - b->logprobs).abs().mean().item<double>(), 0.1);
  KvBlockPool pool((*bf16)->PoolOptions(64, 4));
  KvSequence seq;
  auto step = (*bf16)->Step({{&seq, {1, 2, 3, 4, 5}}}, pool);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(pool.BytesPerToken(),
            2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2);
}

// With autocast the layers' matrix products run in bfloat16: the log-probs and
// every parameter's gradient stay close to the float32 model's, not equal to
// them, and the gradients land in float32. Autocast is off again afterwards.
TEST_P(ArchTest, AutocastTrainsLikeFloat32) {
  ModelConfig config = TestConfig(GetParam());
  auto fp32 = TestModel(config, 41, {at::kFloat, at::kCPU, true});
  auto mixed =
      Transformer::FromTensors(config, fp32->StateDict(), {at::kFloat, at::kCPU, true, true});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  PackedBatch batch = TeacherForcingBatch(RandomSequences({13, 7, 9}, config.vocab_size, 5));
  auto a = fp32->Score(batch);
  auto b = (*mixed)->Score(batch);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(b->logprobs.scalar_type(), at::kFloat);
  const double gap = (a->logprobs - b->logprobs).abs().mean().item<double>();
  EXPECT_GT(gap, 0.0) << "autocast changed nothing: the products did not run in bfloat16";
  EXPECT_LE(gap, 0.05);
  a->logprobs.sum().backward();
  b->logprobs.sum().backward();
  auto named_a = fp32->NamedParameters(), named_b = (*mixed)->NamedParameters();
  ASSERT_EQ(named_a.size(), named_b.size());
  for (size_t i = 0; i < named_a.size(); ++i) {
    const at::Tensor& ga = named_a[i].second.grad();
    const at::Tensor& gb = named_b[i].second.grad();
    ASSERT_TRUE(ga.defined() && gb.defined()) << named_a[i].first;
    EXPECT_EQ(gb.scalar_type(), at::kFloat) << named_a[i].first;
    const double cosine =
        (ga * gb).sum().item<double>() / (ga.norm().item<double>() * gb.norm().item<double>());
    EXPECT_GT(cosine, 0.98) << named_a[i].first;
  }
  at::Tensor x = at::randn({4, 4});
  EXPECT_EQ(at::matmul(x, x).scalar_type(), at::kFloat) << "autocast left on after Score";
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchTest, ::testing::ValuesIn(testing::AllArchs()));

TEST(RoutingTest, ReplayEqualsFreshRoutingAndTrainsTheRouter) {
  ModelConfig config = TestConfig("qwen3_moe");
  auto model = TestModel(config, 17);
  model->SetRequiresGrad(true);
  PackedBatch batch = TeacherForcingBatch(RandomSequences({9, 6}, config.vocab_size, 2));
  auto fresh = model->Score(batch);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_EQ(fresh->routing.sizes().vec(), (std::vector<int64_t>{15, 2, 2}));
  EXPECT_EQ(fresh->routing.scalar_type(), kRoutingDtype);
  batch.replay_routing = fresh->routing;
  auto replayed = model->Score(batch);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_TRUE(at::equal(fresh->logprobs, replayed->logprobs));
  EXPECT_TRUE(at::equal(fresh->routing, replayed->routing));
  replayed->logprobs.sum().backward();
  for (auto& [name, p] : model->NamedParameters()) {
    if (name.find("mlp.gate.weight") == std::string::npos) continue;
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << name;
  }
}

TEST(RoutingTest, ReplayForcesTheRecordedExperts) {
  ModelConfig config = TestConfig("qwen3_moe");
  auto model = TestModel(config, 19);
  PackedBatch batch = TeacherForcingBatch(RandomSequences({8}, config.vocab_size, 4));
  auto fresh = model->Score(batch);
  ASSERT_TRUE(fresh.ok());
  // Shift every choice to other experts: the log-probs must change.
  batch.replay_routing =
      ((fresh->routing.to(at::kLong) + 1) % config.num_experts).to(kRoutingDtype);
  auto forced = model->Score(batch);
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(at::equal(forced->routing, batch.replay_routing));
  EXPECT_GT((forced->logprobs - fresh->logprobs).abs().max().item<double>(), 1e-4);
}

TEST(RoutingTest, StepRoutingMatchesScoreRouting) {
  ModelConfig config = TestConfig("qwen3_moe");
  auto model = TestModel(config, 23);
  auto seq = RandomSequences({12}, config.vocab_size, 6)[0];
  KvBlockPool pool(model->PoolOptions(64, 4));
  KvSequence kv;
  auto prefill = model->Step({{&kv, {seq.begin(), seq.begin() + 8}}}, pool);
  auto decode = model->Step({{&kv, {seq.begin() + 8, seq.end()}}}, pool);
  ASSERT_TRUE(prefill.ok() && decode.ok());
  auto score = model->Score(TeacherForcingBatch({seq}));
  ASSERT_TRUE(score.ok());
  at::Tensor stepped = at::cat({prefill->routing, decode->routing});
  EXPECT_TRUE(at::equal(stepped, score->routing));
  EXPECT_EQ(decode->routing_offsets, (std::vector<int64_t>{0, 4}));
}

TEST(StepTest, FullPoolIsAnErrorThatChangesNothing) {
  auto model = TestModel(TestConfig("llama"), 1);
  KvBlockPool pool(model->PoolOptions(8, 4));  // 2 blocks
  KvSequence a, b;
  ASSERT_TRUE(model->Step({{&a, {1, 2, 3, 4, 5}}}, pool).ok());
  auto full = model->Step({{&a, {6}}, {&b, {1, 2, 3, 4, 5}}}, pool);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.length, 5);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(pool.free_blocks(), 0);
}

TEST(StepTest, BadTokenIsAnError) {
  auto model = TestModel(TestConfig("llama"), 1);
  KvBlockPool pool(model->PoolOptions(8, 4));
  KvSequence a;
  auto result = model->Step({{&a, {1, 500}}}, pool);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.free_blocks(), 2);
  auto score = model->Score(TeacherForcingBatch({{1, -3}}));
  EXPECT_EQ(score.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SaveLoadTest, RoundTripIsBitExact) {
  for (const std::string& arch : testing::AllArchs()) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      LoadOptions options;
      options.dtype = dtype;
      auto model = TestModel(TestConfig(arch), 29, options);
      loom::testing::TempDir dir;
      ASSERT_TRUE(model->Save(dir.path()).ok());
      auto loaded = Transformer::Load(dir.path(), options);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      auto a = model->NamedParameters(), b = (*loaded)->NamedParameters();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].first, b[i].first);
        EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << arch << " " << a[i].first;
      }
    }
  }
}

TEST(SaveLoadTest, ShardedRoundTripIsBitExact) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    LoadOptions options;
    options.dtype = dtype;
    auto model = TestModel(TestConfig("qwen3_moe"), 31, options);
    loom::testing::TempDir dir;
    ASSERT_TRUE(model->Save(dir.path(), /*max_shard_bytes=*/4096).ok());
    EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
    EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
    auto loaded = Transformer::Load(dir.path(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto a = model->NamedParameters(), b = (*loaded)->NamedParameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
    }
  }
}

TEST(SaveLoadTest, TiedEmbeddingsShareOneTensor) {
  ModelConfig config = TestConfig("qwen3");
  config.tie_word_embeddings = true;
  auto model = TestModel(config, 3);
  auto state = model->StateDict();
  EXPECT_EQ(state.count("lm_head.weight"), 0u);
  loom::testing::TempDir dir;
  ASSERT_TRUE(model->Save(dir.path()).ok());
  auto loaded = Transformer::Load(dir.path(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto seqs = TeacherForcingBatch({{1, 2, 3}});
  EXPECT_TRUE(at::equal(model->Score(seqs)->logprobs, (*loaded)->Score(seqs)->logprobs));
}

TEST(SaveLoadTest, MissingUnexpectedAndMisshapenTensorsAreOneError) {
  ModelConfig config = TestConfig("qwen2");
  auto model = TestModel(config, 3);
  TensorMap tensors = model->StateDict();
  tensors.erase("model.layers.1.self_attn.q_proj.bias");
  tensors.erase("model.norm.weight");
  tensors["model.layers.0.extra.weight"] = at::zeros({2});
  tensors["lm_head.weight"] = at::zeros({3, 3});
  auto result = Transformer::FromTensors(config, tensors, {});
  ASSERT_FALSE(result.ok());
  std::string message(result.status().message());
  EXPECT_NE(
      message.find("missing tensors: model.layers.1.self_attn.q_proj.bias, model.norm.weight"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("unexpected tensors: model.layers.0.extra.weight"), std::string::npos);
  EXPECT_NE(message.find("lm_head.weight is [3, 3], expected [97, 48]"), std::string::npos);
}

}  // namespace
}  // namespace loom::model
