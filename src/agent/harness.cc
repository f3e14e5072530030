#include "loom/agent/harness.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::agent {
namespace {

// Where `loom worker --harness-dir` mounts the npm packages.
constexpr char kBin[] = "/opt/loom/harness/node_modules/.bin/";
// The model's name in every harness's provider entry.
constexpr char kModel[] = "loom";
constexpr char kEndpoint[] = "http://127.0.0.1:8000/v1";
// Where every built-in harness's command names the problem: last.
constexpr char kProblemArgument[] = " \"$LOOM_PROBLEM\"";

HarnessSpec Pi(int64_t context_window, int64_t max_tokens) {
  HarnessSpec spec;
  spec.name = "pi";
  spec.package = "@mariozechner/pi-coding-agent";
  spec.command = absl::StrCat(kBin, "pi -p --no-session --model loom/", kModel, kProblemArgument);
  const nlohmann::json models = {
      {"providers",
       {{"loom",
         {{"baseUrl", kEndpoint},
          {"api", "openai-completions"},
          {"apiKey", "OPENAI_API_KEY"},  // the variable that holds the session's key
          {"models",
           {{{"id", kModel},
             {"reasoning", true},
             {"contextWindow", context_window},
             {"maxTokens", max_tokens}}}}}}}}};
  spec.files["pi-agent/models.json"] = models.dump(2);
  spec.env = {{"PI_CODING_AGENT_DIR", "/tmp/pi-agent"}, {"PI_OFFLINE", "1"}, {"PI_TELEMETRY", "0"}};
  return spec;
}

HarnessSpec ClaudeCode() {
  HarnessSpec spec;
  spec.name = "claude-code";
  spec.package = "@anthropic-ai/claude-code";
  spec.command = absl::StrCat(kBin, "claude -p --model ", kModel, kProblemArgument);
  spec.env = {{"DISABLE_TELEMETRY", "1"},
              {"DISABLE_AUTOUPDATER", "1"},
              {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"}};
  return spec;
}

HarnessSpec Codex() {
  HarnessSpec spec;
  spec.name = "codex";
  spec.package = "@openai/codex";
  spec.command = absl::StrCat(kBin, "codex exec --skip-git-repo-check", kProblemArgument);
  spec.files["codex/config.toml"] =
      absl::StrCat("model = \"", kModel, "\"\nmodel_provider = \"loom\"\n",
                   "[model_providers.loom]\nname = \"loom\"\nbase_url = \"", kEndpoint,
                   "\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n");
  spec.env = {{"CODEX_HOME", "/tmp/codex"}};
  return spec;
}

HarnessSpec OpenCode() {
  HarnessSpec spec;
  spec.name = "opencode";
  spec.package = "opencode-ai";
  const std::string model = absl::StrCat("loom/", kModel);
  spec.command = absl::StrCat(kBin, "opencode run --model ", model, kProblemArgument);
  const nlohmann::json config = {
      {"provider",
       {{"loom",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "loom"},
          {"options", {{"baseURL", kEndpoint}, {"apiKey", "{env:OPENAI_API_KEY}"}}},
          {"models", {{kModel, {{"name", kModel}}}}}}}}},
      {"model", model}};
  spec.files[".config/opencode/opencode.json"] = config.dump(2);
  // Nothing to fetch: the registry is unreachable, and says so at once.
  spec.env = {{"OPENCODE_DISABLE_AUTOUPDATE", "1"}, {"npm_config_registry", "http://127.0.0.1:9/"}};
  return spec;
}

// A session key nobody guesses: 32 hex digits.
std::string NewKey() {
  std::random_device device;
  std::string key;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&key, absl::Hex(device(), absl::kZeroPad8));
  return key;
}

// What ended an episode that ran, and whether it was the harness's own
// failure rather than the policy's.
void Classify(const v1::HarnessDone& done, HarnessEpisode& episode) {
  if (!done.error().empty()) {
    episode.failure = "harness_failed_to_start: " + done.error();
    episode.infrastructure = true;
  } else if (done.timed_out()) {
    episode.failure = "time_limit";
  } else if (!done.limit().empty()) {
    episode.failure = "sandbox_limit: " + done.limit();
  } else if (done.exit_code() == 126 || done.exit_code() == 127) {
    episode.failure = absl::StrCat("harness_failed_to_start: status ", done.exit_code(), ": ",
                                   done.stderr().substr(0, 300));
    episode.infrastructure = true;
  } else if (done.exit_code() > 128) {
    episode.failure = absl::StrCat(
        "harness_crashed: signal ", done.exit_code() - 128, ": ",
        done.stderr().substr(done.stderr().size() - std::min<size_t>(done.stderr().size(), 300)));
    episode.infrastructure = true;
  } else if (done.exit_code() != 0) {
    episode.failure = absl::StrCat("harness_exit: status ", done.exit_code());
  }
}

}  // namespace

void EpisodeCancel::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (session_ != nullptr) session_->Cancel();
}

bool EpisodeCancel::Attach(rpc::WorkerSession* session) {
  std::lock_guard<std::mutex> lock(mu_);
  session_ = session;
  return !cancelled_;
}

HarnessSpec CommandHarness(const std::string& name, const std::string& command) {
  HarnessSpec spec;
  spec.name = name;
  spec.command = command;
  return spec;
}

void AddArguments(HarnessSpec& spec, const std::string& arguments) {
  if (arguments.empty()) return;
  const size_t at = spec.command.rfind(kProblemArgument);
  if (at == std::string::npos) {
    absl::StrAppend(&spec.command, " ", arguments);
  } else {
    spec.command.insert(at, " " + arguments);
  }
}

std::string HarnessVersion(const HarnessSpec& spec, const std::string& harness_dir) {
  if (spec.package.empty() || harness_dir.empty()) return "";
  std::ifstream in(harness_dir + "/node_modules/" + spec.package + "/package.json");
  const nlohmann::json package = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!package.is_object() || !package.contains("version") || !package["version"].is_string()) {
    return "";
  }
  return package["version"].get<std::string>();
}

std::vector<std::string> BuiltinHarnessNames() {
  return {"pi", "claude-code", "codex", "opencode"};
}

absl::StatusOr<HarnessSpec> BuiltinHarness(const std::string& name, int64_t context_window,
                                           int64_t max_tokens) {
  if (name == "pi") return Pi(context_window, max_tokens);
  if (name == "claude-code") return ClaudeCode();
  if (name == "codex") return Codex();
  if (name == "opencode") return OpenCode();
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown harness '", name, "' (built in: ", absl::StrJoin(BuiltinHarnessNames(), ", "),
      "; or give a command)"));
}

EpisodeOutcome OutcomeOf(const HarnessEpisode& episode) {
  EpisodeOutcome outcome;
  outcome.reward = episode.reward();
  outcome.answer = episode.done.stdout();
  for (const serve::CallRecord& call : episode.record.calls) {
    outcome.steps += call.finish == "tool_calls";
    outcome.format_errors += call.format_error;
  }
  outcome.failure_reason = episode.failure;
  outcome.infrastructure = episode.infrastructure;
  return outcome;
}

nlohmann::json HarnessEpisodeJson(const HarnessEpisode& episode) {
  const v1::HarnessDone& done = episode.done;
  // Each tool call the model made, with the result the harness sent back
  // and how long after the call that asked for it (the tool's time, and
  // the harness's around it).
  nlohmann::json tools = nlohmann::json::array();
  const std::vector<serve::CallRecord>& records = episode.record.calls;
  for (const serve::CallRecord& asking : records) {
    for (const chat::ToolCall& tool : asking.tool_calls) {
      nlohmann::json entry = {{"id", tool.id}, {"name", tool.name}, {"arguments", tool.arguments}};
      for (const serve::CallRecord& answering : records) {
        const auto result =
            std::find_if(answering.tool_results.begin(), answering.tool_results.end(),
                         [&](const serve::ToolResultRecord& r) { return r.call_id == tool.id; });
        if (result == answering.tool_results.end()) continue;
        entry["result_bytes"] = result->bytes;
        entry["result_head"] = result->head;
        entry["seconds"] = answering.start_s - asking.end_s;
        break;
      }
      tools.push_back(std::move(entry));
    }
  }
  nlohmann::json calls = nlohmann::json::array();
  for (const serve::CallRecord& call : records) {
    calls.push_back({{"segment", call.segment},
                     {"continued", call.continued},
                     {"context", call.context},
                     {"completion_tokens", call.completion_tokens},
                     {"start_s", call.start_s},
                     {"end_s", call.end_s},
                     {"finish", call.finish},
                     {"format_error", call.format_error}});
  }
  nlohmann::json checks = nlohmann::json::array();
  for (const v1::CommandRecord& command : done.commands()) {
    checks.push_back({{"phase", command.phase()},
                      {"command", command.command()},
                      {"exit_code", command.exit_code()},
                      {"duration_ms", command.duration_ms()}});
  }
  const std::string& err = done.stderr();
  return {{"harness", episode.harness},
          {"task_id", episode.task_id},
          {"exit_code", done.exit_code()},
          {"duration_ms", done.duration_ms()},
          {"calls", std::move(calls)},
          {"tools", std::move(tools)},
          {"segments", episode.record.segments.size()},
          {"lost_segments", episode.record.lost_segments},
          {"reward", done.verdict().reward()},
          {"passed", done.verdict().passed()},
          {"details", done.verdict().details()},
          {"checks", std::move(checks)},
          {"failure", episode.failure},
          {"infrastructure", episode.infrastructure},
          {"stderr_tail", err.substr(err.size() - std::min<size_t>(err.size(), 2000))}};
}

HarnessEpisode RunHarnessEpisode(rpc::WorkerPool& pool, serve::Endpoint& endpoint,
                                 const HarnessSpec& harness, const v1::Task& task,
                                 const HarnessEpisodeOptions& options) {
  HarnessEpisode episode;
  episode.harness = harness.name;
  episode.task_id = task.id();
  const std::string key = NewKey();
  if (absl::Status s =
          endpoint.OpenSession({key, options.effort, options.temperature, options.max_turn_tokens});
      !s.ok()) {
    episode.failure = absl::StrCat("endpoint: ", s.message());
    episode.infrastructure = true;
    return episode;
  }
  v1::OpenSession open;
  *open.mutable_environment() = task.environment();
  open.set_label(absl::StrCat(task.id(), " (", harness.name, ")"));
  auto session = pool.OpenSession(open);
  absl::StatusOr<v1::HarnessDone> done = absl::UnknownError("not run");
  const bool cancelled =
      options.cancel != nullptr && !options.cancel->Attach(session.ok() ? session->get() : nullptr);
  if (cancelled) {
    episode.failure = "cancelled";
  } else if (!session.ok()) {
    episode.failure = absl::StrCat("no_sandbox: ", session.status().message());
  } else if (std::string failed = rpc::SetupFailure((*session)->opened()); !failed.empty()) {
    episode.failure = std::move(failed);
  } else {
    v1::RunHarness run;
    run.set_command(harness.command);
    run.set_problem(task.problem());
    run.mutable_env()->insert(harness.env.begin(), harness.env.end());
    run.mutable_files()->insert(harness.files.begin(), harness.files.end());
    run.set_api_key(key);
    run.set_timeout_s(options.timeout_s);
    *run.mutable_verification() = task.verification();
    done = (*session)->RunHarness(
        run, [&](const serve::HttpRequest& request, serve::HttpResponder& out) {
          endpoint.HandleSession(key, request, out);
        });
    if (options.cancel != nullptr && !options.cancel->Attach(nullptr)) {
      episode.failure = "cancelled";
      done = absl::CancelledError("cancelled");
    } else if (!done.ok()) {
      episode.failure = absl::StrCat("worker_lost: ", done.status().message());
    }
  }
  if (session.ok()) (*session)->Close().IgnoreError();
  if (auto record = endpoint.CloseSession(key, options.close_wait); record.ok()) {
    episode.record = *std::move(record);
  }
  if (!done.ok()) {
    episode.infrastructure = true;
    return episode;
  }
  episode.done = *std::move(done);
  Classify(episode.done, episode);
  return episode;
}

}  // namespace loom::agent
