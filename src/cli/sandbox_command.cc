// `loom sandbox exec --worker ADDR [--auth-token-file F] [--tls-ca F]
//  [--timeout-s S] -- CMD...`: opens a session on a worker, runs CMD (its
// arguments shell-quoted and joined) as one bash tool call, prints
// {"exit_code","stdout","stderr","timed_out","duration_ms"} as JSON and
// closes the session.
//
// Exit status: 0 when the call ran (whatever CMD returned), 4 refused for
// capacity, 5 worker unavailable (or deadline passed), 6 unauthenticated,
// 2 bad arguments, 1 anything else.

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_replace.h"
#include "cli/command.h"
#include "loom/config/files.h"
#include "loom/rpc/channel.h"
#include "loom/rpc/session.h"

namespace loom::cli {
namespace {

constexpr int kExitCapacity = 4;
constexpr int kExitUnavailable = 5;
constexpr int kExitUnauthenticated = 6;

struct ExecFlags {
  std::string worker, auth_token_file, tls_ca_file;
  double timeout_s = 60;
  std::vector<std::string> command;
};

std::string ShellQuote(const std::string& arg) {
  return "'" + absl::StrReplaceAll(arg, {{"'", "'\\''"}}) + "'";
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return kExitCapacity;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
      return kExitUnauthenticated;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

int Fail(const absl::Status& status) {
  std::cerr << "loom sandbox exec: " << status.message() << "\n";
  return ExitCodeFor(status);
}

int RunExec(const ExecFlags& flags) {
  rpc::ChannelOptions channel{flags.worker, "", ""};
  if (!flags.auth_token_file.empty()) {
    if (auto s = rpc::ReadSecretFile(flags.auth_token_file, &channel.auth_token); !s.ok()) {
      std::cerr << "loom sandbox exec: " << s.message() << "\n";
      return kExitUsage;
    }
  }
  if (!flags.tls_ca_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFile(flags.tls_ca_file);
    if (!pem.ok()) {
      std::cerr << "loom sandbox exec: " << pem.status().message() << "\n";
      return kExitUsage;
    }
    channel.tls_ca_pem = *pem;
  }
  std::string command;
  for (const std::string& arg : flags.command)
    command += (command.empty() ? "" : " ") + ShellQuote(arg);
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>((flags.timeout_s + 30) * 1000));
  auto session = rpc::WorkerSession::Open(rpc::MakeChannel(channel), channel.auth_token,
                                          v1::OpenSession(), deadline);
  if (!session.ok()) return Fail(session.status());
  v1::ToolCall call;
  call.set_id("exec");
  call.set_name("bash");
  call.set_arguments_json(
      nlohmann::json{{"command", command}, {"timeout_s", flags.timeout_s}}.dump());
  auto result = (*session)->Call(call);
  if (!result.ok()) return Fail(result.status());
  (*session)->Close().IgnoreError();
  nlohmann::ordered_json out = {
      {"exit_code", result->exit_code()}, {"stdout", result->stdout()},
      {"stderr", result->stderr()},       {"timed_out", result->timed_out()},
      {"limit", result->limit()},         {"duration_ms", result->duration_ms()}};
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return kExitOk;
}

void SetupSandbox(CLI::App& app, Context& context) {
  CLI::App* group = GroupCommand(app, "sandbox", "Use sandbox workers");
  auto flags = std::make_shared<ExecFlags>();
  CLI::App* exec = group->add_subcommand("exec", "Run one command in a fresh sandbox on a worker");
  exec->add_option("--worker", flags->worker, "Worker address (host:port or dns:///name:port)")
      ->required();
  exec->add_option("--auth-token-file", flags->auth_token_file, "File with the worker's token");
  exec->add_option("--tls-ca", flags->tls_ca_file, "PEM CA certificate: connect with TLS");
  exec->add_option("--timeout-s", flags->timeout_s, "Wall-clock limit of the command (s)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  exec->add_option("command", flags->command, "The command and its arguments (after --)")
      ->required();
  exec->callback([flags, &context] { context.exit_code = RunExec(*flags); });
}

}  // namespace

LOOM_REGISTER_COMMAND("sandbox", SetupSandbox);

}  // namespace loom::cli
