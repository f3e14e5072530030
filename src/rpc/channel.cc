#include "loom/rpc/channel.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/config/files.h"

namespace loom::rpc {

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  if (absl::StartsWith(options.target, "dns:")) args.SetLoadBalancingPolicyName("round_robin");
  args.SetMaxReceiveMessageSize(64 << 20);
  // Short reconnect backoff: a restarted worker is found again quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_ca_pem.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(options.target, creds, args);
}

void PrepareContext(grpc::ClientContext& context, const std::string& auth_token,
                    std::chrono::system_clock::time_point deadline) {
  if (!auth_token.empty()) context.AddMetadata("authorization", "Bearer " + auth_token);
  context.set_deadline(deadline);
}

absl::Status FromGrpc(const grpc::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

absl::Status ReadSecretFile(const std::string& path, std::string* out) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  *out = std::string(absl::StripTrailingAsciiWhitespace(*text));
  if (out->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": file is empty"));
  return absl::OkStatus();
}

}  // namespace loom::rpc
