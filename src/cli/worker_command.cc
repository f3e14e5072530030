// `loom worker --listen ADDR --max-sandboxes N [--auth-token-file F]
//  [--tls-cert F --tls-key F] [--port-file F]`: serves sandboxes over gRPC
// until SIGTERM or SIGINT. Prints "loom worker listening on HOST:PORT" once
// bound (and writes the port to --port-file), so `--listen 127.0.0.1:0`
// can be used by scripts and tests.

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loom/config/files.h"
#include "loom/config/logging.h"
#include "loom/rpc/channel.h"
#include "loom/sandbox/worker_server.h"

namespace loom::cli {
namespace {

struct WorkerFlags {
  sandbox::WorkerOptions options;
  std::string auth_token_file, tls_cert_file, tls_key_file, port_file;
  int64_t memory_mb = 2048;
  int64_t cpu_s = 60;
  int64_t processes = 128;
  int64_t output_cap_kb = 64;
  int64_t sandbox_memory_mb = 2048;
  int64_t disk_mb = 2048;
  bool no_kernel_limits = false;
  bool no_health_probe = false;
};

absl::Status LoadSecrets(WorkerFlags& flags) {
  if (!flags.auth_token_file.empty()) {
    if (auto s = rpc::ReadSecretFile(flags.auth_token_file, &flags.options.auth_token); !s.ok()) {
      return s;
    }
  }
  if (flags.tls_cert_file.empty() != flags.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!flags.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(flags.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(flags.tls_key_file);
    if (!key.ok()) return key.status();
    flags.options.tls_cert_pem = *cert;
    flags.options.tls_key_pem = *key;
  }
  return absl::OkStatus();
}

int RunWorker(WorkerFlags& flags, const Context& context) {
  SetupLogging(context.log_level).IgnoreError();
  if (absl::Status s = LoadSecrets(flags); !s.ok()) {
    std::cerr << "loom worker: " << s.message() << "\n";
    return kExitUsage;
  }
  sandbox::SandboxConfig& box = flags.options.sandbox;
  box.limits.address_space = flags.memory_mb << 20;
  box.limits.cpu_seconds = flags.cpu_s;
  box.limits.processes = flags.processes;
  box.caps.memory_bytes = flags.sandbox_memory_mb << 20;
  box.caps.disk_bytes = flags.disk_mb << 20;
  box.kernel_limits = !flags.no_kernel_limits;
  box.health_probe = !flags.no_health_probe;
  box.output_cap = static_cast<size_t>(flags.output_cap_kb) << 10;
  // Block the stop signals before any thread exists; this thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto server = sandbox::WorkerServer::Start(flags.options);
  if (!server.ok()) {
    std::cerr << "loom worker: " << server.status().message() << "\n";
    return absl::IsInvalidArgument(server.status()) ? kExitUsage : kExitFailure;
  }
  std::cout << "loom worker listening on " << (*server)->address() << std::endl;
  spdlog::info("sandbox limits: {}", sandbox::KernelLimits(flags.options.sandbox));
  if (!flags.port_file.empty()) {
    absl::Status s = WriteFileAtomic(flags.port_file, std::to_string((*server)->port()) + "\n");
    if (!s.ok()) std::cerr << "loom worker: " << s.message() << "\n";
  }
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  spdlog::info("loom worker: signal {}, stopping", signal_number);
  (*server)->Shutdown();
  // Handlers may still be inside a long tool call: end the process now; the
  // sandboxes die with it (--die-with-parent) and their directory goes here.
  (*server)->RemoveSandboxDirectory();
  std::fflush(nullptr);
  std::_Exit(kExitOk);
}

void SetupWorker(CLI::App& app, Context& context) {
  auto flags = std::make_shared<WorkerFlags>();
  CLI::App* cmd = app.add_subcommand("worker", "Serve bubblewrap sandboxes over gRPC");
  sandbox::WorkerOptions& o = flags->options;
  cmd->add_option("--listen", o.listen, "host:port to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--max-sandboxes", o.max_sandboxes, "Live sandboxes at most; more are refused")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--auth-token-file", flags->auth_token_file,
                  "File with the token clients must send");
  cmd->add_option("--tls-cert", flags->tls_cert_file, "PEM certificate (serve TLS)");
  cmd->add_option("--tls-key", flags->tls_key_file, "PEM private key of --tls-cert");
  cmd->add_option("--port-file", flags->port_file, "Write the bound port here once listening");
  cmd->add_option("--task-root", o.sandbox.task_root,
                  "Directory whose subdirectories tasks may name as their environment `dir`");
  cmd->add_option("--harness-dir", o.sandbox.harness_dir,
                  "Agent harnesses (a node_modules parent), read-only at /opt/loom/harness in "
                  "every sandbox")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--sandbox-root", o.sandbox_root,
                  "Directory for sandbox work dirs (default $TMPDIR/loom-sandboxes-UID)");
  cmd->add_option("--memory-mb", flags->memory_mb, "Address-space limit per command (MiB)")
      ->check(CLI::Range(64, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--cpu-s", flags->cpu_s, "CPU-time limit per command (s)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  cmd->add_option("--processes", flags->processes, "Process limit per sandbox")
      ->check(CLI::Range(4, 100000))
      ->capture_default_str();
  cmd->add_option("--sandbox-memory-mb", flags->sandbox_memory_mb,
                  "Resident memory of a sandbox's processes together (MiB); over it, the command "
                  "is killed")
      ->check(CLI::Range(64, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--disk-mb", flags->disk_mb,
                  "Disk a sandbox's workspace, /tmp and /dev/shm may take (MiB)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--inodes", o.sandbox.caps.inodes, "Files a sandbox may hold")
      ->check(CLI::Range(100, 100000000))
      ->capture_default_str();
  cmd->add_option("--sandbox-cpus", o.sandbox.caps.cpus,
                  "CPU time a sandbox's processes may take per second together (a root worker's "
                  "cgroup quota; 0: any)")
      ->check(CLI::Range(0.0, 1024.0))
      ->capture_default_str();
  cmd->add_flag("--no-kernel-limits", flags->no_kernel_limits,
                "Cap memory and disk with the worker's own watch even where cgroups and a tmpfs "
                "per session could be had");
  cmd->add_flag("--no-health-probe", flags->no_health_probe,
                "Never probe an episode's sandbox for an environment the agent broke (no "
                "broke_environment failures; one command less per episode)");
  cmd->add_option("--idle-timeout-s", o.sessions.idle_timeout_s,
                  "Cancel a session whose client sends nothing for this long")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--open-timeout-s", o.sessions.open_timeout_s,
                  "Cancel a stream that sends no open (or attach) for this long")
      ->check(CLI::Range(0.1, 1e6))
      ->capture_default_str();
  cmd->add_option("--max-unopened", o.sessions.max_unopened,
                  "Streams that may wait for their first message at once; more are refused")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--max-session-s", o.sessions.max_session_s,
                  "Cancel any session this old, whatever deadline its client set")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--max-command-s", o.sessions.max_command_s,
                  "Cap on every timeout a client sets (setup, tool calls, episode tools)")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--max-lease-s", o.sessions.max_lease_s,
                  "Cap on how long an episode waits for a client that went away to attach again")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--max-snapshot-mb", o.sessions.max_snapshot_mb,
                  "Cap on an episode snapshot's workspace archive (MiB; 0: no snapshots)")
      ->check(CLI::Range(0, 60))  // under the 64 MiB message limit
      ->capture_default_str();
  cmd->add_flag("--allow-unauthenticated", o.allow_unauthenticated,
                "Listen beyond loopback without --auth-token-file (anyone reaching the port "
                "runs commands)");
  cmd->add_option("--output-cap-kb", flags->output_cap_kb, "Output kept per stream (KiB)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->callback([flags, &context] { context.exit_code = RunWorker(*flags, context); });
}

}  // namespace

LOOM_REGISTER_COMMAND("worker", SetupWorker);

}  // namespace loom::cli
