#include "loom/tasks/jsonl.h"

#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "loom/config/files.h"

namespace loom::tasks {
namespace {

using nlohmann::json;

absl::Status CheckMessage(const json& message, size_t index) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!message.is_object()) return absl::InvalidArgumentError(where + " is not an object");
  if (!message.contains("role") || !message["role"].is_string()) {
    return absl::InvalidArgumentError(where + " needs a string \"role\"");
  }
  if (!kRoles.count(message["role"].get<std::string>())) {
    return absl::InvalidArgumentError(where + " has unknown role '" +
                                      message["role"].get<std::string>() + "'");
  }
  if (!message.contains("content") || !message["content"].is_string()) {
    return absl::InvalidArgumentError(where + " needs a string \"content\"");
  }
  if (message.contains("reasoning_content") && !message["reasoning_content"].is_string()) {
    return absl::InvalidArgumentError(where + ".reasoning_content is not a string");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AnswerText(const json& object) {
  if (!object.contains("answer")) return absl::InvalidArgumentError("missing \"answer\"");
  const json& answer = object["answer"];
  if (answer.is_string()) return answer.get<std::string>();
  if (answer.is_number()) return answer.dump();
  return absl::InvalidArgumentError("\"answer\" must be a string or a number");
}

// Splits off a trailing assistant message as the SFT reference.
absl::Status SetMessages(const json& messages, Problem& problem) {
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("\"messages\" must be a non-empty array");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (auto status = CheckMessage(messages[i], i); !status.ok()) return status;
  }
  problem.messages = messages;
  if (messages.back()["role"] == "assistant") {
    json reference = {{"role", "assistant"}, {"content", messages.back()["content"]}};
    reference["reasoning_content"] = messages.back().value("reasoning_content", "");
    problem.reference = std::move(reference);
    problem.messages.erase(problem.messages.size() - 1);
  }
  if (problem.messages.empty() || problem.messages.back()["role"] != "user") {
    return absl::InvalidArgumentError("the prompt must end with a user message");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Problem> ParseProblemLine(const std::string& line) {
  json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!object.is_object()) return absl::InvalidArgumentError("not a JSON object");
  for (const auto& item : object.items()) {
    if (item.key() != "messages" && item.key() != "answer" && item.key() != "verifier" &&
        item.key() != "effort" && item.key() != "id") {
      return absl::InvalidArgumentError("unknown key \"" + item.key() +
                                        "\" (expected messages, answer, verifier, effort, id)");
    }
  }
  Problem problem;
  if (object.contains("id")) {
    const json& id = object["id"];
    if (!id.is_string() || id.get<std::string>().empty()) {
      return absl::InvalidArgumentError("\"id\" must be a non-empty string, not " + id.dump());
    }
    problem.line_id = id.get<std::string>();
  }
  if (!object.contains("messages")) return absl::InvalidArgumentError("missing \"messages\"");
  if (auto status = SetMessages(object["messages"], problem); !status.ok()) return status;
  auto answer = AnswerText(object);
  if (!answer.ok()) return answer.status();
  problem.answer = *answer;
  if (object.contains("verifier")) {
    if (!object["verifier"].is_string()) {
      return absl::InvalidArgumentError("\"verifier\" must be a string");
    }
    auto kind = ParseVerifierKind(object["verifier"].get<std::string>());
    if (!kind.ok()) return kind.status();
    problem.verifier = *kind;
  }
  if (auto status = CheckAnswer(problem.verifier, problem.answer); !status.ok()) return status;
  if (object.contains("effort")) {
    const json& effort = object["effort"];
    if (!effort.is_number_integer() || effort.get<int64_t>() < 1 || effort.get<int64_t>() > 100) {
      return absl::InvalidArgumentError("\"effort\" must be an integer in 1..100, not " +
                                        effort.dump());
    }
    problem.effort = effort.get<int>();
  }
  return problem;
}

absl::StatusOr<std::vector<Problem>> ReadJsonlProblems(const std::string& path,
                                                       const std::string& dataset) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::vector<Problem> problems;
  std::istringstream lines(*text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto problem = ParseProblemLine(line);
    if (!problem.ok()) {
      return absl::InvalidArgumentError(path + ":" + std::to_string(number) + ": " +
                                        std::string(problem.status().message()));
    }
    problem->dataset = dataset;
    problem->id = dataset + "/line" + std::to_string(number);
    problem->source = path + ":" + std::to_string(number);
    problems.push_back(std::move(*problem));
  }
  if (problems.empty()) return absl::InvalidArgumentError(path + ": no problems (empty file)");
  return problems;
}

}  // namespace loom::tasks
