#include "loom/sandbox/worker_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/config/files.h"
#include "sandbox/sandbox_service.h"

namespace loom::sandbox {
namespace fs = std::filesystem;
namespace {

std::string DefaultSandboxRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/loom-sandboxes-", geteuid());
}

// Creates `dir` (mode 0711: sandbox uids may pass, nobody may list or
// write) or checks the one there without following links: a directory the
// worker owns that only it can write. In a world-writable parent such as
// /tmp, anyone could otherwise have put a link or their own directory there.
absl::Status PrepareRoot(const std::string& dir) {
  if (mkdir(dir.c_str(), 0711) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", dir, ": ", std::strerror(errno)));
  }
  std::string problem;
  if (!S_ISDIR(st.st_mode)) {
    problem = "is not a directory (a link?)";
  } else if (st.st_uid != geteuid()) {
    problem = absl::StrCat("belongs to uid ", st.st_uid, ", not to the worker's ", geteuid());
  } else if (chmod(dir.c_str(), 0711) != 0) {
    problem = absl::StrCat("cannot be made private: ", std::strerror(errno));
  }
  if (problem.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("sandbox root ", dir, " ", problem, "; choose another --sandbox-root"));
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "[::1]" || host == "::1" ||
         absl::StartsWith(host, "127.") || absl::StartsWith(host, "unix:");
}

std::shared_ptr<grpc::ServerCredentials> Credentials(const WorkerOptions& options) {
  if (options.tls_cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
  return grpc::SslServerCredentials(ssl);
}

std::string HostOf(const std::string& listen) {
  size_t colon = listen.rfind(':');
  return colon == std::string::npos ? listen : listen.substr(0, colon);
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  if (options.max_sandboxes < 1) {
    return absl::InvalidArgumentError("--max-sandboxes must be at least 1");
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  server->options_ = options;
  if (!options.sandbox.harness_dir.empty()) {  // bubblewrap binds absolute paths
    server->options_.sandbox.harness_dir = fs::absolute(options.sandbox.harness_dir).string();
  }
  const std::string base =
      options.sandbox_root.empty() ? DefaultSandboxRoot() : options.sandbox_root;
  const std::string host = HostOf(options.listen);
  if (!IsLoopback(host) && options.auth_token.empty()) {
    if (!options.allow_unauthenticated) {
      return absl::InvalidArgumentError(absl::StrCat(
          "listening on ", options.listen, " without --auth-token-file lets anyone who reaches ",
          "the port run commands here; add a token, listen on 127.0.0.1, or pass ",
          "--allow-unauthenticated"));
    }
    spdlog::warn("UNAUTHENTICATED worker on {}: anyone who reaches this port runs commands here",
                 options.listen);
  } else if (!IsLoopback(host) && options.tls_cert_pem.empty()) {
    spdlog::warn("worker on {} without TLS: the auth token crosses the network in clear",
                 options.listen);
  }
  std::error_code ec;
  fs::create_directories(fs::path(base).parent_path(), ec);
  if (absl::Status s = PrepareRoot(base); !s.ok()) return s;
  CleanLeftovers(base);
  SandboxConfig config = server->options_.sandbox;
  config.root = absl::StrCat(base, "/w", getpid());
  server->sandbox_dir_ = config.root;
  RemoveWorkerDirectory(config.root).IgnoreError();  // a dead worker's, with the same pid
  if (absl::Status s = PrepareRoot(config.root); !s.ok()) return s;
  if (absl::Status s = CheckBubblewrap(config); !s.ok()) return s;

  server->service_ = std::make_unique<SandboxService>(config, options.max_sandboxes,
                                                      options.auth_token, "", options.sessions);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, Credentials(options), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(64 << 20);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  server->address_ = absl::StrCat(HostOf(options.listen), ":", server->port_);
  server->service_->set_name(server->address_);
  return server;
}

WorkerServer::~WorkerServer() {
  Shutdown();
  server_.reset();  // waits for the session handlers, which delete their sandboxes
  RemoveSandboxDirectory();
}

void WorkerServer::RemoveSandboxDirectory() {
  if (!sandbox_dir_.empty()) RemoveWorkerDirectory(sandbox_dir_).IgnoreError();
}

void WorkerServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

void WorkerServer::Shutdown() {
  if (service_ != nullptr) service_->StopLeases();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

}  // namespace loom::sandbox
