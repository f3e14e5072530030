// Reverse KL(student ‖ teacher) from Score (ScoreOptions::teacher) against a
// naive full-vocabulary computation: values, gradients, chunking, the compact
// and the log-prob forms of the teacher, closed forms, bad inputs; and the
// parameter accounting (ParameterCount, ParameterBytes, LmHead).

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "loom/model/distill.h"
#include "loom/model/transformer.h"
#include "model/test_models.h"

namespace loom::model {
namespace {

using testing::AllArchs;
using testing::TestConfig;
using testing::TestModel;

// Two sequences of 9 and 6 tokens: T = 15.
constexpr int64_t kTokens = 15;

PackedBatch Batch(int64_t vocab) {
  at::manual_seed(3);
  at::Tensor t = at::randint(vocab, {kTokens}, at::kLong);
  std::vector<int64_t> all(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + kTokens);
  return TeacherForcingBatch({{all.begin(), all.begin() + 9}, {all.begin() + 9, all.end()}});
}

// Unsorted, one row twice, both sequences' last tokens (targets -1) included.
at::Tensor Rows() { return at::tensor({8, 0, 14, 3, 9, 10, 3}, at::kLong); }

// "<arch>" or "<arch>-tied" (tied embeddings).
ModelConfig StudentConfig(const std::string& name) {
  const bool tied = name.size() > 5 && name.substr(name.size() - 5) == "-tied";
  ModelConfig c = TestConfig(tied ? name.substr(0, name.size() - 5) : name);
  c.tie_word_embeddings = tied;
  return c;
}

std::unique_ptr<Transformer> Student(const std::string& name) {
  return TestModel(StudentConfig(name), 21, {at::kFloat, at::kCPU, /*requires_grad=*/true});
}

// A teacher of another architecture and width on the same vocabulary.
std::unique_ptr<Transformer> Teacher(LoadOptions options = {}) {
  ModelConfig c = TestConfig("qwen2");
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  return TestModel(c, 5, options);
}

// The teacher's final hidden states at `rows` (compact form) plus its head.
TeacherRows CompactRows(const Transformer& teacher, const PackedBatch& batch,
                        const at::Tensor& rows) {
  at::NoGradGuard no_grad;
  ScoreOptions options;
  options.hidden_rows = rows;
  auto result = teacher.Score(batch, options);
  EXPECT_TRUE(result.ok()) << result.status();
  TeacherRows out;
  out.rows = rows;
  out.hidden = result->hidden;
  out.head = teacher.LmHead();
  return out;
}

// Full-vocabulary log-probs at `rows` and `temperature` [N, V] float32.
at::Tensor FullLogprobsAt(const Transformer& model, const PackedBatch& batch,
                          const at::Tensor& rows, double temperature) {
  ScoreOptions options;
  options.full_vocab_rows = rows;
  options.temperature = temperature;
  auto result = model.Score(batch, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result->full_logprobs;
}

// sum_v p_v (log p_v - log q_v) per row, in double.
at::Tensor NaiveKl(const at::Tensor& log_p, const at::Tensor& log_q) {
  at::Tensor lp = log_p.detach().to(at::kDouble), lq = log_q.detach().to(at::kDouble);
  return (lp.exp() * (lp - lq)).sum(-1);
}

// Gradients of `loss` with respect to `params` (undefined where unused).
std::vector<at::Tensor> Grads(const at::Tensor& loss, const std::vector<at::Tensor>& params) {
  return torch::autograd::grad({loss}, params, {}, /*retain_graph=*/true, false,
                               /*allow_unused=*/true);
}

void ExpectSameGrads(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                     double rtol, double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() || !b[i].defined()) {
      const at::Tensor& other = a[i].defined() ? a[i] : b[i];
      if (other.defined()) {
        EXPECT_EQ(other.abs().max().item<double>(), 0.0) << "param " << i;
      }
      continue;
    }
    EXPECT_TRUE(at::allclose(a[i], b[i], rtol, atol))
        << "param " << i << ": max diff " << (a[i] - b[i]).abs().max().item<double>();
  }
}

double MaxAbs(const std::vector<at::Tensor>& grads) {
  double m = 0;
  for (const at::Tensor& g : grads) {
    if (g.defined()) m = std::max(m, g.abs().max().item<double>());
  }
  return m;
}

class ReverseKlTest : public ::testing::TestWithParam<std::string> {};

// The KL at each teacher row equals sum p (log p - log q) from the two models'
// full-vocabulary log-probs, at several temperatures.
TEST_P(ReverseKlTest, MatchesNaiveFullVocabularyKl) {
  auto student = Student(GetParam());
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  TeacherRows rows = CompactRows(*teacher, batch, Rows());
  for (double temperature : {1.0, 0.7, 1.6}) {
    ScoreOptions options;
    options.temperature = temperature;
    options.teacher = &rows;
    auto result = student->Score(batch, options);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->kl.sizes(), (std::vector<int64_t>{7}));
    EXPECT_EQ(result->kl.scalar_type(), at::kFloat);
    at::Tensor expect = NaiveKl(FullLogprobsAt(*student, batch, Rows(), temperature),
                                FullLogprobsAt(*teacher, batch, Rows(), temperature));
    // Far from zero: a kernel that ignored the teacher would not pass.
    EXPECT_GT(expect.min().item<double>(), 0.05) << "T=" << temperature;
    EXPECT_TRUE(at::allclose(result->kl.to(at::kDouble), expect, 1e-4, 1e-5))
        << "T=" << temperature << "\n"
        << result->kl << "\n"
        << expect;
  }
}

// d(sum_i w_i kl_i)/d(params) from the custom backward equals autograd through
// log_softmax of the student's full logits (teacher log-probs held fixed).
TEST_P(ReverseKlTest, GradientMatchesAutogradThroughLogSoftmax) {
  auto student = Student(GetParam());
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  TeacherRows rows = CompactRows(*teacher, batch, Rows());
  const double temperature = 0.7;
  at::Tensor log_q = FullLogprobsAt(*teacher, batch, Rows(), temperature).detach();
  ScoreOptions options;
  options.temperature = temperature;
  options.teacher = &rows;
  options.full_vocab_rows = Rows();
  auto result = student->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  at::manual_seed(17);
  at::Tensor w = at::randn({7});
  const at::Tensor& log_p = result->full_logprobs;
  at::Tensor naive = (w * (log_p.exp() * (log_p - log_q)).sum(-1)).sum();
  auto params = student->Parameters();
  auto custom_grads = Grads((w * result->kl).sum(), params);
  auto naive_grads = Grads(naive, params);
  EXPECT_GT(MaxAbs(naive_grads), 1e-3);  // not a trivially zero gradient
  ExpectSameGrads(custom_grads, naive_grads, 1e-4, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Students, ReverseKlTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3_moe", "llama-tied"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// The student as its own teacher: KL 0 and gradient 0, also when the teacher's
// logits are the student's plus a constant (an extra hidden unit of 1 whose
// head column is the constant, so H_t = H + 1).
TEST(ReverseKlClosedFormTest, ZeroAgainstItselfAndAgainstAShiftedCopy) {
  auto student = Student("qwen3");
  PackedBatch batch = Batch(student->config().vocab_size);
  at::Tensor own_head = student->LmHead().detach().clone();
  TeacherRows same = CompactRows(*student, batch, Rows());
  same.hidden = same.hidden.detach();
  same.head = own_head;
  TeacherRows shifted = same;
  const int64_t n = same.hidden.size(0), vocab = own_head.size(0);
  shifted.hidden = at::cat({same.hidden, at::ones({n, 1})}, 1);
  shifted.head = at::cat({own_head, at::full({vocab, 1}, 3.5)}, 1);
  for (const TeacherRows* teacher : {&same, &shifted}) {
    for (double temperature : {1.0, 0.7}) {
      ScoreOptions options;
      options.temperature = temperature;
      options.teacher = teacher;
      auto result = student->Score(batch, options);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_LT(result->kl.abs().max().item<double>(), 2e-6) << result->kl;
      auto grads = Grads(result->kl.sum(), student->Parameters());
      EXPECT_LT(MaxAbs(grads), 2e-5);
    }
  }
}

// A teacher whose head is zero is uniform: KL(p ‖ uniform) = log V - H(p).
TEST(ReverseKlClosedFormTest, UniformTeacherGivesLogVocabMinusEntropy) {
  auto student = Student("llama");
  PackedBatch batch = Batch(student->config().vocab_size);
  const int64_t vocab = student->config().vocab_size;
  TeacherRows uniform;
  uniform.rows = Rows();
  uniform.hidden = at::randn({7, 5});
  uniform.head = at::zeros({vocab, 5});
  ScoreOptions options;
  options.temperature = 0.7;
  options.teacher = &uniform;
  auto result = student->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  at::Tensor lp = FullLogprobsAt(*student, batch, Rows(), 0.7).detach().to(at::kDouble);
  at::Tensor entropy = -(lp.exp() * lp).sum(-1);
  at::Tensor expect = std::log(static_cast<double>(vocab)) - entropy;
  EXPECT_TRUE(at::allclose(result->kl.to(at::kDouble), expect, 1e-4, 1e-5)) << result->kl << "\n"
                                                                            << expect;
}

// chunk_tokens changes how many rows of logits are alive, not the KL or its
// gradient.
TEST(ReverseKlChunkTest, ChunkSizeDoesNotChangeKlOrGradients) {
  auto student = Student("qwen3_moe");
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  TeacherRows rows = CompactRows(*teacher, batch, Rows());
  at::Tensor w = at::linspace(-1.0, 2.0, 7);
  std::vector<at::Tensor> kls;
  std::vector<std::vector<at::Tensor>> grads;
  for (int64_t chunk : {1, 3, 100000}) {
    ScoreOptions options;
    options.chunk_tokens = chunk;
    options.temperature = 0.8;
    options.teacher = &rows;
    auto result = student->Score(batch, options);
    ASSERT_TRUE(result.ok()) << result.status();
    kls.push_back(result->kl.detach());
    grads.push_back(Grads((w * result->kl).sum(), student->Parameters()));
  }
  for (size_t i = 1; i < kls.size(); ++i) {
    EXPECT_TRUE(at::allclose(kls[i], kls[0], 1e-5, 1e-6)) << kls[i] << "\n" << kls[0];
    ExpectSameGrads(grads[i], grads[0], 1e-4, 1e-6);
  }
}

// The teacher given as log-probs (at the same temperature) gives the same KL
// and gradient as the teacher given as hidden states and head.
TEST(ReverseKlFormsTest, LogprobFormMatchesCompactForm) {
  auto student = Student("qwen2");
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  const double temperature = 0.7;
  TeacherRows compact = CompactRows(*teacher, batch, Rows());
  TeacherRows logprobs;
  logprobs.rows = Rows();
  logprobs.logprobs = FullLogprobsAt(*teacher, batch, Rows(), temperature);
  std::vector<at::Tensor> kls;
  std::vector<std::vector<at::Tensor>> grads;
  for (const TeacherRows* rows : {&compact, &logprobs}) {
    ScoreOptions options;
    options.temperature = temperature;
    options.teacher = rows;
    auto result = student->Score(batch, options);
    ASSERT_TRUE(result.ok()) << result.status();
    kls.push_back(result->kl.detach());
    grads.push_back(Grads(result->kl.sum(), student->Parameters()));
  }
  EXPECT_TRUE(at::allclose(kls[1], kls[0], 1e-5, 1e-6)) << kls[1] << "\n" << kls[0];
  ExpectSameGrads(grads[1], grads[0], 1e-4, 1e-6);
}

// A bfloat16 teacher head and hidden states give the KL against the teacher's
// own bfloat16 logits.
TEST(ReverseKlFormsTest, Bfloat16TeacherAgainstFloatStudent) {
  auto student = Student("llama");
  auto teacher = Teacher({at::kBFloat16, at::kCPU, false});
  PackedBatch batch = Batch(student->config().vocab_size);
  TeacherRows rows = CompactRows(*teacher, batch, Rows());
  ASSERT_EQ(rows.hidden.scalar_type(), at::kBFloat16);
  ScoreOptions options;
  options.teacher = &rows;
  auto result = student->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  at::Tensor expect = NaiveKl(FullLogprobsAt(*student, batch, Rows(), 1.0),
                              FullLogprobsAt(*teacher, batch, Rows(), 1.0));
  EXPECT_TRUE(at::allclose(result->kl.to(at::kDouble), expect, 1e-2, 1e-3)) << result->kl << "\n"
                                                                            << expect;
}

// Autograd reaches the student only, even when the teacher's tensors are
// part of a graph.
TEST(ReverseKlFormsTest, TeacherSideGetsNoGradient) {
  auto student = Student("llama");
  auto teacher = Teacher({at::kFloat, at::kCPU, /*requires_grad=*/true});
  PackedBatch batch = Batch(student->config().vocab_size);
  ScoreOptions teacher_options;
  teacher_options.hidden_rows = Rows();
  auto teacher_result = teacher->Score(batch, teacher_options);
  ASSERT_TRUE(teacher_result.ok()) << teacher_result.status();
  TeacherRows rows;
  rows.rows = Rows();
  rows.hidden = teacher_result->hidden;
  ASSERT_TRUE(rows.hidden.requires_grad());
  rows.head = teacher->LmHead();
  ScoreOptions options;
  options.teacher = &rows;
  auto result = student->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  auto teacher_grads = Grads(result->kl.sum(), teacher->Parameters());
  EXPECT_EQ(MaxAbs(teacher_grads), 0.0);
  EXPECT_GT(MaxAbs(Grads(result->kl.sum(), student->Parameters())), 1e-3);
}

TEST(ReverseKlFormsTest, NoRowsGivesAnEmptyKl) {
  auto student = Student("llama");
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  TeacherRows rows = CompactRows(*teacher, batch, at::zeros({0}, at::kLong));
  ScoreOptions options;
  options.teacher = &rows;
  auto result = student->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->kl.numel(), 0);
}

// Malformed teacher rows are the caller's mistake: INVALID_ARGUMENT, no crash.
TEST(ReverseKlFormsTest, BadTeacherInputsAreInvalidArgument) {
  auto student = Student("llama");
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  const TeacherRows good = CompactRows(*teacher, batch, Rows());
  const int64_t vocab = good.head.size(0), width = good.head.size(1);
  struct Case {
    std::string what;
    TeacherRows rows;
  };
  std::vector<Case> cases;
  auto with = [&](std::string what, auto change) {
    TeacherRows rows = good;
    change(rows);
    cases.push_back({std::move(what), std::move(rows)});
  };
  with("row past T", [](TeacherRows& r) {
    r.rows = at::tensor(std::vector<int64_t>{0, 1, 2, kTokens, 4, 5, 6});
  });
  with("negative row", [](TeacherRows& r) {
    r.rows = at::tensor(std::vector<int64_t>{0, 1, 2, -1, 4, 5, 6});
  });
  with("rows undefined", [](TeacherRows& r) { r.rows = at::Tensor(); });
  with("rows 2-D", [](TeacherRows& r) { r.rows = Rows().unsqueeze(0); });
  with("rows float", [](TeacherRows& r) { r.rows = Rows().to(at::kFloat); });
  with("head of another vocab", [&](TeacherRows& r) { r.head = at::randn({vocab + 1, width}); });
  with("head 1-D", [&](TeacherRows& r) { r.head = at::randn({vocab}); });
  with("hidden with a row too many", [&](TeacherRows& r) { r.hidden = at::randn({8, width}); });
  with("hidden of another width", [&](TeacherRows& r) { r.hidden = at::randn({7, width + 1}); });
  with("head without hidden", [](TeacherRows& r) { r.hidden = at::Tensor(); });
  with("neither head nor log-probs", [](TeacherRows& r) {
    r.head = at::Tensor();
    r.hidden = at::Tensor();
  });
  with("log-probs of another vocab", [&](TeacherRows& r) {
    r.head = at::Tensor();
    r.logprobs = at::zeros({7, vocab - 1});
  });
  with("log-probs with a row too few", [&](TeacherRows& r) {
    r.head = at::Tensor();
    r.logprobs = at::zeros({6, vocab});
  });
  for (const Case& c : cases) {
    ScoreOptions options;
    options.teacher = &c.rows;
    auto result = student->Score(batch, options);
    ASSERT_FALSE(result.ok()) << c.what;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << result.status();
  }
}

// ReverseKl on hidden states the caller holds (Score's hidden_rows) gives
// Score's own KL and gradient.
TEST(ReverseKlFormsTest, StandaloneReverseKlMatchesScore) {
  auto student = Student("qwen3_moe");
  auto teacher = Teacher();
  PackedBatch batch = Batch(student->config().vocab_size);
  TeacherRows rows = CompactRows(*teacher, batch, Rows());
  const double temperature = 0.7;
  ScoreOptions options;
  options.temperature = temperature;
  options.teacher = &rows;
  options.hidden_rows = at::arange(kTokens, at::kLong);
  options.chunk_tokens = 4;
  auto result = student->Score(batch, options);
  ASSERT_TRUE(result.ok()) << result.status();
  auto standalone = ReverseKl(result->hidden, student->LmHead(), rows, temperature, 2);
  ASSERT_TRUE(standalone.ok()) << standalone.status();
  EXPECT_TRUE(at::allclose(*standalone, result->kl, 1e-5, 1e-6)) << *standalone << "\n"
                                                                 << result->kl;
  at::Tensor w = at::linspace(2.0, -1.0, 7);
  auto params = student->Parameters();
  ExpectSameGrads(Grads((w * *standalone).sum(), params), Grads((w * result->kl).sum(), params),
                  1e-4, 1e-6);
  for (double bad : {0.0, -1.0, std::nan("")}) {
    auto refused = ReverseKl(result->hidden, student->LmHead(), rows, bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Parameters counted per tensor by hand from the config, as HF lists them.
int64_t HandCount(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim;
  const int64_t kv = c.num_key_value_heads * c.head_dim;
  int64_t attention = q * h + 2 * kv * h + h * q;
  if (c.arch == "qwen2") attention += q + 2 * kv;                               // q/k/v biases
  if (c.attention_bias) attention += q + 2 * kv + h;                            // q/k/v/o biases
  if (c.arch == "qwen3" || c.arch == "qwen3_moe") attention += 2 * c.head_dim;  // q/k norms
  int64_t n = c.vocab_size * h + h;  // embedding, final norm
  if (!c.tie_word_embeddings) n += c.vocab_size * h;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    n += 2 * h + attention;
    // TestConfig("qwen3_moe"): layer 1 is dense (mlp_only_layers), the others MoE.
    if (c.arch == "qwen3_moe" && layer != 1) {
      n += c.num_experts * h + c.num_experts * 3 * h * c.moe_intermediate_size;
    } else {
      n += 3 * h * c.intermediate_size;
    }
  }
  return n;
}

TEST(ParameterAccountingTest, CountMatchesTheAllocatedModelAndAHandCount) {
  for (const std::string& arch : AllArchs()) {
    for (bool tied : {false, true}) {
      ModelConfig c = TestConfig(arch);
      c.tie_word_embeddings = tied;
      const std::string what = arch + (tied ? " tied" : "");
      auto model = Transformer::RandomInit(c, 1, {});
      EXPECT_EQ(Transformer::ParameterCount(c), model->NumParameters()) << what;
      EXPECT_EQ(Transformer::ParameterCount(c), HandCount(c)) << what;
    }
  }
}

TEST(ParameterAccountingTest, BytesFollowTheDtype) {
  for (const std::string& arch : AllArchs()) {
    ModelConfig c = TestConfig(arch);
    const int64_t count = Transformer::ParameterCount(c);
    EXPECT_EQ(Transformer::RandomInit(c, 1, {at::kBFloat16})->ParameterBytes(), 2 * count) << arch;
    EXPECT_EQ(Transformer::RandomInit(c, 1, {at::kFloat})->ParameterBytes(), 4 * count) << arch;
  }
}

// LmHead is lm_head.weight, or the embedding itself (same storage) when tied.
TEST(ParameterAccountingTest, LmHeadIsTheHeadOrTheTiedEmbedding) {
  for (bool tied : {false, true}) {
    ModelConfig c = TestConfig("qwen3");
    c.tie_word_embeddings = tied;
    auto model = TestModel(c, 9);
    TensorMap state = model->StateDict();
    const at::Tensor& head = model->LmHead();
    ASSERT_EQ(head.sizes(), (std::vector<int64_t>{c.vocab_size, c.hidden_size}));
    const at::Tensor& embed = state.at("model.embed_tokens.weight");
    if (tied) {
      EXPECT_EQ(state.count("lm_head.weight"), 0u);
      EXPECT_EQ(head.data_ptr(), embed.data_ptr());
    } else {
      EXPECT_TRUE(at::equal(head, state.at("lm_head.weight")));
      EXPECT_FALSE(at::equal(head, embed));
    }
  }
}

}  // namespace
}  // namespace loom::model
