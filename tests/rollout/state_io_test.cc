// SampleState export/import: continuity across engines, bit-exact files, and
// every malformed form of the files.

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/rollout/state_io.h"
#include "rollout/rollout_testing.h"
#include "testing/temp_dir.h"

namespace loom::rollout {
namespace {

using loom::testing::TempDir;
using testing::ById;
using testing::MakeEngine;
using testing::Prompt;
using testing::Request;
using testing::RunToEnd;
using testing::SmallModel;

void AddThree(RolloutEngine& engine) {
  for (int id = 0; id < 3; ++id) {
    auto r = Request(id, Prompt(id, 6 + 3 * id), 20, 0.9);
    r.sampling.top_p = 0.95;
    ASSERT_TRUE(engine.Add(r).ok());
  }
}

class ExportImportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportImportTest, ExportedAndImportedSamplesContinueBitExactly) {
  auto model = SmallModel(GetParam());
  auto reference = MakeEngine(*model);
  AddThree(*reference);
  auto expected = RunToEnd(*reference);
  ASSERT_EQ(expected.size(), 3u);

  TempDir dir;
  {
    auto first = MakeEngine(*model);
    AddThree(*first);
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(first->Step().ok());
    EXPECT_EQ(first->Export(0).status().code(), absl::StatusCode::kFailedPrecondition);
    first->ParkAll();
    for (int id = 0; id < 3; ++id) {
      auto state = first->Export(id);
      ASSERT_TRUE(state.ok()) << state.status();
      ASSERT_TRUE(WriteSampleState(*state, dir / std::to_string(id)).ok());
    }
    EXPECT_EQ(first->pool().used_blocks(), 0);  // exported samples left with their KV
  }
  auto second = MakeEngine(*model);
  for (int id = 0; id < 3; ++id) {
    auto state = ReadSampleState(dir / std::to_string(id));
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(second->Import(*state).ok());
  }
  auto continued = RunToEnd(*second);
  ASSERT_EQ(continued.size(), 3u);
  EXPECT_EQ(second->counters().prefill_tokens, 0);  // the KV came back: no re-prefill
  for (const auto& want : expected) {
    const SampleState* got = ById(continued, want.id);
    EXPECT_EQ(got->tokens, want.tokens);
    EXPECT_EQ(got->logprobs, want.logprobs);  // bit-exact
    EXPECT_EQ(got->routing, want.routing);
    EXPECT_EQ(got->rng.counter(), want.rng.counter());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ExportImportTest, ::testing::Values("llama", "qwen3_moe"));

// A parked MoE sample with everything filled in, exported from an engine.
SampleState ExportedSample(const model::Transformer& model) {
  auto engine = MakeEngine(model);
  auto r = Request(42, Prompt(42, 9), 20);
  r.stop.eos_token_ids = {60};
  r.stop.stop_sequences = {{1, 2}};
  r.stop.tool_call_end = {{3, 4, 5}};
  EXPECT_TRUE(engine->Add(r).ok());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(engine->Step().ok());
  engine->ParkAll();
  return *engine->Export(42);
}

TEST(StateIoTest, FilesRoundTripBitExactly) {
  auto model = SmallModel("qwen3_moe");
  SampleState s = ExportedSample(*model);
  s.segments.push_back({s.length() - 1, 5});
  TempDir dir;
  ASSERT_TRUE(WriteSampleState(s, dir / "s").ok());
  auto read = ReadSampleState(dir / "s");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->id, s.id);
  EXPECT_EQ(read->tokens, s.tokens);
  EXPECT_EQ(read->loss_mask, s.loss_mask);
  EXPECT_EQ(read->logprobs, s.logprobs);
  EXPECT_EQ(read->versions, s.versions);
  EXPECT_EQ(read->routing, s.routing);
  EXPECT_EQ(read->segments.size(), s.segments.size());
  EXPECT_EQ(read->segments.back().version, 5);
  EXPECT_EQ(read->rng.key(), s.rng.key());
  EXPECT_EQ(read->rng.counter(), s.rng.counter());
  EXPECT_EQ(read->sampling.temperature, s.sampling.temperature);
  EXPECT_EQ(read->stop.tool_call_end, s.stop.tool_call_end);
  EXPECT_EQ(read->phase, SamplePhase::kParked);
  EXPECT_EQ(read->kv.length, s.kv.length);
  EXPECT_TRUE(at::equal(read->kv.key, s.kv.key));
  EXPECT_TRUE(at::equal(read->kv.value, s.kv.value));
}

class MalformedStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SmallModel();
    state_ = ExportedSample(*model_);
    ASSERT_TRUE(WriteSampleState(state_, dir_ / "s").ok());
  }
  // Rewrites the JSON with `edit` applied and reads the state back.
  absl::Status ReadWithJson(const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(SampleStateJson(state_));
    edit(j);
    dir_.Write("s.json", j.dump());
    return ReadSampleState(dir_ / "s").status();
  }
  absl::Status ReadWithTensors(const std::function<void(model::TensorMap&)>& edit) {
    auto tensors = SampleStateTensors(state_);
    edit(tensors);
    EXPECT_TRUE(model::WriteSafetensors(dir_ / "s.safetensors", tensors).ok());
    return ReadSampleState(dir_ / "s").status();
  }

  std::unique_ptr<model::Transformer> model_;
  SampleState state_;
  TempDir dir_;
};

void ExpectInvalid(const absl::Status& status, const std::string& fragment) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status;
}

TEST_F(MalformedStateTest, FilesOfOlderVersionsStillRead) {
  EXPECT_TRUE(ReadWithJson([](auto& j) { j["tags"] = {{"group", "g7"}}; }).ok());
  EXPECT_TRUE(ReadWithJson([](auto& j) { j["stop"].erase("max_turn_tokens"); }).ok());
}

TEST_F(MalformedStateTest, MissingFilesAreNotFound) {
  std::filesystem::remove(dir_ / "s.safetensors");
  EXPECT_EQ(ReadSampleState(dir_ / "s").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadSampleState(dir_ / "nothing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(MalformedStateTest, NotJson) {
  dir_.Write("s.json", "{\"id\": ");
  ExpectInvalid(ReadSampleState(dir_ / "s").status(), "not a JSON object");
}

TEST_F(MalformedStateTest, MissingField) {
  ExpectInvalid(ReadWithJson([](auto& j) { j.erase("generated"); }), "'generated' is missing");
  ExpectInvalid(ReadWithJson([](auto& j) { j["stop"].erase("max_context"); }),
                "'stop.max_context' is missing");
}

TEST_F(MalformedStateTest, WrongTypes) {
  ExpectInvalid(ReadWithJson([](auto& j) { j["id"] = "forty-two"; }), "'id' has the wrong type");
  ExpectInvalid(ReadWithJson([](auto& j) { j["rng"]["counter"] = "x"; }), "rng.counter");
  ExpectInvalid(ReadWithJson([](auto& j) { j["segments"] = {1, 2}; }), "'segments'");
  ExpectInvalid(ReadWithJson([](auto& j) { j["format"] = "other"; }), "'format'");
  ExpectInvalid(ReadWithJson([](auto& j) { j["kv_published"] = "two"; }), "'kv_published'");
  ExpectInvalid(ReadWithJson([](auto& j) { j["kv_published"] = -1; }), "kv_published");
  ExpectInvalid(ReadWithJson([](auto& j) { j["kv_version"] = -2; }), "kv_version");
}

TEST_F(MalformedStateTest, UnknownPhaseOrReason) {
  ExpectInvalid(ReadWithJson([](auto& j) { j["phase"] = "sleeping"; }), "unknown sample phase");
  ExpectInvalid(ReadWithJson([](auto& j) { j["finish"] = "tired"; }), "unknown finish reason");
}

TEST_F(MalformedStateTest, ArraysOfTheWrongLengthOrDtype) {
  ExpectInvalid(ReadWithTensors([](auto& t) { t["logprobs"] = t["logprobs"].narrow(0, 0, 3); }),
                "'logprobs'");
  ExpectInvalid(ReadWithTensors([](auto& t) { t["versions"] = t["versions"].to(at::kInt); }),
                "'versions'");
  ExpectInvalid(ReadWithTensors([](auto& t) { t.erase("tokens"); }), "'tokens'");
  ExpectInvalid(ReadWithTensors([](auto& t) { t["kv.value"] = t["kv.value"].narrow(1, 0, 2); }),
                "KV tensors");
  ExpectInvalid(ReadWithTensors([](auto& t) { t.erase("kv.key"); }), "kv.key");
}

TEST_F(MalformedStateTest, TruncatedSafetensors) {
  const std::string data = loom::testing::ReadAll(dir_ / "s.safetensors");
  dir_.Write("s.safetensors", data.substr(0, data.size() / 2));
  EXPECT_EQ(ReadSampleState(dir_ / "s").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MalformedStateTest, ImportRejectsInconsistentOrForeignStates) {
  auto engine = MakeEngine(*model_);
  SampleState bad = state_;
  bad.logprobs.pop_back();
  EXPECT_EQ(engine->Import(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = state_;
  bad.tokens[0] = 1000;
  EXPECT_EQ(engine->Import(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = state_;
  bad.kv.key = bad.kv.key.narrow(0, 0, 1);
  EXPECT_EQ(engine->Import(bad).code(), absl::StatusCode::kInvalidArgument);
  auto moe = SmallModel("qwen3_moe");
  auto moe_engine = MakeEngine(*moe);
  EXPECT_EQ(moe_engine->Import(state_).code(), absl::StatusCode::kInvalidArgument);  // routing
  ASSERT_TRUE(engine->Import(state_).ok());
  EXPECT_EQ(engine->Import(state_).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace loom::rollout
