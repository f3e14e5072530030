#include "loom/tasks/agent_jsonl.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/config/files.h"
#include "loom/tasks/regex.h"
#include "tasks/tar.h"

namespace loom::tasks {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kErrorsShown = 50;

// Collects a line's problems, each under the field it is about.
class LineErrors {
 public:
  void Add(const std::string& field, const std::string& what) {
    errors_.push_back(field + ": " + what);
  }
  std::vector<std::string> Take() { return std::move(errors_); }

 private:
  std::vector<std::string> errors_;
};

// Whether `object` has only keys of `known`; the rest are reported.
void CheckKeys(const json& object, const std::string& where, const std::set<std::string>& known,
               LineErrors& errors) {
  for (const auto& item : object.items()) {
    if (known.count(item.key())) continue;
    errors.Add(where.empty() ? item.key() : where + "." + item.key(),
               "unknown key (expected " + absl::StrJoin(known, ", ") + ")");
  }
}

// A path a task names: relative, inside the workspace, no empty or dot parts.
bool IsWorkspacePath(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string::npos) return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

std::string String(const json& object, const char* key, const std::string& where,
                   LineErrors& errors) {
  if (!object.contains(key)) return "";
  if (object[key].is_string()) return object[key].get<std::string>();
  errors.Add(where + key, "must be a string");
  return "";
}

std::vector<std::string> Strings(const json& object, const char* key, const std::string& where,
                                 LineErrors& errors) {
  std::vector<std::string> out;
  if (!object.contains(key)) return out;
  const json& list = object[key];
  if (!list.is_array()) {
    errors.Add(where + key, "must be an array of strings");
    return out;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].is_string() && !list[i].get<std::string>().empty()) {
      out.push_back(list[i].get<std::string>());
    } else {
      errors.Add(absl::StrCat(where, key, "[", i, "]"), "must be a non-empty string");
    }
  }
  return out;
}

// A {path: text} object into `files`; `bytes` counts what it holds.
void Files(const json& object, const char* key, const std::string& where,
           google::protobuf::Map<std::string, std::string>& files, size_t& bytes,
           LineErrors& errors) {
  if (!object.contains(key)) return;
  const json& map = object[key];
  if (!map.is_object()) {
    errors.Add(where + key, "must be an object of path: text");
    return;
  }
  for (const auto& item : map.items()) {
    const std::string field = where + key + "[\"" + item.key() + "\"]";
    if (!IsWorkspacePath(item.key())) {
      errors.Add(field, "is not a relative path inside the workspace");
    } else if (!item.value().is_string()) {
      errors.Add(field, "must be a string (the file's text)");
    } else {
      bytes += item.value().get_ref<const std::string&>().size();
      files[item.key()] = item.value().get<std::string>();
    }
  }
}

// The regular files under `dir` (relative to `base_dir`) into `files`.
void ReadDirectory(const std::string& dir, const std::string& base_dir,
                   google::protobuf::Map<std::string, std::string>& files, size_t& bytes,
                   LineErrors& errors) {
  const char* field = "environment.dir";
  const fs::path root = fs::path(base_dir) / dir;
  std::error_code ec;
  if (!fs::is_directory(fs::status(root, ec))) {
    errors.Add(field, root.string() + " is not a directory");
    return;
  }
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::file_status status = it->symlink_status(ec);
    const std::string relative = fs::relative(it->path(), root, ec).generic_string();
    if (fs::is_directory(status)) continue;
    if (!fs::is_regular_file(status)) {
      errors.Add(field, it->path().string() + " is not a regular file (links are not followed)");
      continue;
    }
    auto text = ReadFile(it->path().string());
    if (!text.ok()) {
      errors.Add(field, std::string(text.status().message()));
      continue;
    }
    bytes += text->size();
    files[relative] = *std::move(text);
  }
  if (ec) errors.Add(field, root.string() + ": " + ec.message());
}

void ParseEnvironment(const json& env, const std::string& base_dir, v1::Environment& out,
                      size_t& bytes, LineErrors& errors) {
  if (!env.is_object()) {
    errors.Add("environment", "must be an object");
    return;
  }
  CheckKeys(env, "environment", {"files", "dir", "archive", "setup", "setup_timeout_s", "health"},
            errors);
  Files(env, "files", "environment.", *out.mutable_files(), bytes, errors);
  const std::string dir = String(env, "dir", "environment.", errors);
  if (!dir.empty()) ReadDirectory(dir, base_dir, *out.mutable_files(), bytes, errors);
  const std::string archive = String(env, "archive", "environment.", errors);
  if (!archive.empty()) {
    auto files = ReadTarFiles((fs::path(base_dir) / archive).string(), kMaxAgentTaskBytes);
    if (!files.ok()) {
      errors.Add("environment.archive", std::string(files.status().message()));
    } else {
      for (auto& [path, text] : *files) {
        bytes += text.size();
        (*out.mutable_files())[path] = std::move(text);
      }
    }
  }
  out.set_setup_command(String(env, "setup", "environment.", errors));
  out.set_health_command(String(env, "health", "environment.", errors));
  if (env.contains("setup_timeout_s")) {
    const json& t = env["setup_timeout_s"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 3600) {
      errors.Add("environment.setup_timeout_s", "must be an integer in 1..3600");
    } else {
      out.set_setup_timeout_s(t.get<int>());
    }
  }
}

// Sets the verification's one kind; every other kind named is an error.
void ParseVerificationKind(const json& v, v1::Verification& out, LineErrors& errors) {
  const char* where = "verification.";
  std::vector<std::string> kinds;
  const bool has_tests = v.contains("fail_to_pass") || v.contains("pass_to_pass");
  if (has_tests) kinds.push_back("fail_to_pass");
  for (const char* key : {"command", "exact_answer", "output_regex"}) {
    if (v.contains(key)) kinds.push_back(key);
  }
  if (kinds.size() != 1) {
    errors.Add("verification",
               kinds.empty() ? "needs one of fail_to_pass (test lists), command, exact_answer, "
                               "output_regex"
                             : "has more than one kind: " + absl::StrJoin(kinds, ", "));
    return;
  }
  const std::string runner = String(v, "runner", where, errors);
  const std::string test_command = String(v, "test_command", where, errors);
  if (!has_tests && (!runner.empty() || !test_command.empty())) {
    errors.Add(runner.empty() ? "verification.test_command" : "verification.runner",
               "is only for test lists (fail_to_pass)");
  }
  if (has_tests) {
    v1::TestLists& tests = *out.mutable_tests();
    for (std::string& t : Strings(v, "fail_to_pass", where, errors)) tests.add_fail_to_pass(t);
    for (std::string& t : Strings(v, "pass_to_pass", where, errors)) tests.add_pass_to_pass(t);
    if (tests.fail_to_pass().empty()) {
      errors.Add("verification.fail_to_pass", "must list at least one test");
    }
    if (runner.empty() == test_command.empty()) {
      errors.Add("verification.runner", "test lists need a runner or a test_command, not both");
    } else if (!runner.empty() && runner != "unittest" && runner != "pytest") {
      errors.Add("verification.runner", "must be unittest or pytest, not '" + runner + "'");
    } else if (!test_command.empty() && test_command.find("{test}") == std::string::npos) {
      errors.Add("verification.test_command", "must contain {test}");
    }
    tests.set_runner(runner);
    tests.set_command(test_command);
  } else if (v.contains("command")) {
    out.set_command(String(v, "command", where, errors));
    if (out.command().empty()) errors.Add("verification.command", "must not be empty");
  } else if (v.contains("exact_answer")) {
    out.set_exact_answer(String(v, "exact_answer", where, errors));
  } else {
    const json& r = v["output_regex"];
    if (!r.is_object()) {
      errors.Add("verification.output_regex", "must be an object {command, regex}");
      return;
    }
    CheckKeys(r, "verification.output_regex", {"command", "regex"}, errors);
    out.mutable_output_regex()->set_command(
        String(r, "command", "verification.output_regex.", errors));
    const std::string regex = String(r, "regex", "verification.output_regex.", errors);
    if (auto compiled = Regex::Compile(regex); !compiled.ok()) {
      errors.Add("verification.output_regex.regex", std::string(compiled.status().message()));
    }
    out.mutable_output_regex()->set_regex(regex);
  }
}

void ParseVerification(const json& v, v1::Verification& out, size_t& bytes, LineErrors& errors) {
  if (!v.is_object()) {
    errors.Add("verification", "must be an object");
    return;
  }
  CheckKeys(v, "verification",
            {"runner", "test_command", "fail_to_pass", "pass_to_pass", "command", "exact_answer",
             "output_regex", "files", "answer_paths"},
            errors);
  ParseVerificationKind(v, out, errors);
  Files(v, "files", "verification.", *out.mutable_files(), bytes, errors);
  for (std::string& glob : Strings(v, "answer_paths", "verification.", errors)) {
    if (glob.front() == '/' || glob.find("..") != std::string::npos) {
      errors.Add("verification.answer_paths", "'" + glob + "' leaves the workspace");
    }
    out.add_answer_paths(std::move(glob));
  }
}

void ParseReference(const json& reference, AgentTask& task, size_t& bytes, LineErrors& errors) {
  if (!reference.is_object()) {
    errors.Add("reference", "must be an object {files}");
    return;
  }
  CheckKeys(reference, "reference", {"files"}, errors);
  google::protobuf::Map<std::string, std::string> files;
  Files(reference, "files", "reference.", files, bytes, errors);
  if (files.empty()) errors.Add("reference.files", "must name at least one file");
  task.reference.insert(files.begin(), files.end());
}

bool IsIdCharacter(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

}  // namespace

std::vector<std::string> ParseAgentTaskLine(const std::string& line, const std::string& base_dir,
                                            AgentTask& task) {
  LineErrors errors;
  const json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return {"line: not valid JSON"};
  if (!object.is_object()) return {"line: not a JSON object"};
  CheckKeys(object, "", {"id", "problem", "environment", "verification", "reference", "tags"},
            errors);
  const std::string id = String(object, "id", "", errors);
  if (id.empty() || id.size() > 200 || !std::all_of(id.begin(), id.end(), IsIdCharacter)) {
    errors.Add("id", "must be 1..200 characters of A-Z a-z 0-9 . _ -");
  }
  task.task.set_id(id);
  task.task.set_problem(String(object, "problem", "", errors));
  if (!object.contains("problem")) {
    errors.Add("problem", "is required");
  } else if (object["problem"].is_string() && task.task.problem().empty()) {
    errors.Add("problem", "must not be empty");
  }
  size_t bytes = task.task.problem().size();
  if (object.contains("environment")) {
    ParseEnvironment(object["environment"], base_dir, *task.task.mutable_environment(), bytes,
                     errors);
  }
  if (!object.contains("verification")) {
    errors.Add("verification", "is required");
  } else {
    ParseVerification(object["verification"], *task.task.mutable_verification(), bytes, errors);
  }
  if (object.contains("reference")) ParseReference(object["reference"], task, bytes, errors);
  task.tags = Strings(object, "tags", "", errors);
  if (bytes > kMaxAgentTaskBytes) {
    errors.Add("line", absl::StrCat("its files hold ", bytes, " bytes; a task holds at most ",
                                    kMaxAgentTaskBytes));
  }
  return errors.Take();
}

absl::StatusOr<std::vector<AgentTask>> ReadAgentTasks(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  const std::string base_dir = fs::path(path).parent_path().string();
  std::vector<AgentTask> tasks;
  std::vector<std::string> errors;
  std::map<std::string, int> first_line;  // id -> the line that has it
  std::istringstream lines(*text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    AgentTask task;
    std::vector<std::string> problems = ParseAgentTaskLine(line, base_dir, task);
    const auto [seen, added] = first_line.emplace(task.task.id(), number);
    if (!added && !task.task.id().empty()) {
      problems.push_back("id: '" + task.task.id() + "' is also the id of line " +
                         std::to_string(seen->second));
    }
    for (const std::string& p : problems) errors.push_back(where + p);
    if (!problems.empty()) continue;
    task.source = path + ":" + std::to_string(number);
    tasks.push_back(std::move(task));
  }
  if (!errors.empty()) {
    const size_t shown = std::min(errors.size(), kErrorsShown);
    std::string message = absl::StrJoin(errors.begin(), errors.begin() + shown, "\n");
    if (errors.size() > shown) {
      absl::StrAppend(&message, "\n... and ", errors.size() - shown, " more");
    }
    return absl::InvalidArgumentError(message);
  }
  if (tasks.empty()) return absl::InvalidArgumentError(path + ": no tasks (empty file)");
  return tasks;
}

std::vector<DemonstrationTurn> ReferenceDemonstration(const AgentTask& task) {
  std::vector<DemonstrationTurn> turns;
  if (task.reference.empty()) return turns;
  for (const auto& [path, content] : task.reference) {
    DemonstrationTurn& turn = turns.emplace_back();
    turn.assistant.set_role("assistant");
    v1::ToolCall& call = *turn.assistant.add_tool_calls();
    call.set_name("write_file");
    call.set_arguments_json(json{{"path", path}, {"content", content}}.dump());
    turn.results.emplace_back();  // write_file prints nothing
  }
  DemonstrationTurn& answer = turns.emplace_back();
  answer.assistant.set_role("assistant");
  answer.assistant.set_content("Done.");
  return turns;
}

}  // namespace loom::tasks
