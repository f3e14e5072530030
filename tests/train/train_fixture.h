#pragma once
// A tiny random model on the tiny byte-level tokenizer with a TrainContext
// around it (run directory and metrics in a temp dir), for tests that call a
// trainer or the evaluator directly. Edit `config` and `datasets`, then Build.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/run_config.h"
#include "loom/metrics/metrics_writer.h"
#include "loom/model/transformer.h"
#include "loom/tasks/dataset.h"
#include "loom/tokenizer/tiny.h"
#include "loom/train/evaluator.h"
#include "loom/train/run_dir.h"
#include "loom/train/sample_table.h"
#include "loom/train/step_inputs.h"
#include "testing/temp_dir.h"
#include "train/encoding.h"

namespace loom::train {

struct TrainFixture {
  testing::TempDir dir;
  config::RunConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer =
      std::move(*tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny"));
  std::unique_ptr<model::Transformer> model;
  std::vector<std::unique_ptr<tasks::Dataset>> datasets;
  std::optional<RunDir> run_dir;
  std::optional<metrics::MetricsWriter> metrics;
  chat::SpecialTokenIds special_tokens;  // the tiny tokenizer has none: all -1

  // What a trainer and the evaluator read of this run.
  StepInputs step_inputs() const { return {config, *model, *tokenizer, special_tokens, nullptr}; }
  EvalInputs eval_inputs() const { return {config, *tokenizer, datasets, special_tokens}; }

  // Two layers, hidden 32, 4 heads of 8 over 2 KV heads, the tokenizer's vocabulary.
  model::ModelConfig TinyModelConfig(const std::string& arch) const {
    model::ModelConfig c = *model::DefaultModelConfig(arch);
    c.vocab_size = tokenizer->VocabSize();
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 1024;
    return c;
  }

  // A finished sample whose completion is `written_from`'s reference turn,
  // judged by `judged_by`, every generated token at version 0; its behaviour
  // log-probs are left at 0 for the test to record.
  TrainingSample ReferenceSample(std::shared_ptr<const tasks::Problem> judged_by,
                                 const tasks::Problem& written_from, uint64_t subgroup) const {
    SftExample example = *EncodeSftExample(written_from, 100, *tokenizer);
    rollout::SampleState state;
    state.tokens = example.tokens;
    state.loss_mask = example.loss_mask;
    state.prompt_length =
        static_cast<int64_t>(std::find(example.loss_mask.begin(), example.loss_mask.end(), 1) -
                             example.loss_mask.begin());
    state.versions.assign(state.tokens.size(), -1);
    state.logprobs.assign(state.tokens.size(), 0.0f);
    for (int64_t t = state.prompt_length; t < state.length(); ++t) state.versions[t] = 0;
    state.generated = state.length() - state.prompt_length;
    SampleEntry info;
    info.problem = std::move(judged_by);
    info.subgroup_id = subgroup;
    info.effort = 100;
    return {std::move(state), std::move(info)};
  }

  // A random model of `c` (seed `seed`), the run directory and metrics.
  void Build(const model::ModelConfig& c, uint64_t seed, bool requires_grad) {
    model = model::Transformer::RandomInit(c, seed, {at::kFloat, at::kCPU, requires_grad});
    run_dir = *RunDir::Create(config, dir / "run");
    metrics.emplace(std::move(*metrics::MetricsWriter::Open(run_dir->metrics_path())));
  }
};

}  // namespace loom::train
