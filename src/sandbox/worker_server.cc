#include "loom/sandbox/worker_server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "loom/config/files.h"
#include "sandbox/sandbox_service.h"

namespace loom::sandbox {
namespace fs = std::filesystem;
namespace {

std::string DefaultSandboxRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/loom-sandboxes");
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
  const std::string base =
      options.sandbox_root.empty() ? DefaultSandboxRoot() : options.sandbox_root;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", base, ": ", ec.message()));
  fs::permissions(base, fs::perms::all | fs::perms::sticky_bit, ec);  // like /tmp
  CleanLeftovers(base);
  SandboxConfig config = options.sandbox;
  config.root = absl::StrCat(base, "/w", getpid());
  server->sandbox_dir_ = config.root;
  fs::create_directories(config.root, ec);
  fs::permissions(config.root,
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec, ec);
  if (absl::Status s = CheckBubblewrap(config); !s.ok()) return s;

  server->service_ =
      std::make_unique<SandboxService>(config, options.max_sandboxes, options.auth_token, "");
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
  if (!sandbox_dir_.empty()) RemoveTree(sandbox_dir_).IgnoreError();
}

void WorkerServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

void WorkerServer::Shutdown() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

}  // namespace loom::sandbox
