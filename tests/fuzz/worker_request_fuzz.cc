// One message a client sends a worker, as protobuf bytes: everything the
// worker decides from it before a command runs — environment files and
// limits, tool-call arguments, an episode's verification (its regex compiled
// and matched against the problem text), scaffold limits, the answer of a
// submit — gives a result or an error, never a crash. A tool call that
// parses has a timeout within the worker's cap, and every non-submit call a
// command.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "loom/sandbox/sandbox.h"
#include "loom/sandbox/scaffold.h"
#include "loom/sandbox/tools.h"
#include "loom/sandbox/verify.h"
#include "loom/tasks/conversation.h"
#include "loom/tasks/regex.h"
#include "loom/v1/sandbox.pb.h"

namespace {

constexpr double kMaxTimeoutS = 600;

void CheckCall(const loom::v1::ToolCall& call) {
  auto run = loom::sandbox::ParseToolCall(call, kMaxTimeoutS);
  if (run.ok()) {
    if (!(run->timeout_s > 0 && run->timeout_s <= kMaxTimeoutS)) std::abort();
    if (call.name() != "submit" && run->command.empty()) std::abort();
  }
  loom::tasks::SubmittedAnswer(call);
  loom::v1::ToolResult result;
  result.set_name(call.name());
  result.set_stdout(call.arguments_json());
  result.set_error(run.ok() ? "" : std::string(run.status().message()));
  loom::tasks::RenderToolResult(result);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in a string field is a parse failure; protobuf would also log each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::v1::ClientMessage message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  static const loom::sandbox::SandboxConfig config;
  switch (message.kind_case()) {
    case loom::v1::ClientMessage::kOpen:
      loom::sandbox::CheckFiles(config, message.open().environment().files()).IgnoreError();
      break;
    case loom::v1::ClientMessage::kToolCall:
      CheckCall(message.tool_call());
      break;
    case loom::v1::ClientMessage::kRunEpisode: {
      const loom::v1::Task& task = message.run_episode().task();
      loom::tasks::WithDefaults(message.run_episode().options());
      loom::sandbox::CheckFiles(config, task.environment().files()).IgnoreError();
      loom::sandbox::CheckFiles(config, task.verification().files()).IgnoreError();
      if (loom::sandbox::ValidateVerification(task.verification()).ok() &&
          task.verification().has_output_regex()) {
        auto regex = loom::tasks::Regex::Compile(task.verification().output_regex().regex());
        if (!regex.ok()) std::abort();  // validated, so it compiles
        regex->Matches(task.problem(), /*whole=*/true).IgnoreError();
      }
      break;
    }
    case loom::v1::ClientMessage::kGenerated:
      for (const loom::v1::ToolCall& call : message.generated().assistant().tool_calls()) {
        CheckCall(call);
      }
      break;
    default:
      break;
  }
  return 0;
}
