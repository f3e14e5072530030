// `loom init-model` (a fresh random model directory) and `loom logprobs`
// (teacher-forced log-probs of token sequences).

#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "loom/model/init.h"
#include "loom/model/transformer.h"

namespace loom::cli {
namespace {

int ExitCodeFor(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

void SetupInitModel(CLI::App& app, Context& context) {
  auto options = std::make_shared<model::InitModelOptions>();
  CLI::App* cmd = app.add_subcommand(
      "init-model", "Write a small random model directory (config.json, model.safetensors, "
                    "tokenizer.json)");
  cmd->add_option("--arch", options->arch, "llama | qwen2 | qwen3 | qwen3_moe")->required();
  cmd->add_option("--out", options->out_dir, "Output directory")->required();
  cmd->add_option("--set", options->overrides, "config.json key=value (repeatable)");
  cmd->add_option("--seed", options->seed, "Random init seed");
  cmd->add_option("--dtype", options->dtype, "float32 | bfloat16");
  cmd->callback([options, &context] {
    absl::Status status = model::InitModelDir(*options);
    if (!status.ok()) {
      std::cerr << "init-model: " << status.message() << "\n";
      context.exit_code = ExitCodeFor(status);
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
    if (!id.is_number_integer()) return absl::InvalidArgumentError(where + ": ids must be integers");
    tokens.push_back(id.get<int64_t>());
  }
  if (tokens.empty()) return absl::InvalidArgumentError(where + ": no tokens");
  return tokens;
}

absl::Status RunLogprobs(const LogprobsOptions& options) {
  auto dtype = model::ParseDtype(options.dtype);
  if (!dtype.ok()) return dtype.status();
  at::set_num_threads(options.threads > 0 ? options.threads
                                          : static_cast<int>(std::thread::hardware_concurrency()));
  model::LoadOptions load;
  load.dtype = *dtype;
  auto loaded = model::Transformer::Load(options.model, load);
  if (!loaded.ok()) return loaded.status();
  std::ifstream in(options.input);
  if (!in) return absl::NotFoundError("cannot open " + options.input);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = options.input + ":" + std::to_string(number);
    auto tokens = ParseTokensLine(line, where);
    if (!tokens.ok()) return tokens.status();
    auto result = (*loaded)->Score(model::TeacherForcingBatch({*tokens}));
    if (!result.ok()) return absl::InvalidArgumentError(where + ": " + std::string(result.status().message()));
    at::Tensor lp = result->logprobs.to(at::kDouble).contiguous();
    std::vector<double> values(lp.data_ptr<double>(), lp.data_ptr<double>() + lp.numel() - 1);
    std::cout << nlohmann::json{{"logprobs", values}}.dump() << "\n";
  }
  return absl::OkStatus();
}

void SetupLogprobs(CLI::App& app, Context& context) {
  auto options = std::make_shared<LogprobsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "logprobs", "Teacher-forced log-probs: JSON lines {\"tokens\":[..]} in, "
                  "{\"logprobs\":[..]} out (one per token after the first)");
  cmd->add_option("--model", options->model, "Model directory")->required();
  cmd->add_option("--input", options->input, "JSON lines file")->required();
  cmd->add_option("--dtype", options->dtype, "float32 | bfloat16");
  cmd->add_option("--threads", options->threads, "Intra-op CPU threads (0 = all cores)");
  cmd->callback([options, &context] {
    absl::Status status = RunLogprobs(*options);
    if (!status.ok()) std::cerr << "logprobs: " << status.message() << "\n";
    context.exit_code = status.ok() ? kExitOk : ExitCodeFor(status);
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("init-model", SetupInitModel);
LOOM_REGISTER_COMMAND("logprobs", SetupLogprobs);

}  // namespace loom::cli
