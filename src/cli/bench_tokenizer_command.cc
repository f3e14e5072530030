// `loom bench tokenizer --tokenizer FILE --corpus FILE [--json]`: single-thread
// encode throughput. The corpus is JSON lines of strings (*.jsonl) or plain
// text (one document per line). Protocol, kept identical to
// tests/tokenizer/hf_reference.js bench: encode the first 100 documents once
// (warm-up), then time one pass over all of them. The JSON result is the
// last line of stdout.

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {
namespace {

struct TokenizerBenchOptions {
  std::string tokenizer;
  std::string corpus;
  bool json = false;
};

absl::StatusOr<std::vector<std::string>> ReadCorpus(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open corpus " + path);
  const bool jsonl = path.size() > 6 && path.substr(path.size() - 6) == ".jsonl";
  std::vector<std::string> docs;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!jsonl) {
      docs.push_back(line + "\n");
      continue;
    }
    if (line.empty()) continue;
    auto value = nlohmann::json::parse(line, nullptr, false);
    if (!value.is_string()) {
      return absl::InvalidArgumentError(path + ":" + std::to_string(number) +
                                        ": expected a JSON string");
    }
    docs.push_back(value.get<std::string>());
  }
  return docs;
}

int RunBench(const TokenizerBenchOptions& options) {
  auto tok = tokenizer::Tokenizer::FromFile(options.tokenizer);
  auto docs = ReadCorpus(options.corpus);
  if (!tok.ok() || !docs.ok()) {
    std::cerr << "bench tokenizer: " << (tok.ok() ? docs.status() : tok.status()).message() << "\n";
    return kExitUsage;
  }
  for (size_t i = 0; i < docs->size() && i < 100; ++i) (void)(*tok)->Encode((*docs)[i]);
  size_t bytes = 0, tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& doc : *docs) {
    auto ids = (*tok)->Encode(doc);
    if (!ids.ok()) {
      std::cerr << "bench tokenizer: " << ids.status().message() << "\n";
      return kExitFailure;
    }
    bytes += doc.size();
    tokens += ids->size();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json result = {{"impl", "loom"},
                           {"bytes", bytes},
                           {"tokens", tokens},
                           {"seconds", seconds},
                           {"mb_per_s", bytes / 1e6 / seconds},
                           {"tokens_per_s", tokens / seconds}};
  if (!options.json) {
    std::cout << "loom tokenizer: " << result["mb_per_s"].get<double>() << " MB/s, "
              << result["tokens_per_s"].get<double>() << " tokens/s\n";
  }
  std::cout << result.dump() << "\n";
  return kExitOk;
}

void SetupBenchTokenizer(CLI::App& app, Context& context) {
  CLI::App* bench = GroupCommand(app, "bench", "Run benchmarks (JSON results)");
  auto options = std::make_shared<TokenizerBenchOptions>();
  CLI::App* cmd = bench->add_subcommand("tokenizer", "Single-thread tokenizer encode throughput");
  cmd->add_option("--tokenizer", options->tokenizer, "tokenizer.json")->required();
  cmd->add_option("--corpus", options->corpus, "JSON lines of strings (.jsonl) or plain text")
      ->required();
  cmd->add_flag("--json", options->json, "Print only the JSON result line");
  cmd->callback([options, &context] { context.exit_code = RunBench(*options); });
}

}  // namespace

LOOM_REGISTER_COMMAND("bench-tokenizer", SetupBenchTokenizer);

}  // namespace loom::cli
