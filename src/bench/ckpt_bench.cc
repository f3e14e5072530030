#include "loom/bench/ckpt_bench.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "loom/ckpt/checkpoint.h"
#include "loom/config/files.h"
#include "loom/config/run_config.h"
#include "loom/metrics/progress.h"
#include "loom/rollout/engine.h"
#include "loom/train/adamw.h"
#include "loom/train/train_state.h"

namespace loom::bench {
namespace {

using train::AdamW;
using train::ReadTrainState;
using train::TrainState;
using train::WriteTrainState;

namespace fs = std::filesystem;

double Now() { return metrics::ProgressLine::SteadySeconds(); }

absl::StatusOr<std::unique_ptr<model::Transformer>> BenchModel(bool quick) {
  auto config = model::DefaultModelConfig("llama");
  if (!config.ok()) return config.status();
  config->vocab_size = 4096;
  config->hidden_size = quick ? 128 : 512;
  config->num_hidden_layers = quick ? 2 : 6;
  config->num_attention_heads = 8;
  config->num_key_value_heads = 4;
  config->head_dim = quick ? 16 : 64;
  config->intermediate_size = quick ? 384 : 1408;
  config->max_position_embeddings = 4096;
  return model::Transformer::RandomInit(*config, 1, {});
}

absl::StatusOr<std::unique_ptr<rollout::RolloutEngine>> Engine(const model::Transformer& m,
                                                               const CkptBenchOptions& o) {
  rollout::EngineOptions options;
  options.max_batch = o.samples;
  options.step_token_budget = o.samples * (o.prompt_tokens + 16);
  options.pool_tokens = o.samples * (o.prompt_tokens + 64);
  options.seed = o.seed;
  return rollout::RolloutEngine::Create(m, options);
}

rollout::SampleRequest Request(uint64_t id, std::vector<int64_t> prompt) {
  rollout::SampleRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.stop.max_new_tokens = 64;
  return r;
}

// Adds the samples and decodes a few tokens; returns them exported.
absl::StatusOr<std::vector<rollout::SampleState>> InflightSamples(const model::Transformer& m,
                                                                  const CkptBenchOptions& o) {
  auto engine = Engine(m, o);
  if (!engine.ok()) return engine.status();
  for (int64_t i = 0; i < o.samples; ++i) {
    std::vector<int64_t> prompt;
    for (int64_t t = 0; t < o.prompt_tokens; ++t) prompt.push_back((i * 131 + t * 17 + 5) % 4096);
    if (absl::Status s = (*engine)->Add(Request(i + 1, prompt)); !s.ok()) return s;
  }
  for (int step = 0; step < 4; ++step) {
    if (auto s = (*engine)->Step(); !s.ok()) return s.status();
  }
  (*engine)->ParkAll();
  std::vector<rollout::SampleState> out;
  for (int64_t i = 0; i < o.samples; ++i) {
    auto state = (*engine)->Export(i + 1);
    if (!state.ok()) return state.status();
    out.push_back(*std::move(state));
  }
  return out;
}

int64_t DirBytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) bytes += static_cast<int64_t>(entry.file_size());
  }
  return bytes;
}

// Times one Step of a fresh engine holding `samples` (imported, or re-added
// from their tokens when `reprefill`) until each has sampled a token.
absl::StatusOr<std::pair<double, int64_t>> FirstTokens(const model::Transformer& m,
                                                       const CkptBenchOptions& o,
                                                       std::vector<rollout::SampleState> samples,
                                                       bool reprefill) {
  auto engine = Engine(m, o);
  if (!engine.ok()) return engine.status();
  for (rollout::SampleState& s : samples) {
    absl::Status status =
        reprefill ? (*engine)->Add(Request(s.id, s.tokens)) : (*engine)->Import(std::move(s));
    if (!status.ok()) return status;
  }
  const double start = Now();
  auto stats = (*engine)->Step();
  if (!stats.ok()) return stats.status();
  return std::make_pair(Now() - start, stats->prefill_tokens);
}

}  // namespace

absl::StatusOr<nlohmann::json> RunCkptBench(const CkptBenchOptions& o) {
  auto m = BenchModel(o.quick);
  if (!m.ok()) return m.status();
  auto samples = InflightSamples(**m, o);
  if (!samples.ok()) return samples.status();
  const std::string root =
      (fs::temp_directory_path() / ("loom-bench-ckpt-" + std::to_string(::getpid()))).string();
  TrainState state;
  state.cursor.stage_index = 1;
  state.cursor.stage = "grpo";
  state.cursor.step = 1;
  state.cursor.policy_version = 1;
  state.optimizer = AdamW((*m)->NamedParameters(), {}).StateDict();
  state.grpo.emplace();
  state.grpo->inflight = *samples;
  config::RunConfig config;  // the defaults: config.yaml is part of the checkpoint
  fs::create_directories(root);
  std::ofstream(root + "/tokenizer.json") << "{}";

  double t = Now();
  auto writer = ckpt::CheckpointWriter::Begin(root + "/checkpoints", 1);
  if (!writer.ok()) return writer.status();
  auto meta = WriteTrainState(state, **m, root + "/tokenizer.json", config, writer->dir());
  if (!meta.ok()) return meta.status();
  auto dir = writer->Commit(*meta);
  if (!dir.ok()) return dir.status();
  const double save_s = Now() - t;
  t = Now();
  auto manifest = ckpt::VerifyCheckpoint(*dir);
  if (!manifest.ok()) return manifest.status();
  const double verify_s = Now() - t;
  t = Now();
  auto read = ReadTrainState(*dir);
  if (!read.ok()) return read.status();
  auto loaded = model::Transformer::Load(*dir + "/model", {});
  if (!loaded.ok()) return loaded.status();
  const double load_s = Now() - t;
  const int64_t bytes = DirBytes(*dir);

  auto resume = FirstTokens(**loaded, o, std::move(read->grpo->inflight), false);
  if (!resume.ok()) return resume.status();
  auto reprefill = FirstTokens(**loaded, o, *samples, true);
  if (!reprefill.ok()) return reprefill.status();
  RemoveTree(root).IgnoreError();
  return nlohmann::json{{"samples", o.samples},
                        {"prompt_tokens", o.prompt_tokens},
                        {"parameters", (*m)->NumParameters()},
                        {"checkpoint_bytes", bytes},
                        {"save_s", save_s},
                        {"verify_s", verify_s},
                        {"load_s", load_s},
                        {"resume_step_s", resume->first},
                        {"resume_prefill_tokens", resume->second},
                        {"reprefill_s", reprefill->first},
                        {"reprefill_tokens", reprefill->second},
                        {"reprefill_over_resume", reprefill->first / resume->first}};
}

}  // namespace loom::bench
