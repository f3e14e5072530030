#pragma once
// HTTP carried over a worker's session stream (loom.v1.HttpCall and
// HttpAnswer): how the worker hands a harness's request to the trainer, and
// how the trainer's answer, whole or as a stream of events, comes back.

#include <cstdint>
#include <functional>

#include "loom/serve/http.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::serve {

v1::HttpCall CallOf(int64_t id, const HttpRequest& request);
HttpRequest RequestOf(const v1::HttpCall& call);

// Writes one part of an answer to `out`; false once its client is gone.
bool Replay(const v1::HttpAnswer& answer, HttpResponder& out);

// The trainer's side of one relayed call: each response call becomes an
// HttpAnswer part handed to `send` (false: the stream is gone); `gone` says
// whether the harness hung up.
class AnswerResponder final : public HttpResponder {
 public:
  AnswerResponder(int64_t id, std::function<bool(const v1::HttpAnswer&)> send,
                  std::function<bool()> gone)
      : id_(id), send_(std::move(send)), gone_(std::move(gone)) {}

  bool Send(int status, std::string_view content_type, std::string_view body) override;
  bool BeginEvents() override;
  bool Event(std::string_view text) override;
  bool EndEvents() override;
  bool ClientGone() override { return !alive_ || gone_(); }
  bool answered() const { return answered_; }

 private:
  bool Part(v1::HttpAnswer::Kind kind, int status, std::string_view content_type,
            std::string_view body);

  const int64_t id_;
  std::function<bool(const v1::HttpAnswer&)> send_;
  std::function<bool()> gone_;
  bool alive_ = true;
  bool answered_ = false;
};

}  // namespace loom::serve
