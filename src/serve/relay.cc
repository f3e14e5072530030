#include "loom/serve/relay.h"

#include <string>

namespace loom::serve {

v1::HttpCall CallOf(int64_t id, const HttpRequest& request) {
  v1::HttpCall call;
  call.set_id(id);
  call.set_method(request.method);
  call.set_path(request.path);
  call.set_query(request.query);
  for (const auto& [name, value] : request.headers) {
    v1::HttpHeader* header = call.add_headers();
    header->set_name(name);
    header->set_value(value);
  }
  call.set_body(request.body);
  return call;
}

HttpRequest RequestOf(const v1::HttpCall& call) {
  HttpRequest request;
  request.method = call.method();
  request.path = call.path();
  request.query = call.query();
  for (const v1::HttpHeader& header : call.headers()) {
    request.headers.emplace_back(header.name(), header.value());
  }
  request.body = call.body();
  return request;
}

bool Replay(const v1::HttpAnswer& answer, HttpResponder& out) {
  switch (answer.kind()) {
    case v1::HttpAnswer::EVENTS_BEGIN:
      return out.BeginEvents();
    case v1::HttpAnswer::EVENT:
      return out.Event(answer.body());
    case v1::HttpAnswer::EVENTS_END:
      return out.EndEvents();
    default:
      return out.Send(answer.status(), answer.content_type(), answer.body());
  }
}

bool AnswerResponder::Part(v1::HttpAnswer::Kind kind, int status, std::string_view content_type,
                           std::string_view body) {
  if (!alive_) return false;
  answered_ = true;
  v1::HttpAnswer answer;
  answer.set_id(id_);
  answer.set_kind(kind);
  answer.set_status(status);
  answer.set_content_type(std::string(content_type));
  answer.set_body(std::string(body));
  alive_ = send_(answer);
  return alive_;
}

bool AnswerResponder::Send(int status, std::string_view content_type, std::string_view body) {
  return Part(v1::HttpAnswer::WHOLE, status, content_type, body);
}

bool AnswerResponder::BeginEvents() { return Part(v1::HttpAnswer::EVENTS_BEGIN, 200, "", ""); }

bool AnswerResponder::Event(std::string_view text) {
  return Part(v1::HttpAnswer::EVENT, 0, "", text);
}

bool AnswerResponder::EndEvents() { return Part(v1::HttpAnswer::EVENTS_END, 0, "", ""); }

}  // namespace loom::serve
