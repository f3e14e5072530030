#include "loom/serve/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::serve {
namespace {

constexpr std::string_view kCrlf = "\r\n";

bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool AllOf(std::string_view s, int (*is)(int)) {
  return std::all_of(s.begin(), s.end(),
                     [is](char c) { return is(static_cast<unsigned char>(c)); });
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar);
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

absl::Status ParseRequestLine(std::string_view line, HttpRequest& request) {
  const size_t a = line.find(' ');
  const size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos || line.find(' ', b + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError("the request line is not METHOD TARGET VERSION");
  }
  std::string_view method = line.substr(0, a);
  std::string_view target = line.substr(a + 1, b - a - 1);
  std::string_view version = line.substr(b + 1);
  if (!IsToken(method)) return absl::InvalidArgumentError("the method is not a token");
  if (target.empty() || target.front() != '/') {
    return absl::InvalidArgumentError("the target is not an absolute path");
  }
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("the target holds a control character");
    }
  }
  if (version != "HTTP/1.1") {
    return absl::UnimplementedError(absl::StrCat("HTTP version '", std::string(version), "'"));
  }
  request.method = std::string(method);
  const size_t q = target.find('?');
  request.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) request.query = std::string(target.substr(q + 1));
  return absl::OkStatus();
}

absl::Status ParseHeaderLine(std::string_view line, HttpRequest& request) {
  if (line.front() == ' ' || line.front() == '\t') {
    return absl::InvalidArgumentError("a folded header line");
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
    return absl::InvalidArgumentError("a header line is not NAME: VALUE");
  }
  std::string_view value = TrimSpaces(line.substr(colon + 1));
  for (char c : value) {
    if (c == '\0' || c == '\r' || c == '\n') {
      return absl::InvalidArgumentError("a header value holds a control character");
    }
  }
  request.headers.emplace_back(absl::AsciiStrToLower(std::string(line.substr(0, colon))),
                               std::string(value));
  return absl::OkStatus();
}

// Content-Length or chunked, from the parsed headers.
absl::StatusOr<int64_t> BodyLength(const HttpRequest& request) {
  std::optional<int64_t> length;
  bool chunked = false;
  for (const auto& [name, value] : request.headers) {
    if (name == "content-length") {
      int64_t n = 0;
      if (value.empty() || value.size() > 15 || !AllOf(value, ::isdigit) ||
          !absl::SimpleAtoi(value, &n)) {
        return absl::InvalidArgumentError("Content-Length is not a number");
      }
      if (length && *length != n) return absl::InvalidArgumentError("two Content-Lengths");
      length = n;
    } else if (name == "transfer-encoding") {
      if (!absl::EqualsIgnoreCase(value, "chunked")) {
        return absl::UnimplementedError(absl::StrCat("Transfer-Encoding '", value, "'"));
      }
      chunked = true;
    }
  }
  if (chunked && length) {
    return absl::InvalidArgumentError("both Content-Length and Transfer-Encoding");
  }
  return chunked ? -1 : length.value_or(0);
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return &value;
  }
  return nullptr;
}

absl::StatusOr<HttpRequest> ParseRequestHead(std::string_view head, int64_t* body_length) {
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") {
    return absl::InvalidArgumentError("the head does not end with a blank line");
  }
  head.remove_suffix(2);  // every line now ends with CRLF
  HttpRequest request;
  bool first = true;
  while (!head.empty()) {
    const size_t end = head.find(kCrlf);
    std::string_view line = head.substr(0, end);
    head.remove_prefix(end + 2);
    if (line.find('\n') != std::string_view::npos || line.find('\r') != std::string_view::npos) {
      return absl::InvalidArgumentError("a bare CR or LF in the head");
    }
    if (line.empty()) return absl::InvalidArgumentError("an empty line inside the head");
    absl::Status status = first ? ParseRequestLine(line, request) : ParseHeaderLine(line, request);
    if (!status.ok()) return status;
    first = false;
  }
  if (first) return absl::InvalidArgumentError("no request line");
  auto length = BodyLength(request);
  if (!length.ok()) return length.status();
  *body_length = *length;
  return request;
}

absl::StatusOr<std::string> DecodeChunkedBody(std::string_view data, size_t max_bytes,
                                              size_t* consumed) {
  std::string body;
  size_t at = 0;
  while (true) {
    const size_t eol = data.find(kCrlf, at);
    if (eol == std::string_view::npos) {
      if (data.size() - at > 64) return absl::InvalidArgumentError("a chunk size line too long");
      return absl::UnavailableError("the chunked body is incomplete");
    }
    std::string_view size_text = data.substr(at, eol - at);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions are ignored
    size_text = TrimSpaces(size_text);
    uint64_t size = 0;
    if (size_text.empty() || size_text.size() > 15 || !AllOf(size_text, ::isxdigit) ||
        !absl::SimpleHexAtoi(absl::string_view(size_text.data(), size_text.size()), &size)) {
      return absl::InvalidArgumentError("a chunk size is not hexadecimal");
    }
    at = eol + 2;
    if (size == 0) break;
    if (body.size() + size > max_bytes) {
      return absl::ResourceExhaustedError("the body is over the limit");
    }
    if (data.size() < at + size + 2) return absl::UnavailableError("the chunk is incomplete");
    if (data.substr(at + size, 2) != kCrlf) {
      return absl::InvalidArgumentError("a chunk does not end with CRLF");
    }
    body.append(data.substr(at, size));
    at += size + 2;
  }
  while (true) {  // trailer fields, then the blank line
    const size_t eol = data.find(kCrlf, at);
    if (eol == std::string_view::npos) return absl::UnavailableError("the trailer is incomplete");
    const bool blank = eol == at;
    at = eol + 2;
    if (blank) break;
  }
  *consumed = at;
  return body;
}

bool SocketResponder::Write(std::string_view bytes) {
  while (!gone_ && !bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      gone_ = true;
      break;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return !gone_;
}

bool SocketResponder::SendWith(int status, std::string_view content_type, std::string_view body,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
  responded_ = true;
  std::string head = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\n",
                                  "Content-Type: ", std::string(content_type), "\r\n",
                                  "Content-Length: ", body.size(), "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  head += "\r\n";
  return Write(head) && Write(body);
}

bool SocketResponder::BeginEvents() {
  responded_ = true;
  return Write(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\n\r\n");
}

bool SocketResponder::Event(std::string_view text) {
  if (text.empty()) return !gone_;  // an empty chunk would end the stream
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", text.size());
  return Write(size) && Write(text) && Write(kCrlf);
}

bool SocketResponder::EndEvents() { return Write("0\r\n\r\n"); }

bool SocketResponder::ClientGone() {
  if (gone_) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) gone_ = true;
  return gone_;
}

absl::StatusOr<int> ListenSocket(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (port < 0 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, ":", port, "' is not an IPv4 address and port"));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", why));
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Listen(const std::string& host, int port,
                                                               const HttpLimits& limits,
                                                               HttpHandler handler) {
  absl::StatusOr<int> fd = ListenSocket(host, port);
  if (!fd.ok()) return fd.status();
  return Adopt(*fd, limits, std::move(handler));
}

std::unique_ptr<HttpServer> HttpServer::Adopt(int listen_fd, const HttpLimits& limits,
                                              HttpHandler handler) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<HttpServer>(
      new HttpServer(listen_fd, ntohs(addr.sin_port), limits, std::move(handler)));
}

HttpServer::HttpServer(int listen_fd, int port, const HttpLimits& limits, HttpHandler handler)
    : listen_fd_(listen_fd), port_(port), limits_(limits), handler_(std::move(handler)) {}

HttpServer::~HttpServer() {
  Stop();
  std::unique_lock<std::mutex> lock(mu_);
  all_closed_.wait(lock, [&] { return open_.empty(); });
  ::close(listen_fd_);
}

void HttpServer::Stop() {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : open_) ::shutdown(fd, SHUT_RDWR);  // wakes their reads and writes
}

void HttpServer::Run() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(open_.size()) >= limits_.max_connections || stopping_) {
      SocketResponder(fd).SendWith(503, "text/plain", "too many connections\n",
                                   {{"Connection", "close"}});
      ::close(fd);
      continue;
    }
    open_.insert(fd);
    std::thread([this, fd] { Serve(fd); }).detach();
  }
  std::unique_lock<std::mutex> lock(mu_);
  all_closed_.wait(lock, [&] { return open_.empty(); });
}

namespace {

// Reads more bytes into `buffer`; false on end of stream, error or timeout.
bool ReadMore(int fd, std::string& buffer, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  char chunk[16384];
  ssize_t n;
  do {
    n = ::recv(fd, chunk, sizeof(chunk), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  buffer.append(chunk, static_cast<size_t>(n));
  return true;
}

void SendError(SocketResponder& out, int status, absl::string_view message) {
  out.SendWith(status, "text/plain", absl::StrCat(message, "\n"), {{"Connection", "close"}});
}

int StatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnimplemented:
      return absl::StrContains(status.message(), "HTTP version") ? 505 : 501;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    default:
      return 400;
  }
}

// Reads one request from `buffer` and the socket; nullopt when the
// connection should close (after answering an error, if there was one).
std::optional<HttpRequest> ReadRequest(int fd, std::string& buffer, const HttpLimits& limits) {
  SocketResponder out(fd);
  size_t head_end;
  while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (buffer.size() > limits.max_head_bytes) {
      SendError(out, 431, "the request head is over the limit");
      return std::nullopt;
    }
    if (!ReadMore(fd, buffer, limits.read_timeout_ms)) return std::nullopt;
  }
  if (head_end + 4 > limits.max_head_bytes) {
    SendError(out, 431, "the request head is over the limit");
    return std::nullopt;
  }
  int64_t length = 0;
  auto request = ParseRequestHead(std::string_view(buffer).substr(0, head_end + 4), &length);
  if (!request.ok()) {
    SendError(out, StatusFor(request.status()), request.status().message());
    return std::nullopt;
  }
  buffer.erase(0, head_end + 4);
  if (length > static_cast<int64_t>(limits.max_body_bytes)) {
    SendError(out, 413,
              absl::StrCat("the body is over the limit of ", limits.max_body_bytes, " bytes"));
    return std::nullopt;
  }
  if (length >= 0) {
    while (buffer.size() < static_cast<size_t>(length)) {
      if (!ReadMore(fd, buffer, limits.read_timeout_ms)) return std::nullopt;
    }
    request->body = buffer.substr(0, length);
    buffer.erase(0, length);
    return *std::move(request);
  }
  while (true) {
    size_t consumed = 0;
    auto body = DecodeChunkedBody(buffer, limits.max_body_bytes, &consumed);
    if (body.ok()) {
      request->body = *std::move(body);
      buffer.erase(0, consumed);
      return *std::move(request);
    }
    if (body.status().code() != absl::StatusCode::kUnavailable) {
      SendError(out, StatusFor(body.status()), body.status().message());
      return std::nullopt;
    }
    if (buffer.size() > limits.max_body_bytes + (64 << 10) ||
        !ReadMore(fd, buffer, limits.read_timeout_ms)) {
      return std::nullopt;
    }
  }
}

}  // namespace

void HttpServer::Serve(int fd) {
  std::string buffer;
  while (!stopping_) {
    std::optional<HttpRequest> request = ReadRequest(fd, buffer, limits_);
    if (!request) break;
    SocketResponder out(fd);
    handler_(*request, out);
    if (!out.responded()) SendError(out, 500, "the handler wrote no response");
    const std::string* connection = request->Header("connection");
    if (out.ClientGone() || (connection && absl::EqualsIgnoreCase(*connection, "close"))) break;
  }
  // The client gets the end of the response before the close: closing with
  // unread request bytes would send a reset, which can discard the answer.
  ::shutdown(fd, SHUT_WR);
  std::string unread;
  for (int i = 0; i < 10 && ReadMore(fd, unread, 50) && unread.size() < (1 << 20); ++i) {
  }
  std::lock_guard<std::mutex> lock(mu_);  // closed under the lock: accept may reuse the number
  open_.erase(fd);
  ::close(fd);
  if (open_.empty()) all_closed_.notify_all();
}

}  // namespace loom::serve
