#include "loom/sandbox/verify.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "loom/tasks/regex.h"
#include "sandbox/test_runner.h"

namespace loom::sandbox {
namespace {

v1::Verdict MakeVerdict(bool passed, std::string details) {
  v1::Verdict verdict;
  verdict.set_passed(passed);
  verdict.set_reward(passed ? 1.0 : 0.0);
  verdict.set_details(std::move(details));
  return verdict;
}

using Log = google::protobuf::RepeatedPtrField<v1::CommandRecord>;

void Record(const std::string& command, const ProcessResult& run, Log* log) {
  if (log == nullptr) return;
  v1::CommandRecord* record = log->Add();
  record->set_phase("verify");
  record->set_command(command);
  record->set_exit_code(run.exit_code);
  record->set_duration_ms(run.duration_ms);
  record->set_timed_out(run.timed_out);
  record->set_limit(run.limit);
}

// Runs `command`; "" with the exit code in `exit_code`, or why it did not run.
std::string RunCheck(const Sandbox& sandbox, const std::string& command, double timeout_s,
                     int* exit_code, std::string* stdout_text, Log* log) {
  auto run = sandbox.Bash(command, timeout_s);
  if (!run.ok()) return std::string(run.status().message());
  Record(command, *run, log);
  *exit_code = run->exit_code;
  if (stdout_text != nullptr) *stdout_text = run->stdout_text;
  return run->timed_out ? "timed out" : "";
}

v1::Verdict VerifyCommand(const Sandbox& sandbox, const std::string& command, double timeout_s,
                          Log* log) {
  int code = -1;
  std::string error = RunCheck(sandbox, command, timeout_s, &code, nullptr, log);
  if (!error.empty()) return MakeVerdict(false, absl::StrCat("check command: ", error));
  return MakeVerdict(code == 0, absl::StrCat("check command exited ", code));
}

v1::Verdict VerifyRegex(const Sandbox& sandbox, const v1::OutputRegex& spec,
                        const std::string& answer, double timeout_s, Log* log) {
  std::string text = answer;
  if (!spec.command().empty()) {
    int code = -1;
    std::string error = RunCheck(sandbox, spec.command(), timeout_s, &code, &text, log);
    if (!error.empty()) return MakeVerdict(false, absl::StrCat("check command: ", error));
  }
  // The whole text: padding an answer with every candidate must not pass.
  auto regex = tasks::Regex::Compile(spec.regex());
  auto matched = regex.ok()
                     ? regex->Matches(std::string(absl::StripAsciiWhitespace(text)), /*whole=*/true)
                     : regex.status();
  const bool found = matched.ok() && *matched;  // past the match limits: not found
  return MakeVerdict(found,
                     absl::StrCat("/", spec.regex(), "/ ", found ? "matches" : "does not match",
                                  " the whole ", spec.command().empty() ? "answer" : "output"));
}

v1::Verdict VerifyTests(const Sandbox& sandbox, const v1::TestLists& tests, double timeout_s,
                        Log* log) {
  // The verdict needs every test to pass: after the first failure the rest
  // are listed, not run (each is a process in a sandbox).
  std::string details;
  int failed = 0;
  auto run_list = [&](const auto& names, const char* list) {
    for (const std::string& name : names) {
      if (failed > 0) {
        absl::StrAppend(&details, list, " ", name, ": not run\n");
        continue;
      }
      int code = -1;
      std::string command = absl::StrReplaceAll(tests.command(), {{"{test}", name}});
      std::string error = RunCheck(sandbox, command, timeout_s, &code, nullptr, log);
      bool ok = error.empty() && code == 0;
      failed += ok ? 0 : 1;
      absl::StrAppend(&details, list, " ", name, ": ", ok ? "pass" : "FAIL", "\n");
    }
  };
  run_list(tests.fail_to_pass(), "fail_to_pass");
  run_list(tests.pass_to_pass(), "pass_to_pass");
  return MakeVerdict(failed == 0, details);
}

// A fresh key for one run's report: 32 random bytes, in hex.
std::string NewKey() {
  std::random_device entropy;
  std::string key;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&key, absl::Hex(entropy(), absl::kZeroPad8));
  return key;
}

bool Authentic(const std::string& key, absl::string_view body, absl::string_view mac_hex) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac,
           &size) == nullptr) {
    return false;
  }
  const std::string want = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac), static_cast<size_t>(size)));
  return mac_hex.size() == want.size() &&
         CRYPTO_memcmp(mac_hex.data(), want.data(), want.size()) == 0;
}

// A string field of a report entry, "" when it is missing or not a string.
std::string Field(const nlohmann::json& entry, const char* key) {
  auto it = entry.find(key);
  return it != entry.end() && it->is_string() ? it->get<std::string>() : "";
}

// The runner's report for `ids`, in their order: the results of the one
// line whose MAC verifies under `key`. Empty, with `why`, when there is none.
nlohmann::json ReportedResults(const std::string& stdout_text, const std::string& key, size_t ids,
                               std::string* why) {
  constexpr absl::string_view kTag = "loom-test-report ";
  for (absl::string_view line : absl::StrSplit(stdout_text, '\n')) {
    if (!absl::ConsumePrefix(&line, kTag)) continue;
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos) continue;
    const absl::string_view body = line.substr(space + 1);
    if (!Authentic(key, body, line.substr(0, space))) continue;
    nlohmann::json report = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (report.is_object() && report.contains("results") && report["results"].is_array() &&
        report["results"].size() == ids) {
      return report["results"];
    }
    *why = "the test runner's report does not list every test";
    return nlohmann::json::array();
  }
  *why = "the test runner gave no report";
  return nlohmann::json::array();
}

// loom's runner (test_runner.py), for unittest or pytest: one run for every test, the
// verdict from its authenticated report alone, never from an exit status.
v1::Verdict VerifyWithRunner(const Sandbox& sandbox, const v1::TestLists& tests, double timeout_s,
                             Log* log) {
  std::vector<std::pair<std::string, const char*>> ids;
  for (const std::string& id : tests.fail_to_pass()) ids.emplace_back(id, "fail_to_pass");
  for (const std::string& id : tests.pass_to_pass()) ids.emplace_back(id, "pass_to_pass");
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [id, list] : ids) names.push_back(id);
  const std::string key = NewKey();
  const std::string input = absl::StrCat(key, "\n", nlohmann::json(sandbox.trusted_files()).dump(),
                                         "\n", names.dump(), "\n");
  const std::string command = absl::StrCat("exec python3 -I -B ", kTestRunnerPath,
                                           tests.runner() == "pytest" ? " --pytest" : "");
  auto run = sandbox.Bash(command, timeout_s * static_cast<double>(ids.size()), {}, input);
  if (!run.ok()) return MakeVerdict(false, absl::StrCat("test runner: ", run.status().message()));
  Record(command, *run, log);
  std::string why;
  const nlohmann::json results = ReportedResults(run->stdout_text, key, ids.size(), &why);
  if (results.empty()) {
    return MakeVerdict(
        false, absl::StrCat(why, " (exit ", run->exit_code, run->timed_out ? ", timed out" : "",
                            run->limit.empty() ? "" : ", killed: " + run->limit, ")"));
  }
  std::string details;
  bool all_passed = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    const nlohmann::json& result = results[i];
    const bool passed = result.is_object() && Field(result, "id") == ids[i].first &&
                        result.contains("passed") && result["passed"] == true;
    all_passed = all_passed && passed;
    absl::StrAppend(&details, ids[i].second, " ", ids[i].first, ": ", passed ? "pass" : "FAIL");
    if (!passed && result.is_object()) absl::StrAppend(&details, " (", Field(result, "why"), ")");
    absl::StrAppend(&details, "\n");
  }
  return MakeVerdict(all_passed, details);
}

}  // namespace

absl::Status ValidateVerification(const v1::Verification& verification) {
  switch (verification.kind_case()) {
    case v1::Verification::KIND_NOT_SET:
      return absl::InvalidArgumentError("task verification: no kind given");
    case v1::Verification::kOutputRegex:
      if (auto regex = tasks::Regex::Compile(verification.output_regex().regex()); !regex.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("task verification: bad regex '",
                                                       verification.output_regex().regex(), "' ",
                                                       regex.status().message()));
      }
      return absl::OkStatus();
    case v1::Verification::kTests:
      if (const std::string& runner = verification.tests().runner();
          runner != "" && runner != "unittest" && runner != "pytest") {
        return absl::InvalidArgumentError(absl::StrCat("task verification: tests.runner '", runner,
                                                       "' is not one of '', 'unittest', 'pytest'"));
      }
      if (verification.tests().runner().empty() &&
          verification.tests().command().find("{test}") == std::string::npos) {
        return absl::InvalidArgumentError("task verification: tests.command must contain {test}");
      }
      if (verification.tests().fail_to_pass().empty() &&
          verification.tests().pass_to_pass().empty()) {
        return absl::InvalidArgumentError("task verification: tests lists are empty");
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

v1::Verdict Verify(const Sandbox& sandbox, const v1::Verification& verification,
                   const std::string& answer, double timeout_s, Log* log) {
  if (verification.kind_case() == v1::Verification::kExactAnswer) {
    std::string want(absl::StripAsciiWhitespace(verification.exact_answer()));
    std::string got(absl::StripAsciiWhitespace(answer));
    return MakeVerdict(got == want, absl::StrCat("expected '", want, "', got '", got, "'"));
  }
  const bool runs_commands = verification.kind_case() != v1::Verification::kOutputRegex ||
                             !verification.output_regex().command().empty();
  if (!runs_commands) {
    return VerifyRegex(sandbox, verification.output_regex(), answer, timeout_s, log);
  }
  auto fresh = sandbox.ForVerification(verification);
  if (!fresh.ok()) {
    return MakeVerdict(false,
                       absl::StrCat("cannot prepare verification: ", fresh.status().message()));
  }
  switch (verification.kind_case()) {
    case v1::Verification::kCommand:
      return VerifyCommand(**fresh, verification.command(), timeout_s, log);
    case v1::Verification::kOutputRegex:
      return VerifyRegex(**fresh, verification.output_regex(), answer, timeout_s, log);
    case v1::Verification::kTests:
      return verification.tests().runner().empty()
                 ? VerifyTests(**fresh, verification.tests(), timeout_s, log)
                 : VerifyWithRunner(**fresh, verification.tests(), timeout_s, log);
    default:
      return MakeVerdict(false, "no verification");
  }
}

}  // namespace loom::sandbox
