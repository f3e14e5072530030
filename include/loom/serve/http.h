#pragma once
// A small HTTP/1.1 server for loom's model endpoint (`loom serve`, and the
// endpoint a worker opens inside each harness's sandbox). It reads requests with a Content-Length
// or chunked body under fixed limits, hands each to one handler, and writes a whole response or a
// server-sent event stream (chunked). Keep-alive is supported; HTTP/1.0, pipelining and upgrades
// are not needed by any client loom serves and are refused or ignored.
//
// Malformed input never reaches the handler: the server answers 400 (bad
// request line, header or chunk), 413 (body over the limit), 431 (head over
// the limit), 501 (a transfer coding other than chunked) or 505 (a version
// other than HTTP/1.1), and closes the connection.
//
// Threads: Run() accepts on the calling thread and serves each connection on
// its own thread (at most `max_connections`; more get 503). The handler runs
// on connection threads concurrently. Stop() is thread-safe and makes Run()
// return once every connection thread has ended.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::serve {

struct HttpLimits {
  size_t max_head_bytes = 64 << 10;  // request line and headers
  size_t max_body_bytes = 8 << 20;   // a request body, after de-chunking
  int read_timeout_ms = 60000;       // a client idle this long mid-request (or between
                                     // keep-alive requests) is disconnected
  int max_connections = 64;          // open at once; more get 503
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target up to '?', e.g. "/v1/messages"
  std::string query;   // after '?', without it
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;

  // The first header named `name` (lower case), or null.
  const std::string* Header(std::string_view name) const;
};

// The head of a request: request line and headers, through the blank line
// (CRLF CRLF, which `head` includes). INVALID_ARGUMENT with the reason for a
// malformed head, UNIMPLEMENTED for a transfer coding other than chunked or
// a version other than HTTP/1.1. Sets `body_length` to the Content-Length (0
// when absent) or -1 for a chunked body.
absl::StatusOr<HttpRequest> ParseRequestHead(std::string_view head, int64_t* body_length);

// Decodes a complete chunked body (`data` may hold bytes after its end, which
// are left). Returns the body and sets `consumed`; UNAVAILABLE when `data`
// ends before the last chunk (read more), INVALID_ARGUMENT when malformed,
// RESOURCE_EXHAUSTED over `max_bytes`.
absl::StatusOr<std::string> DecodeChunkedBody(std::string_view data, size_t max_bytes,
                                              size_t* consumed);

// The handler's side of one response. A response is either Send() once, or
// BeginEvents(), any number of Event() and then EndEvents(). Every call
// returns false once the client has gone; the handler should then stop.
// SocketResponder writes to the client's socket; a relay (harness_relay.h)
// carries the same calls over a worker's session stream.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual bool Send(int status, std::string_view content_type, std::string_view body) = 0;
  virtual bool BeginEvents() = 0;
  // One server-sent event; `text` is written as is (e.g. "data: {...}\n\n").
  virtual bool Event(std::string_view text) = 0;
  virtual bool EndEvents() = 0;
  // True when the client has closed its side or the connection failed: a
  // handler generating for a while checks it to cancel work nobody reads.
  virtual bool ClientGone() = 0;
};

class SocketResponder final : public HttpResponder {
 public:
  explicit SocketResponder(int fd) : fd_(fd) {}

  bool Send(int status, std::string_view content_type, std::string_view body) override {
    return SendWith(status, content_type, body, {});
  }
  // Send() with more header fields (e.g. Connection: close).
  bool SendWith(int status, std::string_view content_type, std::string_view body,
                const std::vector<std::pair<std::string, std::string>>& headers);
  bool BeginEvents() override;
  bool Event(std::string_view text) override;
  bool EndEvents() override;
  bool ClientGone() override;
  bool responded() const { return responded_; }

 private:
  bool Write(std::string_view bytes);

  int fd_;
  bool responded_ = false;
  bool gone_ = false;
};

// A socket listening on `host:port` (port 0 picks a free one), in the
// calling thread's network namespace. INVALID_ARGUMENT for a host that is
// not an IPv4 address; UNAVAILABLE when the address cannot be bound.
absl::StatusOr<int> ListenSocket(const std::string& host, int port);

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

class HttpServer {
 public:
  // Binds `host:port` (ListenSocket).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Listen(const std::string& host, int port,
                                                            const HttpLimits& limits,
                                                            HttpHandler handler);
  // Serves on `listen_fd`, a listening socket made elsewhere (e.g. inside a
  // sandbox's network namespace); the server owns and closes it.
  static std::unique_ptr<HttpServer> Adopt(int listen_fd, const HttpLimits& limits,
                                           HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Accepts until Stop(); returns after every connection has ended.
  void Run();
  void Stop();

 private:
  HttpServer(int listen_fd, int port, const HttpLimits& limits, HttpHandler handler);
  void Serve(int fd);

  int listen_fd_;
  int port_;
  HttpLimits limits_;
  HttpHandler handler_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable all_closed_;
  std::set<int> open_;  // connection sockets, each served by a detached thread; guarded by mu_
};

}  // namespace loom::serve
