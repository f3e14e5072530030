// The trainer's client side of agent episodes (AgentEpisodes) against a real
// `loom worker`: the test plays the run loop, and instead of sampling from a
// model it "generates" fixed DSV4 completions, appending their tokens the way
// the engine would. So the encoding path is the real one: the prompt and
// every observation come from the worker's messages through the chat module,
// and the token sequence must be what the chat encoder gives for the
// trajectory's conversation (no re-tokenisation drift).

#include "loom/agent/episodes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "absl/strings/escaping.h"
#include "loom/agent/chat_bridge.h"
#include "loom/agent/demonstration.h"
#include "loom/chat/encoder.h"
#include "loom/tasks/agent_tasks.h"
#include "loom/tokenizer/dsv4_tokens.h"
#include "loom/tokenizer/tiny.h"
#include "sandbox/worker_fixture.h"

namespace loom::agent {
namespace {

const std::string kEos(tokenizer::dsv4::kEos);

std::unique_ptr<tokenizer::Tokenizer> Tiny() {
  auto tok = tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny");
  EXPECT_TRUE(tok.ok());
  return std::move(*tok);
}

// The completions a demonstration scripts: each run of its loss-bearing
// tokens, decoded.
std::vector<std::string> ScriptedTurns(const DemonstrationExample& demo,
                                       const tokenizer::Tokenizer& tok) {
  std::vector<std::string> turns;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= demo.tokens.size(); ++i) {
    if (i < demo.tokens.size() && demo.loss_mask[i] == 1) {
      run.push_back(static_cast<int32_t>(demo.tokens[i]));
    } else if (!run.empty()) {
      turns.push_back(*tok.Decode(run));
      run.clear();
    }
  }
  return turns;
}

// A completion with one tool call, as the model writes it after `<think>`.
std::string ToolCall(const std::string& tool, const std::string& param, const std::string& value,
                     const std::string& reasoning = "Let me use a tool.") {
  return reasoning + "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + tool +
         "\">\n<｜DSML｜parameter name=\"" + param + "\" string=\"true\">" + value +
         "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
}

v1::Task ProductTask() {
  v1::Task task;
  task.set_id("product");
  task.set_problem("What is 1234567 * 7654321?");
  task.mutable_verification()->set_exact_answer("9449772114007");
  return task;
}

// What the test's stand-in engine holds for one sample.
struct Sequence {
  std::vector<int64_t> tokens;
  std::vector<uint8_t> loss_mask;
  int64_t prompt_length = 0;
  std::vector<std::vector<int64_t>> observations;  // each appended block
};

class AgentEpisodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    workers_ = testing_support::StartWorkers(1, 2);
    ASSERT_TRUE(workers_);
    tok_ = Tiny();
    eos_ = *tok_->TokenToId(tokenizer::dsv4::kEos);
    Reopen(Options());
  }

  AgentOptions Options() const {
    AgentOptions options;
    options.scaffold.set_max_steps(4);
    options.turn_timeout_s = 30;
    options.eos_id = eos_;
    return options;
  }

  // New episodes (on a new pool: the old one stops with them) with
  // `options`, `task` and an empty sequence.
  void Reopen(const AgentOptions& options, v1::Task task = ProductTask()) {
    episodes_.reset();
    rpc::PoolOptions pool;
    pool.targets = workers_->targets();
    pool.episode_timeout_s = 60;
    pool_ = std::make_unique<rpc::WorkerPool>(pool);
    episodes_ = std::make_unique<AgentEpisodes>(*pool_, *tok_, options);
    task_ = std::move(task);
    seq_ = Sequence();
  }

  // Plays the run loop until sample 1's episode ends: each prompt or
  // observation is appended (mask 0), then `completions[turn]` (mask 1), or
  // the sample is cut when the script runs out. `on_turn` runs before each
  // answer.
  v1::Trajectory Play(const std::vector<std::string>& completions,
                      const std::function<void(int)>& on_turn = nullptr) {
    episodes_->Start(1, task_, 50);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int turn = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      for (AgentEvent& event : episodes_->Poll(0.1)) {
        if (event.kind == AgentEvent::Kind::kDone) return event.trajectory;
        if (event.kind == AgentEvent::Kind::kPrompt) seq_.prompt_length = event.tokens.size();
        if (event.kind == AgentEvent::Kind::kAppend) seq_.observations.push_back(event.tokens);
        seq_.tokens.insert(seq_.tokens.end(), event.tokens.begin(), event.tokens.end());
        seq_.loss_mask.insert(seq_.loss_mask.end(), event.tokens.size(), 0);
        if (on_turn) on_turn(turn);
        if (turn >= static_cast<int>(completions.size())) {
          episodes_->Cut(1);
          continue;
        }
        auto ids = tok_->Encode(completions[turn]);
        EXPECT_TRUE(ids.ok());
        seq_.tokens.insert(seq_.tokens.end(), ids->begin(), ids->end());
        seq_.loss_mask.insert(seq_.loss_mask.end(), ids->size(), 1);
        episodes_->Answer(1, completions[turn]);
        ++turn;
      }
    }
    ADD_FAILURE() << "the episode did not end in time";
    return v1::Trajectory();
  }

  std::unique_ptr<rpc::LocalWorkers> workers_;
  std::unique_ptr<rpc::WorkerPool> pool_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  int64_t eos_ = 0;
  std::unique_ptr<AgentEpisodes> episodes_;
  v1::Task task_;
  Sequence seq_;
};

TEST_F(AgentEpisodesTest, ToolCallsFormatErrorsAndSubmitRoundTrip) {
  v1::Trajectory t = Play({
      ToolCall("python", "code", "print(1234567 * 7654321)") + kEos,  // ends with EOS
      "I forgot to close my reasoning",                               // cut: no EOS, no parse
      ToolCall("submit", "answer", "9449772114007"),                  // stopped at the block end
  });
  EXPECT_FALSE(t.penalty()) << t.failure_reason();
  EXPECT_EQ(t.verdict().reward(), 1.0) << t.verdict().details();
  EXPECT_EQ(t.format_errors(), 1);
  EXPECT_EQ(t.steps(), 3);
  EXPECT_EQ(episodes_->inflight(), 0);

  // Two observations were appended: the python result, then the format error.
  ASSERT_EQ(seq_.observations.size(), 2u);
  const int64_t user = *tok_->TokenToId(tokenizer::dsv4::kUser);
  EXPECT_EQ(seq_.observations[0].front(), user);  // the turn ended with EOS: none added
  EXPECT_EQ(seq_.observations[1].front(), eos_);  // the cut turn gets its EOS from the trainer
  auto text = [&](const std::vector<int64_t>& ids) {
    return *tok_->Decode(std::vector<int32_t>(ids.begin(), ids.end()));
  };
  EXPECT_NE(text(seq_.observations[0]).find("<tool_result>9449772114007\n</tool_result>"),
            std::string::npos)
      << text(seq_.observations[0]);
  EXPECT_NE(text(seq_.observations[1]).find("Format error"), std::string::npos);

  // No drift: prompt + first turn + its tool result is exactly the chat
  // encoding of the trajectory's first four messages (system, user,
  // assistant with the tool call, tool result).
  ASSERT_GE(t.messages_size(), 4);
  std::vector<chat::Message> conversation;
  for (int i = 0; i < 4; ++i) conversation.push_back(*agent::ToChatMessage(t.messages(i)));
  chat::EncodeOptions options;
  options.reasoning_effort = {chat::ReasoningEffort::Kind::kNumeric, 50};
  auto expected = chat::EncodeIds(conversation, options, *tok_);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const size_t first_block =
      static_cast<size_t>(seq_.prompt_length) +
      tok_->Encode(ToolCall("python", "code", "print(1234567 * 7654321)") + kEos)->size() +
      seq_.observations[0].size();
  ASSERT_EQ(expected->size(), first_block);
  EXPECT_TRUE(std::equal(expected->begin(), expected->end(), seq_.tokens.begin()));
  EXPECT_EQ(t.messages(2).tool_calls(0).name(), "python");
}

// A built-in demonstration, encoded for SFT, is the episode a real worker
// runs when the policy writes the demonstration's turns (written out here by
// hand in the DSV4 format): the same tokens, the loss on the same ones; and
// the episode solves its task. With or without the tool schemas.
TEST_F(AgentEpisodesTest, DemonstrationEncodesTheEpisodeItScripts) {
  for (bool hide_schemas : {false, true}) {
    for (const std::string kind : {"lookup", "arithmetic", "fix_repo"}) {
      SCOPED_TRACE(kind + (hide_schemas ? " without schemas" : " with schemas"));
      AgentOptions options = Options();
      options.scaffold.set_hide_tool_schemas(hide_schemas);
      if (hide_schemas) options.scaffold.set_system_prompt("Use the tools, then answer.");
      Reopen(options, tasks::BuiltinTask(kind, 11));
      const std::string answer = task_.verification().exact_answer();
      std::vector<std::string> completions;
      if (kind == "lookup") {
        const std::string file = task_.environment().files().begin()->first;
        completions = {ToolCall("read_file", "path", file, "I read the file."),
                       "</think>" + answer + kEos};
      } else if (kind == "fix_repo") {
        completions = {ToolCall("bash", "command", "sed -i '6s/low/high/' calc.py", ""),
                       "</think>Fixed clamp." + kEos};
      } else {
        unsigned long long a = 0, b = 0;  // NOLINT(runtime/int): sscanf's type
        ASSERT_EQ(std::sscanf(task_.problem().c_str(), "What is %llu * %llu", &a, &b), 2);
        completions = {ToolCall("python", "code",
                                "print(" + std::to_string(a) + " * " + std::to_string(b) + ")",
                                "Too large to do by heart; python computes it."),
                       "python printed the product.</think>" + answer + kEos};
      }
      const v1::Trajectory t = Play(completions);
      EXPECT_FALSE(t.penalty()) << t.failure_reason();
      EXPECT_EQ(t.verdict().reward(), 1.0) << t.verdict().details();
      EXPECT_EQ(t.steps(), 2);

      auto demo = EncodeDemonstration(task_, tasks::BuiltinDemonstration(kind, 11),
                                      options.scaffold, *tok_, 50, eos_);
      ASSERT_TRUE(demo.ok()) << demo.status();
      EXPECT_EQ(demo->tokens, seq_.tokens);
      EXPECT_EQ(demo->loss_mask, seq_.loss_mask);
      const std::string prompt = *tok_->Decode(
          std::vector<int32_t>(seq_.tokens.begin(), seq_.tokens.begin() + seq_.prompt_length));
      EXPECT_EQ(prompt.find("Available Tool Schemas") == std::string::npos, hide_schemas);
      EXPECT_EQ(prompt.find("Use the tools, then answer.") != std::string::npos, hide_schemas);
    }
  }
  // A wrong digit scores 0.
  Reopen(Options(), tasks::BuiltinTask("lookup", 11));
  const std::string file = task_.environment().files().begin()->first;
  const std::string wrong(1, task_.verification().exact_answer() == "7" ? '3' : '7');
  const v1::Trajectory t = Play({ToolCall("read_file", "path", file), "</think>" + wrong + kEos});
  EXPECT_EQ(t.verdict().reward(), 0.0);
}

// Demonstrations that no episode could follow are refused, saying why.
TEST_F(AgentEpisodesTest, MalformedDemonstrationsAreRefused) {
  const v1::Task task = tasks::BuiltinTask("lookup", 3);
  const std::vector<tasks::DemonstrationTurn> good = tasks::BuiltinDemonstration("lookup", 3);
  ASSERT_EQ(good.size(), 2u);
  auto refused = [&](std::vector<tasks::DemonstrationTurn> turns, int max_steps) {
    v1::ScaffoldOptions options;
    options.set_max_steps(max_steps);
    auto demo = EncodeDemonstration(task, turns, options, *tok_, 0, eos_);
    EXPECT_FALSE(demo.ok());
    return std::string(demo.status().message());
  };
  EXPECT_NE(refused(good, 1).find("exceed max_steps 1"), std::string::npos);
  EXPECT_NE(refused({}, 4).find("no turns"), std::string::npos);
  auto no_result = good;
  no_result[0].results.clear();
  EXPECT_NE(refused(no_result, 4).find("turn 0: 1 tool calls but 0 results"), std::string::npos);
  EXPECT_NE(refused({good[0]}, 4).find("the last turn must answer"), std::string::npos);
  EXPECT_NE(refused({good[1], good[1]}, 4).find("only the last turn may answer"),
            std::string::npos);
  EXPECT_TRUE(tasks::BuiltinDemonstration("sort", 3).empty());
}

// A command whose output is not UTF-8 (an agent's `sed` quoting the stray
// bytes of its own command back, found in a GRPO run) must not break the
// stream: the worker's message with it did not parse at the trainer, whose
// episode then hung until its deadline and was lost as an infrastructure
// failure. The bytes reach the model as U+FFFD and the episode goes on.
TEST_F(AgentEpisodesTest, ToolOutputThatIsNotUtf8ReachesThePolicyAsReplacementCharacters) {
  const v1::Trajectory t =
      Play({ToolCall("bash", "command", "printf 'a\\303(\\377b' >&2; printf 'c\\200'"),
            "</think>9449772114007" + kEos});
  EXPECT_FALSE(t.penalty()) << t.failure_reason();
  EXPECT_EQ(t.steps(), 2);
  EXPECT_EQ(t.verdict().reward(), 1.0) << t.verdict().details();
  ASSERT_GE(t.messages_size(), 4);
  const v1::Message& tool = t.messages(3);
  EXPECT_EQ(tool.role(), "tool");
  EXPECT_EQ(tool.result().stdout(), "c\xEF\xBF\xBD");
  EXPECT_EQ(tool.result().stderr(),
            "a\xEF\xBF\xBD(\xEF\xBF\xBD"
            "b");
  ASSERT_EQ(seq_.observations.size(), 1u);
  const std::string seen =
      *tok_->Decode(std::vector<int32_t>(seq_.observations[0].begin(), seq_.observations[0].end()));
  EXPECT_NE(seen.find("c\xEF\xBF\xBD\n[stderr]\na\xEF\xBF\xBD(\xEF\xBF\xBD"
                      "b"),
            std::string::npos)
      << seen;
}

// fix_repo's slipped demonstrations patch the wrong line: played on the
// worker, the task's own tests fail them, while the others pass. The slip
// falls on the asked share of seeds, the same way every time.
TEST_F(AgentEpisodesTest, SlippedFixRepoDemonstrationsFailTheTests) {
  int slipped = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const std::string command = tasks::BuiltinDemonstration("fix_repo", seed, 0.75)[0]
                                    .assistant.tool_calls(0)
                                    .arguments_json();
    EXPECT_EQ(command, tasks::BuiltinDemonstration("fix_repo", seed, 0.75)[0]
                           .assistant.tool_calls(0)
                           .arguments_json());
    slipped += command.find("4s/low/high/") != std::string::npos;
  }
  EXPECT_GT(slipped, 0.68 * 400);
  EXPECT_LT(slipped, 0.82 * 400);

  for (double slip : {0.0, 1.0}) {
    SCOPED_TRACE(slip);
    Reopen(Options(), tasks::BuiltinTask("fix_repo", 5));
    auto demo = EncodeDemonstration(task_, tasks::BuiltinDemonstration("fix_repo", 5, slip),
                                    Options().scaffold, *tok_, 50, eos_);
    ASSERT_TRUE(demo.ok()) << demo.status();
    const std::vector<std::string> turns = ScriptedTurns(*demo, *tok_);
    ASSERT_EQ(turns.size(), 2u);
    EXPECT_NE(turns[0].find(slip > 0 ? "'4s/low/high/'" : "'6s/low/high/'"), std::string::npos)
        << turns[0];
    const v1::Trajectory t = Play(turns);
    EXPECT_FALSE(t.penalty()) << t.failure_reason();
    EXPECT_EQ(t.verdict().reward(), slip > 0 ? 0.0 : 1.0) << t.verdict().details();
    EXPECT_NE(t.verdict().details().find(slip > 0 ? "test_above: FAIL" : "test_above: pass"),
              std::string::npos)
        << t.verdict().details();
  }
}

TEST_F(AgentEpisodesTest, CutSampleStopsItsEpisodeUnsolved) {
  v1::Trajectory t = Play({"thinking without end"});
  EXPECT_FALSE(t.penalty());
  EXPECT_EQ(t.failure_reason(), "stopped_by_policy");
  EXPECT_EQ(t.verdict().reward(), 0.0);
  EXPECT_EQ(t.steps(), 2);
}

TEST_F(AgentEpisodesTest, WorkerKilledMidEpisodeFailsItWithPenalty) {
  v1::Trajectory t =
      Play({ToolCall("python", "code", "print(1)") + kEos, "never used"}, [&](int turn) {
        if (turn == 1) workers_->Kill(0);
      });
  EXPECT_TRUE(t.penalty());
  EXPECT_EQ(t.failure_reason().rfind("worker_lost", 0), 0u) << t.failure_reason();
  EXPECT_EQ(episodes_->inflight(), 0);
}

TEST_F(AgentEpisodesTest, StoppingTheTrainerEndsWaitingEpisodes) {
  episodes_->Start(1, task_, 50);
  bool prompted = false;
  for (int i = 0; i < 300 && !prompted; ++i) {
    for (const AgentEvent& event : episodes_->Poll(0.1)) {
      prompted |= event.kind == AgentEvent::Kind::kPrompt;
    }
  }
  ASSERT_TRUE(prompted);
  const auto start = std::chrono::steady_clock::now();
  episodes_.reset();  // the client waits for a turn that never comes: woken, joined
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
// A checkpoint's episode record: the round trip, and every malformed form
// named by where it is wrong.
TEST(EpisodeRecordTest, JsonRoundTripAndMalformedForms) {
  agent::EpisodeRecord record;
  record.place = {"127.0.0.1:7000", "s4-00ff"};
  for (int k = 0; k < 3; ++k) {
    agent::EpisodeRecord::Turn turn;
    turn.request.set_turn(k);
    v1::Message* m = turn.request.add_append();
    m->set_role(k == 0 ? "user" : "tool");
    m->set_content("observation " + std::to_string(k));
    if (k == 0) turn.completion = "<think>x</think>answer";
    if (k == 2) turn.completion = "bytes \x96\xff of an untrained model";
    if (k == 1) turn.cut = true;
    record.turns.push_back(turn);
  }
  v1::EpisodeSnapshot snapshot;
  snapshot.set_workspace(std::string("\x1f\x8b\x00 archive bytes", 17));
  snapshot.mutable_trajectory()->set_steps(2);
  *snapshot.mutable_pending() = record.turns[2].request;
  record.snapshot = snapshot;
  const nlohmann::json json = agent::EpisodeRecordJson(record);
  auto back = agent::EpisodeRecordFromJson(json, "r");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->place.target, "127.0.0.1:7000");
  EXPECT_EQ(back->place.session_id, "s4-00ff");
  ASSERT_EQ(back->turns.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(back->turns[k].request.SerializeAsString(),
              record.turns[k].request.SerializeAsString());
    if (k != 2) {
      EXPECT_EQ(back->turns[k].completion, record.turns[k].completion);
    }
    EXPECT_EQ(back->turns[k].cut, record.turns[k].cut);
  }
  ASSERT_TRUE(back->snapshot.has_value());
  EXPECT_EQ(back->snapshot->SerializeAsString(), snapshot.SerializeAsString());
  // The next turn's, as the last was answered; or the episode's end.
  record.snapshot->mutable_pending()->set_turn(3);
  EXPECT_TRUE(agent::EpisodeRecordFromJson(agent::EpisodeRecordJson(record), "r").ok());
  record.snapshot->clear_pending();
  record.snapshot->mutable_trajectory()->set_failure_reason("step_limit");
  EXPECT_TRUE(agent::EpisodeRecordFromJson(agent::EpisodeRecordJson(record), "r").ok());
  record.snapshot.reset();
  EXPECT_FALSE(agent::EpisodeRecordFromJson(agent::EpisodeRecordJson(record), "r")->snapshot);
  // Bytes that are not UTF-8 come back as U+FFFD, as the worker would see them.
  EXPECT_EQ(back->turns[2].completion, "bytes \xEF\xBF\xBD\xEF\xBF\xBD of an untrained model");
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = json;
    change(j);
    return j;
  };
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {nlohmann::json::array(), "must be an object"},
      {with([](auto& j) { j.erase("target"); }), "`target` must be a non-empty string"},
      {with([](auto& j) { j["session_id"] = ""; }), "`session_id` must be a non-empty string"},
      {with([](auto& j) { j["turns"] = 3; }), "`turns` must be an array"},
      {with([](auto& j) { j["turns"][1].erase("request"); }), "turns[1]: needs a `request`"},
      {with([](auto& j) { j["turns"][1]["request"]["append"] = 5; }), "turns[1].request:"},
      {with([](auto& j) { j["turns"][2]["request"]["turn"] = 7; }),
       "turns[2].request.turn: 7 where 2 comes"},
      {with([](auto& j) { j["turns"][0]["completion"] = 1; }),
       "turns[0].completion: must be a string"},
      {with([](auto& j) { j["turns"][1]["cut"] = "yes"; }), "turns[1].cut: must be a boolean"},
      {with([](auto& j) { j["turns"][1].erase("cut"); }),
       "turns[1]: only the last turn may be unanswered"},
      {with([](auto& j) { j["snapshot"] = "%%%"; }), "`snapshot` must be a base64 EpisodeSnapshot"},
      {with([](auto& j) { j["snapshot"] = absl::Base64Escape("\xff\xff\xff"); }),
       "`snapshot` must be a base64 EpisodeSnapshot"},
      {with([&](auto& j) {
         v1::EpisodeSnapshot early = snapshot;
         early.mutable_pending()->set_turn(1);
         j["snapshot"] = absl::Base64Escape(early.SerializeAsString());
       }),
       "`snapshot` waits on turn 1, neither the last turn recorded nor the one after its answer"},
      {with([&](auto& j) {
         v1::EpisodeSnapshot endless;
         endless.mutable_trajectory()->set_steps(3);
         j["snapshot"] = absl::Base64Escape(endless.SerializeAsString());
       }),
       "`snapshot` has neither a pending request nor the episode's end"},
  };
  for (const auto& [bad, expected] : cases) {
    auto parsed = agent::EpisodeRecordFromJson(bad, "ckpt: sample 5: episode");
    ASSERT_FALSE(parsed.ok()) << bad.dump();
    EXPECT_TRUE(absl::IsDataLoss(parsed.status())) << parsed.status();
    EXPECT_NE(parsed.status().message().find("ckpt: sample 5: episode: "), std::string::npos)
        << parsed.status();
    EXPECT_NE(parsed.status().message().find(expected), std::string::npos)
        << parsed.status() << " lacks " << expected;
  }
}

}  // namespace loom::agent
