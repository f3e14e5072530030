// The HTTP/1.1 server of the model endpoint: the request-head and chunked-body
// parsers on well-formed and malformed input, and a real server on 127.0.0.1
// driven over a socket (keep-alive, chunked bodies, limits, event streams).

#include <gtest/gtest.h>

#include <thread>

#include "loom/serve/http.h"
#include "serve/socket_client.h"

namespace loom::serve {
namespace {

using testing::SocketClient;

HttpRequest Head(std::string_view text, int64_t* length) {
  auto request = ParseRequestHead(text, length);
  EXPECT_TRUE(request.ok()) << request.status();
  return request.ok() ? *request : HttpRequest{};
}

TEST(HttpParseTest, ReadsTheRequestLineAndHeaders) {
  int64_t length = -2;
  HttpRequest r = Head(
      "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n"
      "X-Api-Key:  secret \r\n\r\n",
      &length);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/messages");
  EXPECT_EQ(r.query, "beta=true");
  EXPECT_EQ(length, 12);
  ASSERT_NE(r.Header("x-api-key"), nullptr);
  EXPECT_EQ(*r.Header("x-api-key"), "secret");
  EXPECT_EQ(r.Header("authorization"), nullptr);
  Head("GET /v1/models HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", &length);
  EXPECT_EQ(length, -1);
  Head("GET / HTTP/1.1\r\n\r\n", &length);
  EXPECT_EQ(length, 0);
}

TEST(HttpParseTest, MalformedHeadsAreRefusedWithTheReason) {
  struct Case {
    std::string head;
    absl::StatusCode code;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"GET /\r\n\r\n", absl::StatusCode::kInvalidArgument, "METHOD TARGET VERSION"},
      {"GET  / HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument, "METHOD TARGET VERSION"},
      {"GET x HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument, "not an absolute path"},
      {"G(T / HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument, "method"},
      {"GET http://x/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument, "absolute path"},
      {"GET / HTTP/1.0\r\n\r\n", absl::StatusCode::kUnimplemented, "HTTP version"},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", absl::StatusCode::kInvalidArgument, "NAME: VALUE"},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", absl::StatusCode::kInvalidArgument, "folded"},
      {"GET / HTTP/1.1\nA: b\r\n\r\n", absl::StatusCode::kInvalidArgument, "bare CR or LF"},
      {"GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", absl::StatusCode::kInvalidArgument,
       "Content-Length"},
      {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", absl::StatusCode::kInvalidArgument,
       "Content-Length"},
      {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       absl::StatusCode::kInvalidArgument, "two Content-Lengths"},
      {"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       absl::StatusCode::kInvalidArgument, "both"},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", absl::StatusCode::kUnimplemented,
       "gzip"},
      {"GET / HTTP/1.1\r\n", absl::StatusCode::kInvalidArgument, "blank line"},
  };
  for (const Case& c : cases) {
    int64_t length = 0;
    auto r = ParseRequestHead(c.head, &length);
    ASSERT_FALSE(r.ok()) << c.head;
    EXPECT_EQ(r.status().code(), c.code) << c.head;
    EXPECT_NE(r.status().message().find(c.reason), std::string::npos) << r.status();
  }
}

TEST(HttpParseTest, ChunkedBodiesDecodeAndTheirFaultsAreNamed) {
  size_t consumed = 0;
  const std::string wire = "4\r\nWiki\r\n6;ext=1\r\npedia \r\n0\r\nTrailer: x\r\n\r\nNEXT";
  auto body = DecodeChunkedBody(wire, 1000, &consumed);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "Wikipedia ");
  EXPECT_EQ(wire.substr(consumed), "NEXT");
  for (size_t cut = 0; cut + 4 < wire.size(); ++cut) {  // every prefix asks for more
    auto partial = DecodeChunkedBody(wire.substr(0, cut), 1000, &consumed);
    EXPECT_EQ(partial.status().code(), absl::StatusCode::kUnavailable) << cut;
  }
  EXPECT_EQ(DecodeChunkedBody("zz\r\n", 1000, &consumed).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeChunkedBody("4\r\nWikiXX0\r\n\r\n", 1000, &consumed).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeChunkedBody("4\r\nWiki\r\n0\r\n\r\n", 3, &consumed).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DecodeChunkedBody("fffffffffffffffff\r\n", 3, &consumed).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A server on a free loopback port whose handler echoes the request, or
// streams three events for /events.
class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpLimits limits;
    limits.max_head_bytes = 1024;
    limits.max_body_bytes = 100;
    limits.read_timeout_ms = 2000;
    auto server =
        HttpServer::Listen("127.0.0.1", 0, limits, [](const HttpRequest& r, HttpResponder& out) {
          if (r.path == "/events") {
            out.BeginEvents();
            for (int i = 0; i < 3; ++i) {
              out.Event("data: " + std::to_string(i) + "\n\n");
            }
            out.EndEvents();
            return;
          }
          out.Send(200, "text/plain", r.method + " " + r.path + " " + r.body);
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    server_->Stop();
    thread_.join();
  }
  SocketClient Connect() { return SocketClient(server_->port()); }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  SocketClient client = Connect();
  for (const std::string body : {"one", "two"}) {
    client.Send("POST /echo HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n\r\n" + body);
    auto response = client.ReadResponse();
    EXPECT_EQ(response.status, 200);
    EXPECT_EQ(response.body, "POST /echo " + body);
  }
  client.Send("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  auto chunked = client.ReadResponse();
  EXPECT_EQ(chunked.body, "POST /c abc");
}

TEST_F(HttpServerTest, EventStreamsArriveAsChunks) {
  SocketClient client = Connect();
  client.Send("GET /events HTTP/1.1\r\n\r\n");
  auto response = client.ReadResponse();
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.header("content-type"), "text/event-stream");
  EXPECT_EQ(response.body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
}

TEST_F(HttpServerTest, LimitsAndMalformedRequestsGetTheirStatusAndClose) {
  struct Case {
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n" + std::string(101, 'a') +
           "\r\n0\r\n\r\n",
       413},
  };
  for (const Case& c : cases) {
    SocketClient client = Connect();
    client.Send(c.request);
    auto response = client.ReadResponse();
    EXPECT_EQ(response.status, c.status) << c.request.substr(0, 60);
    EXPECT_TRUE(client.Closed()) << c.request.substr(0, 60);
  }
  SocketClient after = Connect();  // the server is still there
  after.Send("GET /ok HTTP/1.1\r\n\r\n");
  EXPECT_EQ(after.ReadResponse().status, 200);
}

TEST_F(HttpServerTest, AClientThatStopsMidRequestIsDisconnected) {
  SocketClient client = Connect();
  client.Send("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
  EXPECT_TRUE(client.Closed(/*timeout_ms=*/5000));  // the read timeout is 2 s
}

TEST(HttpListenTest, BadAddressesAreNamed) {
  auto bad = HttpServer::Listen("localhost", 0, {}, nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("localhost"), std::string::npos);
  auto first = HttpServer::Listen("127.0.0.1", 0, {}, nullptr);
  ASSERT_TRUE(first.ok());
  auto taken = HttpServer::Listen("127.0.0.1", (*first)->port(), {}, nullptr);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace loom::serve
