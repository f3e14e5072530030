#pragma once
// Helpers for tests against real `loom worker` processes on 127.0.0.1.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/rpc/channel.h"
#include "loom/rpc/local_workers.h"
#include "loom/rpc/session.h"

namespace loom::testing_support {

inline std::unique_ptr<rpc::LocalWorkers> StartWorkers(int count, int max_sandboxes,
                                                       const std::string& token_file = "",
                                                       std::vector<std::string> extra = {}) {
  rpc::LocalWorkerOptions options;
  options.binary = LOOM_BINARY;
  options.count = count;
  options.max_sandboxes = max_sandboxes;
  options.auth_token_file = token_file;
  options.extra_args = std::move(extra);
  options.extra_args.insert(options.extra_args.end(), {"--memory-mb", "512", "--processes", "64"});
  auto workers = rpc::LocalWorkers::Start(options);
  EXPECT_TRUE(workers.ok()) << workers.status();
  return workers.ok() ? std::move(*workers) : nullptr;
}

inline std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

inline absl::StatusOr<std::unique_ptr<rpc::WorkerSession>> OpenOn(
    const std::string& target, const std::string& token = "",
    const v1::Environment& env = v1::Environment()) {
  v1::OpenSession open;
  *open.mutable_environment() = env;
  return rpc::WorkerSession::Open(rpc::MakeChannel({target, token, ""}), token, open, In(60));
}

// The worker's Status reply (`status_out`: the call's status).
inline v1::StatusReply WorkerStatus(const std::string& target, const std::string& token = "",
                                    grpc::Status* status_out = nullptr) {
  auto stub = v1::SandboxWorker::NewStub(rpc::MakeChannel({target, token, ""}));
  grpc::ClientContext context;
  rpc::PrepareContext(context, token, In(10));
  v1::StatusReply reply;
  grpc::Status status = stub->Status(&context, v1::StatusRequest(), &reply);
  if (status_out != nullptr) *status_out = status;
  return reply;
}

// An assistant turn of one tool call, as a scripted policy answers.
inline v1::GenerateReply ToolTurn(const std::string& name, const nlohmann::json& args) {
  v1::GenerateReply reply;
  v1::ToolCall* call = reply.mutable_assistant()->add_tool_calls();
  call->set_id("call_" + name);
  call->set_name(name);
  call->set_arguments_json(args.dump());
  return reply;
}

inline v1::ToolCall BashCall(const std::string& command) {
  v1::ToolCall call;
  call.set_id("c");
  call.set_name("bash");
  call.set_arguments_json("{\"command\": \"" + command + "\"}");
  return call;
}

// Runs a shell command line; returns its exit status and stdout.
inline int RunCommand(const std::string& command, std::string* out) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  out->clear();
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out->append(buffer, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace loom::testing_support
