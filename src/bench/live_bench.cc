#include "loom/bench/live_bench.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "bench/bench_util.h"
#include "loom/metrics/progress.h"
#include "loom/model/init.h"
#include "loom/model/transformer.h"
#include "loom/rollout/engine.h"
#include "loom/tokenizer/tiny.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/live_config.h"

namespace loom::bench {
namespace {

// A random model directory with `tokenizer_json` as its tokenizer.
absl::Status MakeModel(const std::string& dir, const std::string& arch, bool quick,
                       int64_t vocab_size, const std::string& tokenizer_json) {
  model::InitModelOptions options;
  options.arch = arch;
  options.out_dir = dir;
  options.seed = 1;
  options.overrides = {"vocab_size=" + std::to_string(vocab_size),
                       std::string("hidden_size=") + (quick ? "64" : "256"),
                       std::string("intermediate_size=") + (quick ? "128" : "768"),
                       std::string("num_hidden_layers=") + (quick ? "2" : "4"),
                       "num_attention_heads=4",
                       "num_key_value_heads=2",
                       std::string("head_dim=") + (quick ? "16" : "64")};
  if (absl::Status s = model::InitModelDir(options); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::copy_file(tokenizer_json, dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return absl::UnavailableError("cannot copy " + tokenizer_json + ": " + ec.message());
  return absl::OkStatus();
}

// Median seconds of one decode step with `batch` samples running.
absl::StatusOr<double> EngineStepSeconds(const model::Transformer& model, int64_t batch,
                                         int64_t rounds) {
  rollout::EngineOptions options;
  options.max_batch = batch;
  options.step_token_budget = batch * 32;
  options.pool_tokens = batch * 512;
  auto engine = rollout::RolloutEngine::Create(model, options);
  if (!engine.ok()) return engine.status();
  for (int64_t i = 0; i < batch; ++i) {
    rollout::SampleRequest request;
    request.id = static_cast<uint64_t>(i + 1);
    for (int64_t t = 0; t < 16; ++t) request.prompt.push_back((i * 31 + t * 7) % 200 + 1);
    request.stop.max_new_tokens = 400;
    if (absl::Status s = (*engine)->Add(request); !s.ok()) return s;
  }
  for (int i = 0; i < 3; ++i) {  // prefill, then decode
    if (auto s = (*engine)->Step(); !s.ok()) return s.status();
  }
  std::vector<double> times;
  for (int64_t r = 0; r < rounds; ++r) {
    const double start = metrics::ProgressLine::SteadySeconds();
    if (auto s = (*engine)->Step(); !s.ok()) return s.status();
    times.push_back(metrics::ProgressLine::SteadySeconds() - start);
  }
  return Median(times);
}

// Median seconds of live.Apply(change(round)) over `rounds` changes.
template <class Change>
absl::StatusOr<double> TimeApply(train::LiveConfig& live, int64_t rounds, Change change) {
  std::vector<double> times;
  for (int64_t r = 0; r < rounds; ++r) {
    const double start = metrics::ProgressLine::SteadySeconds();
    auto applied = live.Apply(change(r));
    times.push_back(metrics::ProgressLine::SteadySeconds() - start);
    if (!applied.ok()) return applied.status();
  }
  return Median(times);
}

}  // namespace

absl::StatusOr<nlohmann::json> RunLiveBench(const LiveBenchOptions& options) {
  ScratchDir scratch("live");
  if (scratch.path().empty()) return absl::UnavailableError("cannot create a scratch directory");
  const std::string dir = scratch.path();
  std::string tokenizer_json = options.tokenizer;
  if (tokenizer_json.empty()) {
    tokenizer_json = dir + "/tiny-tokenizer.json";
    std::ofstream(tokenizer_json) << tokenizer::TinyTokenizerJson();
  }
  auto tokenizer = tokenizer::Tokenizer::FromFile(tokenizer_json);
  if (!tokenizer.ok()) return tokenizer.status();
  const int64_t vocab = (*tokenizer)->VocabSize();
  for (const char* name : {"student", "t1", "t2"}) {
    const std::string arch = std::string(name) == "student" ? "qwen3" : "llama";
    if (absl::Status s = MakeModel(dir + "/" + name, arch, options.quick, vocab, tokenizer_json);
        !s.ok()) {
      return s;
    }
  }
  auto student = model::Transformer::Load(dir + "/student", {});
  if (!student.ok()) return student.status();
  const int64_t rounds = options.quick ? 5 : options.rounds;
  auto engine_step = EngineStepSeconds(**student, options.batch, rounds);
  if (!engine_step.ok()) return engine_step.status();

  const std::string yaml =
      "run: {name: bench-live}\nmodel: {path: " + dir +
      "/student}\n"
      "tasks:\n  datasets:\n"
      "    - {name: arith, teacher: t1}\n    - {name: sort, kind: sort, teacher: t2}\n"
      "opd:\n  teachers:\n"
      "    - {name: t1, path: " +
      dir + "/t1}\n    - {name: t2, path: " + dir +
      "/t2}\n"
      "train: {stages: [opd]}\n";
  std::ofstream(dir + "/run.yaml") << yaml;
  auto config = config::LoadRunConfig(dir + "/run.yaml", {});
  if (!config.ok()) return config.status();
  train::LiveConfig live(*config);
  auto pool = algo::TeacherPool::Open(live.teacher_slots(), vocab, **tokenizer, {});
  if (!pool.ok()) return pool.status();
  live.set_teachers(pool->get());

  auto mix = TimeApply(live, rounds, [](int64_t r) {
    return std::vector<std::string>{"tasks.datasets.arith.weight=" + std::to_string(2 - r % 2)};
  });
  if (!mix.ok()) return mix.status();
  auto teacher_switch = TimeApply(live, rounds, [](int64_t r) {
    return std::vector<std::string>{std::string("tasks.datasets.arith.teacher=") +
                                    (r % 2 == 0 ? "t2" : "t1")};
  });
  if (!teacher_switch.ok()) return teacher_switch.status();
  auto teacher_add = TimeApply(live, rounds, [&](int64_t r) {
    return std::vector<std::string>{"+opd.teachers={name: n" + std::to_string(r) +
                                    ", path: " + dir + "/t1}"};
  });
  if (!teacher_add.ok()) return teacher_add.status();

  double load[1] = {-1};
  ::getloadavg(load, 1);
  return nlohmann::json{{"batch", options.batch},
                        {"vocab_size", vocab},
                        {"rounds", rounds},
                        {"engine_step_s", *engine_step},
                        {"apply_mix_s", *mix},
                        {"apply_teacher_switch_s", *teacher_switch},
                        {"apply_teacher_add_s", *teacher_add},
                        {"mix_in_engine_steps", *mix / *engine_step},
                        {"teacher_switch_in_engine_steps", *teacher_switch / *engine_step},
                        {"teacher_add_in_engine_steps", *teacher_add / *engine_step},
                        {"loadavg_1m", load[0]}};
}

}  // namespace loom::bench
