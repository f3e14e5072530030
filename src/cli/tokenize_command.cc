// `loom tokenize --tokenizer FILE [--input FILE] [--decode]`: JSON lines in,
// JSON lines out. Encoding: each input line is a JSON string, each output
// line the JSON array of its ids. --decode: arrays of ids in, JSON strings
// out. Exit 2 when the tokenizer cannot be loaded, 1 on a malformed input
// line (named by file and line number).

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string input;  // empty: stdin
  bool decode = false;
};

absl::StatusOr<std::string> ProcessLine(const tokenizer::Tokenizer& tok, const std::string& line,
                                        bool decode) {
  nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (decode) {
    if (!value.is_array()) return absl::InvalidArgumentError("expected a JSON array of ids");
    std::vector<int32_t> ids;
    for (const auto& id : value) {
      if (!id.is_number_integer()) return absl::InvalidArgumentError("ids must be integers");
      ids.push_back(id.get<int32_t>());
    }
    absl::StatusOr<std::string> text = tok.Decode(ids);
    if (!text.ok()) return text.status();
    return nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (!value.is_string()) return absl::InvalidArgumentError("expected a JSON string");
  absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(value.get<std::string>());
  if (!ids.ok()) return ids.status();
  return nlohmann::json(*ids).dump();
}

int RunTokenize(const TokenizeOptions& options) {
  auto tok = tokenizer::Tokenizer::FromFile(options.tokenizer);
  if (!tok.ok()) {
    std::cerr << "tokenize: " << tok.status().message() << "\n";
    return kExitUsage;
  }
  std::ifstream file;
  if (!options.input.empty()) {
    file.open(options.input);
    if (!file) {
      std::cerr << "tokenize: cannot open " << options.input << "\n";
      return kExitUsage;
    }
  }
  std::istream& in = options.input.empty() ? std::cin : file;
  const std::string name = options.input.empty() ? "<stdin>" : options.input;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    absl::StatusOr<std::string> out = ProcessLine(**tok, line, options.decode);
    if (!out.ok()) {
      std::cerr << "tokenize: " << name << ":" << number << ": " << out.status().message() << "\n";
      return kExitFailure;
    }
    std::cout << *out << "\n";
  }
  return kExitOk;
}

void SetupTokenize(CLI::App& app, Context& context) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode JSON-string lines to id arrays (or back)");
  cmd->add_option("--tokenizer", options->tokenizer, "tokenizer.json")->required();
  cmd->add_option("--input", options->input, "JSON lines file (default: stdin)");
  cmd->add_flag("--decode", options->decode, "Decode arrays of ids into JSON strings");
  cmd->callback([options, &context] { context.exit_code = RunTokenize(*options); });
}

}  // namespace

LOOM_REGISTER_COMMAND("tokenize", SetupTokenize);

}  // namespace loom::cli
