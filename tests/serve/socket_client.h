#pragma once
// SocketClient: a plain HTTP/1.1 client over a TCP socket to 127.0.0.1, for
// tests that must control every byte (malformed requests, hanging up
// mid-stream). Responses are read with Content-Length or chunked bodies.
// Every read gives up after a timeout, so a test fails rather than hangs.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace loom::testing {

struct HttpReply {
  int status = 0;                                            // 0: no complete response came
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;

  std::string header(const std::string& name) const {
    for (const auto& [key, value] : headers) {
      if (key == name) return value;
    }
    return "";
  }
};

class SocketClient {
 public:
  explicit SocketClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~SocketClient() { Close(); }
  SocketClient(SocketClient&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  SocketClient(const SocketClient&) = delete;
  SocketClient& operator=(const SocketClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void Send(const std::string& bytes) {
    size_t at = 0;
    while (fd_ >= 0 && at < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
  }

  // A POST with a JSON body and optional extra header lines ("Name: value").
  void Post(const std::string& path, const std::string& body,
            const std::vector<std::string>& headers = {}) {
    std::string head =
        "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (const std::string& h : headers) head += h + "\r\n";
    Send(head + "\r\n" + body);
  }

  // The status line and headers; the body is left to ReadBody / ReadChunk.
  HttpReply ReadHead(int timeout_ms = 60000) {
    HttpReply reply;
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(timeout_ms)) return reply;
    }
    std::string head = buffer_.substr(0, end + 2);
    buffer_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() > 12) reply.status = std::atoi(status_line.c_str() + 9);
    for (size_t at = line_end + 2; at < head.size();) {
      const size_t next = head.find("\r\n", at);
      const std::string line = head.substr(at, next - at);
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      reply.headers.emplace_back(name, value);
      at = next + 2;
    }
    return reply;
  }

  // One chunk of a chunked body ("" for the last one, or when it never came).
  std::string ReadChunk(int timeout_ms = 60000) {
    size_t eol;
    while ((eol = buffer_.find("\r\n")) == std::string::npos) {
      if (!Fill(timeout_ms)) return "";
    }
    const size_t size = std::strtoul(buffer_.substr(0, eol).c_str(), nullptr, 16);
    while (buffer_.size() < eol + 2 + size + 2) {
      if (!Fill(timeout_ms)) return "";
    }
    std::string chunk = buffer_.substr(eol + 2, size);
    buffer_.erase(0, eol + 2 + size + 2);
    return chunk;
  }

  HttpReply ReadResponse(int timeout_ms = 60000) {
    HttpReply reply = ReadHead(timeout_ms);
    if (reply.status == 0) return reply;
    if (reply.header("transfer-encoding") == "chunked") {
      for (std::string chunk; !(chunk = ReadChunk(timeout_ms)).empty();) reply.body += chunk;
      return reply;
    }
    const size_t length = std::strtoul(reply.header("content-length").c_str(), nullptr, 10);
    while (buffer_.size() < length) {
      if (!Fill(timeout_ms)) break;
    }
    reply.body = buffer_.substr(0, length);
    buffer_.erase(0, std::min(length, buffer_.size()));
    return reply;
  }

  // True when the server closes the connection within the timeout.
  bool Closed(int timeout_ms = 2000) {
    while (Fill(timeout_ms)) buffer_.clear();
    return eof_;
  }

 private:
  bool Fill(int timeout_ms) {
    if (fd_ < 0 || eof_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool eof_ = false;
  std::string buffer_;
};

}  // namespace loom::testing
