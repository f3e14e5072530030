#include "loom/rpc/sandbox_clients.h"

#include "loom/config/files.h"
#include "loom/rpc/channel.h"

namespace loom::rpc {

absl::StatusOr<SandboxClients> StartSandboxClients(const config::SandboxSection& section,
                                                   const std::string& loom_binary) {
  if (section.workers.empty() && section.local == 0) {
    return absl::FailedPreconditionError(
        "sandbox: set `workers` or `local` to run sandbox episodes");
  }
  PoolOptions options;
  if (!section.auth_token_file.empty()) {
    if (absl::Status s = ReadSecretFile(section.auth_token_file, &options.auth_token); !s.ok()) {
      return s;
    }
  }
  if (!section.tls_ca_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFile(section.tls_ca_file);
    if (!pem.ok()) return pem.status();
    options.tls_ca_pem = *pem;
  }
  options.max_attempts = section.max_attempts;
  options.episode_timeout_s = section.episode_timeout_s;
  SandboxClients clients;
  if (section.local > 0) {
    LocalWorkerOptions local;
    local.binary = loom_binary;
    local.count = section.local;
    local.max_sandboxes = section.local_max_sandboxes;
    local.auth_token_file = section.auth_token_file;
    if (!section.harness_dir.empty()) local.extra_args = {"--harness-dir", section.harness_dir};
    absl::StatusOr<std::unique_ptr<LocalWorkers>> started = LocalWorkers::Start(local);
    if (!started.ok()) return started.status();
    clients.local = *std::move(started);
    options.targets = clients.local->targets();
  } else {
    options.targets = section.workers;
    options.lease_s = section.lease_s;  // local workers do not outlive the trainer
  }
  clients.pool = std::make_unique<WorkerPool>(std::move(options));
  return clients;
}

v1::ScaffoldOptions ScaffoldOptionsFrom(const config::SandboxSection& section) {
  v1::ScaffoldOptions options;
  options.set_max_steps(section.max_steps);
  options.set_max_time_s(section.max_time_s);
  options.set_tool_timeout_s(section.tool_timeout_s);
  options.set_system_prompt(section.system_prompt);
  options.set_hide_tool_schemas(!section.tool_schemas);
  return options;
}

}  // namespace loom::rpc
