#pragma once
// Client channels to sandbox workers. A target is anything gRPC dials:
// "host:port", or "dns:///name:port" (every address the name resolves to,
// spread round-robin: how a Kubernetes headless service or any DNS name
// scales out workers). Auth is a bearer token sent as call metadata; TLS is
// used when a CA certificate is given.

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace loom::rpc {

struct ChannelOptions {
  std::string target;
  std::string auth_token;  // "" = none
  std::string tls_ca_pem;  // "" = plaintext
};

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelOptions& options);

// Prepares a context: the bearer token (when set) and an absolute deadline.
void PrepareContext(grpc::ClientContext& context, const std::string& auth_token,
                    std::chrono::system_clock::time_point deadline);

// gRPC status to absl::Status (same canonical codes), prefixed with `what`.
absl::Status FromGrpc(const grpc::Status& status, const std::string& what);

// Reads a token or PEM file, trimming trailing whitespace; errors name the file.
absl::Status ReadSecretFile(const std::string& path, std::string* out);

}  // namespace loom::rpc
