#include "loom/bench/opd_bench.h"

#include <stdlib.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "loom/algo/teacher_pool.h"
#include "loom/config/files.h"
#include "loom/config/run_config.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/metrics/progress.h"
#include "loom/model/distill.h"
#include "loom/model/init.h"
#include "loom/model/transformer.h"
#include "loom/tasks/dataset.h"
#include "loom/tasks/generator.h"
#include "loom/tokenizer/tiny.h"
#include "loom/train/opd_step.h"
#include "loom/train/stage_optimizer.h"
#include "loom/train/step_inputs.h"

namespace loom::bench {
namespace {

constexpr const char* kArchs[] = {"llama", "qwen2", "qwen3"};

std::vector<std::string> Widths(bool quick) {
  if (quick) {
    return {"hidden_size=64",        "intermediate_size=128", "num_hidden_layers=2",
            "num_attention_heads=4", "num_key_value_heads=2", "head_dim=16"};
  }
  return {"hidden_size=128",       "intermediate_size=384", "num_hidden_layers=4",
          "num_attention_heads=4", "num_key_value_heads=2", "head_dim=32"};
}

// `count` sequences of `length` tokens, prompt `prompt` of them, each judged
// by an arithmetic problem, sample i distilled from teacher i % teachers
// (every one from teacher 0 when teachers is 1).
std::vector<train::TrainingSample> FixedBatch(int64_t count, int64_t prompt, int64_t length,
                                              int64_t teachers, int64_t vocab, uint64_t seed) {
  auto generator = *tasks::MakeGenerator("arithmetic");
  at::Generator rng = at::detail::createCPUGenerator(seed);
  std::vector<train::TrainingSample> batch;
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor tokens = at::randint(vocab, {length}, rng, at::kLong);
    rollout::SampleState state;
    state.id = static_cast<uint64_t>(i);
    state.tokens.assign(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + length);
    state.prompt_length = prompt;
    state.loss_mask.assign(length, 0);
    std::fill(state.loss_mask.begin() + prompt, state.loss_mask.end(), 1);
    state.versions.assign(length, 0);
    state.logprobs.assign(length, -3.0f);
    state.generated = length - prompt;
    train::SampleEntry info;
    auto problem = std::make_shared<tasks::Problem>(generator->Generate(seed + i, 2));
    problem->dataset = "bench";
    info.problem = std::move(problem);
    info.subgroup_id = static_cast<uint64_t>(i / 8);
    info.teacher = static_cast<int>(i % teachers);
    batch.push_back({std::move(state), std::move(info)});
  }
  return batch;
}

// The report's trick for cheap teachers, measured: the teacher's side of
// the loss for a batch kept as final hidden states (H numbers per token, its
// LM head applied chunk by chunk inside the KL) or as full log-prob rows (V
// per token). Seconds for the teacher to produce each form, and for the KL
// forward and backward with each; the same KL either way.
absl::StatusOr<nlohmann::json> TeacherForms(const model::Transformer& student,
                                            const model::Transformer& teacher,
                                            const std::vector<train::TrainingSample>& batch) {
  std::vector<std::vector<int64_t>> sequences;
  std::vector<int64_t> rows;
  int64_t offset = 0;
  for (const train::TrainingSample& sample : batch) {
    sequences.push_back(sample.state.tokens);
    for (int64_t t = sample.state.prompt_length - 1; t + 1 < sample.state.length(); ++t) {
      rows.push_back(offset + t);
    }
    offset += sample.state.length();
  }
  const model::PackedBatch packed = model::TeacherForcingBatch(sequences);
  model::TeacherRows compact, logprobs;
  compact.rows = logprobs.rows = at::tensor(rows, at::kLong);
  double start = metrics::ProgressLine::SteadySeconds();
  {
    at::NoGradGuard no_grad;
    model::ScoreOptions options;
    options.hidden_rows = compact.rows;
    auto scored = teacher.Score(packed, options);
    if (!scored.ok()) return scored.status();
    compact.hidden = scored->hidden;
    compact.head = teacher.LmHead();
  }
  const double compact_state_s = metrics::ProgressLine::SteadySeconds() - start;
  start = metrics::ProgressLine::SteadySeconds();
  {
    at::NoGradGuard no_grad;
    model::ScoreOptions options;
    options.full_vocab_rows = logprobs.rows;
    auto scored = teacher.Score(packed, options);
    if (!scored.ok()) return scored.status();
    logprobs.logprobs = scored->full_logprobs;
  }
  const double logprob_state_s = metrics::ProgressLine::SteadySeconds() - start;
  auto hidden = student.Score(packed, [&] {
    model::ScoreOptions options;
    options.hidden_rows = at::arange(packed.tokens.size(0), at::kLong);
    return options;
  }());
  if (!hidden.ok()) return hidden.status();
  const at::Tensor leaf = hidden->hidden.detach().requires_grad_(true);
  std::vector<double> seconds, sums;
  for (const model::TeacherRows* form : {&compact, &logprobs}) {
    start = metrics::ProgressLine::SteadySeconds();
    auto kl = model::ReverseKl(leaf, student.LmHead(), *form, 1.0);
    if (!kl.ok()) return kl.status();
    kl->sum().backward();
    seconds.push_back(metrics::ProgressLine::SteadySeconds() - start);
    sums.push_back(kl->sum().item<double>());
  }
  return nlohmann::json{{"teacher_state_s_compact", compact_state_s},
                        {"teacher_state_s_logprobs", logprob_state_s},
                        {"kl_s_compact", seconds[0]},
                        {"kl_s_logprobs", seconds[1]},
                        {"kl_relative_difference", std::abs(sums[0] - sums[1]) / std::abs(sums[1])},
                        {"teacher_state_bytes_compact", compact.hidden.numel() * 4},
                        {"teacher_state_bytes_logprobs", logprobs.logprobs.numel() * 4}};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunOpdBench(const OpdBenchOptions& options) {
  if (options.teachers < 2 || options.resident < 1 || options.resident >= options.teachers) {
    return absl::InvalidArgumentError("bench opd: need 1 <= resident < teachers and teachers >= 2");
  }
  ScratchDir scratch("opd");
  if (scratch.path().empty()) return absl::InternalError("bench opd: cannot create a temp dir");
  const std::string root = scratch.path();
  // The models: one student, `teachers` teachers cycling through the archs.
  const std::vector<std::string> widths = Widths(options.quick);
  model::InitModelOptions init;
  init.arch = "llama";
  init.out_dir = root + "/student";
  init.overrides = widths;
  init.seed = options.seed;
  if (absl::Status s = model::InitModelDir(init); !s.ok()) return s;
  std::vector<algo::TeacherSpec> specs;
  for (int64_t t = 0; t < options.teachers; ++t) {
    init.arch = kArchs[t % std::size(kArchs)];
    init.out_dir = root + "/teacher" + std::to_string(t);
    init.seed = options.seed + 1 + static_cast<uint64_t>(t);
    if (absl::Status s = model::InitModelDir(init); !s.ok()) return s;
    specs.push_back({"t" + std::to_string(t), init.out_dir});
  }
  auto tokenizer = tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny");
  if (!tokenizer.ok()) return tokenizer.status();
  const int64_t vocab = (*tokenizer)->VocabSize();
  // The budget holds `resident` of the largest teacher and not one more of the smallest.
  int64_t largest = 0, smallest = INT64_MAX;
  for (const algo::TeacherSpec& spec : specs) {
    const int64_t bytes =
        model::Transformer::ParameterCount(*model::LoadModelConfig(spec.path)) * 4;
    largest = std::max(largest, bytes);
    smallest = std::min(smallest, bytes);
  }
  const int64_t budget = largest * options.resident;
  if (budget >= smallest * (options.resident + 1)) {
    return absl::InternalError("bench opd: teacher sizes differ too much for the budget");
  }
  algo::TeacherPoolOptions pool_options;
  pool_options.memory_bytes = budget;
  auto many = algo::TeacherPool::Open(specs, vocab, **tokenizer, pool_options);
  if (!many.ok()) return many.status();
  pool_options.memory_bytes = 0;
  auto one = algo::TeacherPool::Open({specs[0]}, vocab, **tokenizer, pool_options);
  if (!one.ok()) return one.status();

  config::RunConfig config;
  config.train.opd.lr = 0;  // the same weights every step: each does the same work
  config.train.opd.warmup_steps = 0;
  auto student = model::Transformer::Load(root + "/student", {at::kFloat, at::kCPU, true});
  if (!student.ok()) return student.status();
  const train::StepInputs run{config, **student, **tokenizer, {}, nullptr};
  train::StageOptimizer optimizer(**student, config.train.opd);

  const int64_t count = options.quick ? 80 : options.sequences;
  const int64_t length = options.quick ? 48 : 96, prompt = length / 3;
  train::Batch spread, single;
  spread.samples = FixedBatch(count, prompt, length, options.teachers, vocab, options.seed);
  single.samples = FixedBatch(count, prompt, length, 1, vocab, options.seed);
  train::OpdTrainer spread_trainer(run, optimizer, **many);
  train::OpdTrainer single_trainer(run, optimizer, **one);

  std::vector<double> spread_s, single_s, teacher_s, student_s;
  int64_t loads = 0, evictions = 0;
  double load_s = 0;
  const int64_t rounds = options.quick ? 2 : options.rounds;
  for (int64_t round = 0; round <= rounds; ++round) {  // round 0 warms up
    for (bool spread_first : {round % 2 == 0, round % 2 != 0}) {
      train::OpdTrainer& trainer = spread_first ? spread_trainer : single_trainer;
      const double start = metrics::ProgressLine::SteadySeconds();
      auto record = trainer.Train(spread_first ? spread : single);
      if (!record.ok()) return record.status();
      const double seconds = metrics::ProgressLine::SteadySeconds() - start;
      if (round == 0) continue;
      (spread_first ? spread_s : single_s).push_back(seconds);
      if (spread_first) {
        loads += record->record["teacher_loads"].get<int64_t>();
        evictions += record->record["teacher_evictions"].get<int64_t>();
        load_s += record->record["teacher_load_s"].get<double>();
        teacher_s.push_back(record->record["time_teacher_s"].get<double>());
        student_s.push_back(record->record["time_student_s"].get<double>());
      }
    }
  }
  const double one_teacher = Median(single_s), many_teachers = Median(spread_s);
  auto teacher = model::Transformer::Load(specs[0].path, {});
  if (!teacher.ok()) return teacher.status();
  auto forms = TeacherForms(**student, **teacher, single.samples);
  if (!forms.ok()) return forms.status();
  nlohmann::json result{{"bench", "opd"},
                        {"teachers", options.teachers},
                        {"architectures", {"llama", "qwen2", "qwen3"}},
                        {"resident_budget", options.resident},
                        {"teacher_memory_bytes", budget},
                        {"peak_resident_bytes", (*many)->stats().peak_bytes},
                        {"batch_sequences", count},
                        {"batch_tokens", count * length},
                        {"rounds", rounds},
                        {"step_s_one_teacher", one_teacher},
                        {"step_s_many_teachers", many_teachers},
                        {"switch_overhead_fraction", many_teachers / one_teacher - 1.0},
                        {"teacher_loads_per_step", static_cast<double>(loads) / rounds},
                        {"teacher_evictions_per_step", static_cast<double>(evictions) / rounds},
                        {"teacher_load_s_per_step", load_s / rounds},
                        {"teacher_s_per_step", Median(teacher_s)},
                        {"student_s_per_step", Median(student_s)},
                        {"threads", at::get_num_threads()}};
  result.update(*forms);
  return result;
}

}  // namespace loom::bench
