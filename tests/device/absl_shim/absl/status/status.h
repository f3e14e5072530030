#pragma once
// A minimal stand-in for absl::Status, only for tests/device: the device
// machine has LibTorch but no Abseil. It covers exactly what src/model and
// src/config/files.cc use; the real build always uses Abseil.

#include <ostream>
#include <string>
#include <string_view>

namespace absl {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string_view message) : code_(code), message_(message) {}
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  std::string_view message() const { return message_; }
  std::string ToString() const {
    return ok() ? "OK" : "code " + std::to_string(static_cast<int>(code_)) + ": " + message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

inline Status OkStatus() { return Status(); }
#define LOOM_SHIM_ERROR(Name, Code) \
  inline Status Name(std::string_view m) { return Status(StatusCode::Code, m); }
LOOM_SHIM_ERROR(InvalidArgumentError, kInvalidArgument)
LOOM_SHIM_ERROR(NotFoundError, kNotFound)
LOOM_SHIM_ERROR(InternalError, kInternal)
LOOM_SHIM_ERROR(ResourceExhaustedError, kResourceExhausted)
LOOM_SHIM_ERROR(FailedPreconditionError, kFailedPrecondition)
LOOM_SHIM_ERROR(UnavailableError, kUnavailable)
LOOM_SHIM_ERROR(DataLossError, kDataLoss)
LOOM_SHIM_ERROR(UnknownError, kUnknown)
#undef LOOM_SHIM_ERROR

}  // namespace absl
