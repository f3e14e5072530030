#include "loom/sandbox/verify.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "loom/tasks/regex.h"

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

// Runs `command`; "" with the exit code in `exit_code`, or why it did not run.
std::string RunCheck(const Sandbox& sandbox, const std::string& command, double timeout_s,
                     int* exit_code, std::string* stdout_text, Log* log) {
  auto run = sandbox.Bash(command, timeout_s);
  if (!run.ok()) return std::string(run.status().message());
  if (log != nullptr) {
    v1::CommandRecord* record = log->Add();
    record->set_phase("verify");
    record->set_command(command);
    record->set_exit_code(run->exit_code);
    record->set_duration_ms(run->duration_ms);
    record->set_timed_out(run->timed_out);
    record->set_limit(run->limit);
  }
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
      if (verification.tests().command().find("{test}") == std::string::npos) {
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
      return VerifyTests(**fresh, verification.tests(), timeout_s, log);
    default:
      return MakeVerdict(false, "no verification");
  }
}

}  // namespace loom::sandbox
