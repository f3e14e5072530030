// `loom init-model` (a fresh random model directory), `loom logprobs`
// (teacher-forced log-probs of token sequences) and `loom kl` (the per-token
// reverse KL of on-policy distillation between a student and a teacher).

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/threads.h"
#include "loom/model/init.h"
#include "loom/model/transformer.h"

namespace loom::cli {
namespace {

void SetupInitModel(CLI::App& app, Context& context) {
  auto options = std::make_shared<model::InitModelOptions>();
  CLI::App* cmd =
      app.add_subcommand("init-model",
                         "Write a small random model directory (config.json, model.safetensors, "
                         "tokenizer.json)");
  cmd->add_option("--arch", options->arch, "llama | qwen2 | qwen3 | qwen3_moe")->required();
  cmd->add_option("--out", options->out_dir, "Output directory")->required();
  cmd->add_option("--set", options->overrides, "config.json key=value (repeatable)");
  cmd->add_option("--seed", options->seed, "Random init seed");
  cmd->add_option("--dtype", options->dtype, "float32 | bfloat16");
  auto tokenizer = std::make_shared<std::string>("bytes");
  cmd->add_option("--tokenizer", *tokenizer,
                  "bytes | bytes+effort (also a token for each fixed part of the effort line) | "
                  "a tokenizer.json path (a real vocabulary; the chat format's special tokens "
                  "it lacks are added)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(tokenizer::kTinyTokenizerNames),
                                                     std::end(tokenizer::kTinyTokenizerNames))) |
              CLI::ExistingFile);
  cmd->callback([options, tokenizer, &context] {
    const auto& names = tokenizer::kTinyTokenizerNames;
    if (std::find(std::begin(names), std::end(names), *tokenizer) != std::end(names)) {
      options->tokenizer = tokenizer::TinyTokenizerNamed(*tokenizer);
    } else {
      options->tokenizer_file = *tokenizer;
    }
    absl::Status status = model::InitModelDir(*options);
    if (!status.ok()) {
      std::cerr << "init-model: " << status.message() << "\n";
      context.exit_code = StatusExitCode(status);
      return;
    }
    std::cout << "wrote " << options->arch << " model to " << options->out_dir << "\n";
    context.exit_code = kExitOk;
  });
}

struct LogprobsOptions {
  std::string model;
  std::string input;
  std::string dtype = "float32";
  int threads = 0;
};

// Parses one input line {"tokens": [ids]}; errors name the file and line.
absl::StatusOr<std::vector<int64_t>> ParseTokensLine(const std::string& line,
                                                     const std::string& where) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    return absl::InvalidArgumentError(where + ": expected {\"tokens\": [ids]}");
  }
  std::vector<int64_t> tokens;
  for (const auto& id : j["tokens"]) {
    if (!id.is_number_integer())
      return absl::InvalidArgumentError(where + ": ids must be integers");
    tokens.push_back(id.get<int64_t>());
  }
  if (tokens.empty()) return absl::InvalidArgumentError(where + ": no tokens");
  return tokens;
}

// Calls `each(line, where)` for every non-blank line of `path`; `where` is
// "path:line" for messages. Stops at the first error.
absl::Status ForEachInputLine(
    const std::string& path,
    const std::function<absl::Status(const std::string& line, const std::string& where)>& each) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (absl::Status s = each(line, path + ":" + std::to_string(number)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RunLogprobs(const LogprobsOptions& options) {
  auto dtype = model::ParseDtype(options.dtype);
  if (!dtype.ok()) return dtype.status();
  SetComputeThreads(options.threads > 0 ? options.threads
                                        : static_cast<int>(std::thread::hardware_concurrency()));
  model::LoadOptions load;
  load.dtype = *dtype;
  auto loaded = model::Transformer::Load(options.model, load);
  if (!loaded.ok()) return loaded.status();
  return ForEachInputLine(options.input, [&](const std::string& line, const std::string& where) {
    auto tokens = ParseTokensLine(line, where);
    if (!tokens.ok()) return tokens.status();
    auto result = (*loaded)->Score(model::TeacherForcingBatch({*tokens}));
    if (!result.ok()) {
      return absl::InvalidArgumentError(where + ": " + std::string(result.status().message()));
    }
    at::Tensor lp = result->logprobs.to(at::kDouble).contiguous();
    std::vector<double> values(lp.data_ptr<double>(), lp.data_ptr<double>() + lp.numel() - 1);
    std::cout << nlohmann::json{{"logprobs", values}}.dump() << "\n";
    return absl::OkStatus();
  });
}

void SetupLogprobs(CLI::App& app, Context& context) {
  auto options = std::make_shared<LogprobsOptions>();
  CLI::App* cmd = app.add_subcommand("logprobs",
                                     "Teacher-forced log-probs: JSON lines {\"tokens\":[..]} in, "
                                     "{\"logprobs\":[..]} out (one per token after the first)");
  cmd->add_option("--model", options->model, "Model directory")->required();
  cmd->add_option("--input", options->input, "JSON lines file")->required();
  cmd->add_option("--dtype", options->dtype, "float32 | bfloat16");
  cmd->add_option("--threads", options->threads, "Intra-op CPU threads (0 = all cores)");
  cmd->callback([options, &context] {
    absl::Status status = RunLogprobs(*options);
    if (!status.ok()) std::cerr << "logprobs: " << status.message() << "\n";
    context.exit_code = StatusExitCode(status);
  });
}

struct KlOptions {
  std::string student;
  std::string teacher;
  std::string input;
  double temperature = 1.0;
  std::string dtype = "float32";
  int threads = 0;
};

// The response start k of an input line: 1 <= k <= its token count.
absl::StatusOr<int64_t> ParseResponseStart(const std::string& line, int64_t tokens,
                                           const std::string& where) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.contains("response_start") || !j["response_start"].is_number_integer()) {
    return absl::InvalidArgumentError(where + ": expected an integer \"response_start\"");
  }
  const int64_t k = j["response_start"].get<int64_t>();
  if (k < 1 || k > tokens) {
    return absl::InvalidArgumentError(where + ": response_start " + std::to_string(k) +
                                      " is outside 1.." + std::to_string(tokens));
  }
  return k;
}

// KL(student ‖ teacher) at every response token t >= k: of the two models'
// distributions over token t given tokens[..t), the same kernel as the opd
// stage's loss (the teacher in its compact form: hidden states and LM head).
absl::StatusOr<std::vector<double>> ResponseKl(const model::Transformer& student,
                                               const model::Transformer& teacher,
                                               const std::vector<int64_t>& tokens, int64_t k,
                                               double temperature) {
  model::PackedBatch batch;
  batch.tokens = at::tensor(tokens, at::kLong);
  batch.lengths = {static_cast<int64_t>(tokens.size())};
  model::ScoreOptions options;
  options.temperature = temperature;
  options.hidden_rows = at::arange(k - 1, static_cast<int64_t>(tokens.size()) - 1, at::kLong);
  auto scored_teacher = teacher.Score(batch, options);
  if (!scored_teacher.ok()) return scored_teacher.status();
  model::TeacherRows rows{options.hidden_rows, scored_teacher->hidden, teacher.LmHead(), {}};
  options.hidden_rows = at::Tensor();
  options.teacher = &rows;
  auto scored = student.Score(batch, options);
  if (!scored.ok()) return scored.status();
  at::Tensor kl = scored->kl.to(at::kDouble).contiguous();
  return std::vector<double>(kl.data_ptr<double>(), kl.data_ptr<double>() + kl.numel());
}

absl::Status RunKl(const KlOptions& options) {
  auto dtype = model::ParseDtype(options.dtype);
  if (!dtype.ok()) return dtype.status();
  if (!(options.temperature > 0)) {
    return absl::InvalidArgumentError("--temperature must be > 0");
  }
  SetComputeThreads(options.threads > 0 ? options.threads
                                        : static_cast<int>(std::thread::hardware_concurrency()));
  at::NoGradGuard no_grad;
  auto student = model::Transformer::Load(options.student, {*dtype, at::kCPU, false});
  if (!student.ok()) return student.status();
  auto teacher = model::Transformer::Load(options.teacher, {*dtype, at::kCPU, false});
  if (!teacher.ok()) return teacher.status();
  if ((*student)->config().vocab_size != (*teacher)->config().vocab_size) {
    return absl::InvalidArgumentError(
        "the teacher's vocab_size (" + std::to_string((*teacher)->config().vocab_size) +
        ") differs from the student's (" + std::to_string((*student)->config().vocab_size) + ")");
  }
  return ForEachInputLine(options.input, [&](const std::string& line, const std::string& where) {
    auto tokens = ParseTokensLine(line, where);
    if (!tokens.ok()) return tokens.status();
    auto k = ParseResponseStart(line, static_cast<int64_t>(tokens->size()), where);
    if (!k.ok()) return k.status();
    std::vector<double> kl;
    if (*k < static_cast<int64_t>(tokens->size())) {
      auto computed = ResponseKl(**student, **teacher, *tokens, *k, options.temperature);
      if (!computed.ok()) {
        return absl::InvalidArgumentError(where + ": " + std::string(computed.status().message()));
      }
      kl = *std::move(computed);
    }
    std::cout << nlohmann::json{{"kl", kl}}.dump() << "\n";
    return absl::OkStatus();
  });
}

void SetupKl(CLI::App& app, Context& context) {
  auto options = std::make_shared<KlOptions>();
  CLI::App* cmd = app.add_subcommand(
      "kl",
      "Per-token reverse KL(student ‖ teacher) over the full vocabulary, as the opd stage's "
      "loss computes it: JSON lines {\"tokens\":[..],\"response_start\":k} in, "
      "{\"kl\":[..]} out (one per response token)");
  cmd->add_option("--student", options->student, "Student model directory")->required();
  cmd->add_option("--teacher", options->teacher, "Teacher model directory")->required();
  cmd->add_option("--input", options->input, "JSON lines file")->required();
  cmd->add_option("--temperature", options->temperature,
                  "Sampling temperature both distributions are taken at (default 1)");
  cmd->add_option("--dtype", options->dtype, "float32 | bfloat16");
  cmd->add_option("--threads", options->threads, "Intra-op CPU threads (0 = all cores)");
  cmd->callback([options, &context] {
    absl::Status status = RunKl(*options);
    if (!status.ok()) std::cerr << "kl: " << status.message() << "\n";
    context.exit_code = StatusExitCode(status);
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("init-model", SetupInitModel);
LOOM_REGISTER_COMMAND("kl", SetupKl);
LOOM_REGISTER_COMMAND("logprobs", SetupLogprobs);

}  // namespace loom::cli
