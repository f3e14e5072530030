// `loom serve --model DIR [--listen HOST:PORT] [--api-key KEY] [...]`: the
// model endpoint outside training, for evaluation and for trying a
// checkpoint with an agent harness by hand. OpenAI Chat Completions at
// /v1/chat/completions (streaming or not) and /v1/models, on the rollout
// engine with continuous batching across concurrent requests; a request
// that extends an earlier conversation continues on its tokens and KV. Prints
// "loom serve: listening on http://HOST:PORT" once it accepts; SIGINT or
// SIGTERM stops it (exit 0). Without --api-key it listens on loopback only.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "cli/threads.h"
#include "loom/model/transformer.h"
#include "loom/serve/endpoint.h"
#include "loom/serve/http.h"
#include "loom/serve/turn_runner.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string listen = "127.0.0.1:8000";
  std::string api_key;
  std::string name = "loom";
  std::string effort;
  std::string effort_names;
  int64_t max_batch = 16;
  int64_t pool_tokens = 65536;
  int64_t context = 0;
  int64_t max_body_bytes = 8 << 20;
  int64_t max_held = 64;
  bool prefix_cache = true;
  uint64_t seed = 0;
  int threads = 0;
};

// SIGINT and SIGTERM write a byte here; a thread reads it and stops the
// server. (Blocking the signals would not do: LibTorch's and OpenBLAS's
// threads exist from start-up and would take them with the default action.)
int stop_pipe[2] = {-1, -1};

extern "C" void OnStopSignal(int) {
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_pipe[1], &byte, 1);
}

absl::Status InstallStopHandlers() {
  if (::pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  return absl::OkStatus();
}

void AwaitStopSignal() {
  char byte;
  while (::read(stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
}

// HOST:PORT; without an API key only a loopback host.
absl::Status ParseListen(const std::string& listen, bool keyed, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), port)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen '", listen, "': not HOST:PORT"));
  }
  *host = listen.substr(0, colon);
  if (!keyed && host->rfind("127.", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen '", listen, "': only a loopback address without --api-key"));
  }
  return absl::OkStatus();
}

absl::Status RunServe(const ServeOptions& o) {
  std::string host;
  int port = 0;
  absl::Status listen = ParseListen(o.listen, !o.api_key.empty(), &host, &port);
  if (!listen.ok()) return listen;
  auto names = serve::EffortNames::WithOverrides(o.effort_names);
  if (!names.ok()) return names.status();
  SetComputeThreads(o.threads > 0 ? o.threads
                                  : static_cast<int>(std::thread::hardware_concurrency()));
  auto tok = tokenizer::Tokenizer::FromFile(o.model + "/tokenizer.json");
  if (!tok.ok()) return tok.status();
  auto model = model::Transformer::Load(o.model, {});
  if (!model.ok()) return model.status();
  const int64_t positions = (*model)->config().max_position_embeddings;
  rollout::EngineOptions engine;
  engine.max_batch = o.max_batch;
  engine.pool_tokens = o.pool_tokens;
  engine.seed = o.seed;
  engine.prefix_cache = o.prefix_cache;
  engine.prefix_keep_released = true;  // no checkpoints to keep exact: earlier turns stay cached
  auto runner = serve::TurnRunner::Start(**model, engine);
  if (!runner.ok()) return runner.status();
  serve::EndpointOptions options;
  options.model_name = o.name;
  options.api_key = o.api_key;
  options.default_effort = o.effort;
  options.effort_names = *std::move(names);
  options.context_window = o.context > 0 ? std::min(o.context, positions) : positions;
  options.max_held = static_cast<size_t>(o.max_held);
  auto endpoint = serve::Endpoint::Create(**tok, **runner, std::move(options));
  if (!endpoint.ok()) return endpoint.status();
  serve::HttpLimits limits;
  limits.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  auto server = serve::HttpServer::Listen(
      host, port, limits,
      [e = endpoint->get()](const serve::HttpRequest& r, serve::HttpResponder& out) {
        e->Handle(r, out);
      });
  if (!server.ok()) return server.status();
  std::cout << "loom serve: listening on http://" << host << ":" << (*server)->port() << std::endl;
  absl::Status handlers = InstallStopHandlers();
  if (!handlers.ok()) return handlers;
  std::thread stopper([s = server->get()] {
    AwaitStopSignal();
    s->Stop();
  });
  (*server)->Run();
  stopper.join();
  std::cerr << "loom serve: stopped after " << (*endpoint)->turns() << " turns ("
            << (*endpoint)->format_errors() << " with a malformed completion)\n";
  return absl::OkStatus();
}

void SetupServe(CLI::App& app, Context& context) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over the OpenAI Chat Completions API (for agent harnesses)");
  cmd->add_option("--model", o->model, "Model directory")->required();
  cmd->add_option("--listen", o->listen, "HOST:PORT to listen on (port 0: any free port)");
  cmd->add_option("--api-key", o->api_key,
                  "Key every request must give (Authorization: Bearer or x-api-key); "
                  "required to listen beyond loopback");
  cmd->add_option("--name", o->name, "Model name that /v1/models lists");
  cmd->add_option("--effort", o->effort,
                  "Effort for requests that give none: none, minimal, low, medium, high, "
                  "xhigh, max or 1..100");
  cmd->add_option("--effort-names", o->effort_names,
                  "Effort names to add or change, NAME=VALUE,... (e.g. medium=60)");
  cmd->add_option("--max-batch", o->max_batch, "Turns generated at once")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pool-tokens", o->pool_tokens, "KV cache capacity in tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--context", o->context, "Context window in tokens (0: the model's)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-held", o->max_held,
                  "Conversations kept between requests with their KV, to continue on (LRU)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--prefix-cache", o->prefix_cache,
                  "Share the KV of common prompt prefixes between requests (true or false)");
  cmd->add_option("--seed", o->seed, "Sampling seed");
  cmd->add_option("--threads", o->threads, "Intra-op CPU threads (0 = all cores)");
  cmd->callback([o, &context] {
    absl::Status status = RunServe(*o);
    if (!status.ok()) std::cerr << "serve: " << status.message() << "\n";
    context.exit_code = StatusExitCode(status);
  });
}

}  // namespace

LOOM_REGISTER_COMMAND("serve", SetupServe);

}  // namespace loom::cli
