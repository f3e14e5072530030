// TrainState on disk: in-flight samples come back into a fresh engine with
// their KV (no prefill), and continue with exactly the tokens an
// uninterrupted engine produces; malformed state files are clear errors.

#include "loom/train/train_state.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/ckpt/checkpoint.h"
#include "loom/config/files.h"
#include "rollout/rollout_testing.h"
#include "testing/temp_dir.h"
#include "train/checkpointer.h"

namespace loom::train {
namespace {

using loom::testing::TempDir;
using rollout::testing::MakeEngine;
using rollout::testing::Prompt;
using rollout::testing::Request;
using rollout::testing::SmallModel;

constexpr int kSamples = 4;

std::unique_ptr<rollout::RolloutEngine> EngineWithSamples(const model::Transformer& m) {
  auto engine = MakeEngine(m);
  for (uint64_t id = 1; id <= kSamples; ++id) {
    EXPECT_TRUE(engine->Add(Request(id, Prompt(id, 5 + id), /*max_new=*/40)).ok());
  }
  return engine;
}

TrainState StateWithInflight(rollout::RolloutEngine& engine) {
  TrainState state;
  state.cursor = {1, "grpo", 3, 9, 0, nullptr};
  state.optimizer = {{"step", at::full({}, 9, at::kLong)}};
  state.grpo.emplace();
  state.grpo->dispatcher = {{"cursors", {4, 2}}};
  engine.ParkAll();
  for (uint64_t id = 1; id <= kSamples; ++id) {
    auto exported = engine.Export(id);
    EXPECT_TRUE(exported.ok()) << exported.status();
    state.grpo->inflight.push_back(*std::move(exported));
    SampleEntry& entry = state.grpo->samples.emplace_back();
    entry.id = id;
    entry.problem_index = 100 + id;
    entry.subgroup_id = 50 + id;
    entry.effort = 100;
    entry.config_version = static_cast<int64_t>(7 + id);
  }
  return state;
}

std::string WriteCheckpoint(const TrainState& state, const model::Transformer& m,
                            const TempDir& dir) {
  auto config = config::LoadRunConfig(LOOM_SOURCE_DIR "/configs/test/preempt.yaml", {});
  EXPECT_TRUE(config.ok()) << config.status();
  const std::string tokenizer = dir.Write("tokenizer.json", "{}");
  auto writer = ckpt::CheckpointWriter::Begin(dir / "checkpoints", 9);
  EXPECT_TRUE(writer.ok()) << writer.status();
  auto meta = WriteTrainState(state, m, tokenizer, *config, writer->dir());
  EXPECT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ((*meta)["inflight_samples"], state.grpo->inflight.size());
  auto committed = writer->Commit(*meta);
  EXPECT_TRUE(committed.ok()) << committed.status();
  return *committed;
}

TEST(TrainStateTest, InflightSamplesResumeOnTheirKvWithoutPrefill) {
  auto m = SmallModel();
  auto reference = EngineWithSamples(*m);
  auto engine = EngineWithSamples(*m);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(reference->Step().ok());
    ASSERT_TRUE(engine->Step().ok());
  }
  TempDir dir;
  const std::string ckpt_dir = WriteCheckpoint(StateWithInflight(*engine), *m, dir);

  auto state = ReadTrainState(ckpt_dir);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->cursor.stage, "grpo");
  EXPECT_EQ(state->cursor.policy_version, 9);
  EXPECT_EQ(state->grpo->samples.size(), static_cast<size_t>(kSamples));
  EXPECT_EQ(state->grpo->samples[2].problem_index, 103u);
  EXPECT_EQ(state->grpo->samples[2].subgroup_id, 53u);
  EXPECT_EQ(state->grpo->samples[2].config_version, 10) << "dispatch versions survive a resume";
  EXPECT_EQ(state->grpo->dispatcher["cursors"][0], 4);
  auto loaded = model::Transformer::Load(ckpt_dir + "/model", {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto resumed = MakeEngine(**loaded);
  for (auto& sample : state->grpo->inflight) {
    EXPECT_GT(sample.kv.length, 0) << "sample " << sample.id << " lost its KV";
    ASSERT_TRUE(resumed->Import(std::move(sample)).ok());
  }
  auto first = resumed->Step();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->prefill_tokens, 0) << "restored samples were re-prefilled";
  EXPECT_EQ(first->decode_tokens, kSamples);
  ASSERT_TRUE(reference->Step().ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(reference->Step().ok());
    ASSERT_TRUE(resumed->Step().ok());
  }
  for (uint64_t id = 1; id <= kSamples; ++id) {
    const rollout::SampleState* want = reference->Find(id);
    const rollout::SampleState* got = resumed->Find(id);
    ASSERT_TRUE(want && got);
    EXPECT_EQ(got->tokens, want->tokens) << "sample " << id;
    EXPECT_EQ(got->logprobs, want->logprobs) << "sample " << id;
  }
}

TEST(TrainStateTest, AgentSamplesKeepTheirOutcomesAndEpisodes) {
  auto m = SmallModel();
  auto engine = EngineWithSamples(*m);
  ASSERT_TRUE(engine->Step().ok());
  TrainState state = StateWithInflight(*engine);
  std::vector<SampleEntry>& samples = state.grpo->samples;
  samples[0].agent = true;  // finished: its episode's outcome
  samples[0].outcome = agent::EpisodeOutcome{0.5, "42", 3, 1, "step_limit", false, ""};
  samples[1].agent = true;  // its episode was running on a leased session
  state.grpo->episodes[2] = {
      {"target", "127.0.0.1:7000"}, {"session_id", "s3-ab"}, {"turns", nlohmann::json::array()}};
  TempDir dir;
  const std::string ckpt_dir = WriteCheckpoint(state, *m, dir);
  auto read = ReadTrainState(ckpt_dir);
  ASSERT_TRUE(read.ok()) << read.status();
  const std::vector<SampleEntry>& entries = read->grpo->samples;
  EXPECT_TRUE(entries[0].agent);
  EXPECT_EQ(entries[0].outcome, samples[0].outcome);
  EXPECT_TRUE(entries[1].agent);
  EXPECT_FALSE(entries[1].outcome.has_value());
  EXPECT_EQ(read->grpo->episodes, state.grpo->episodes);
  EXPECT_FALSE(entries[2].agent);

  // A checkpoint written before outcomes holds the whole trajectory.
  const std::string state_path = ckpt_dir + "/state.json";
  const std::string good = *ReadFile(state_path);
  nlohmann::json old = nlohmann::json::parse(good);
  old["grpo"]["records"][0].erase("outcome");
  old["grpo"]["records"][0]["trajectory"] = {{"steps", 3},
                                             {"format_errors", 1},
                                             {"answer", "42"},
                                             {"failure_reason", "step_limit"},
                                             {"verdict", {{"reward", 0.5}}},
                                             {"messages", nlohmann::json::array()}};
  ASSERT_TRUE(WriteFileAtomic(state_path, old.dump()).ok());
  auto legacy = ReadTrainState(ckpt_dir);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->grpo->samples[0].outcome, samples[0].outcome);

  // An outcome that is malformed, or on a sample that is no agent's; an old
  // trajectory that is not one.
  const std::vector<std::tuple<int, const char*, nlohmann::json, std::string>> bad_cases = {
      {0, "outcome", 5, "sample 1: outcome"},
      {0, "outcome", {{"reward", "high"}}, "field 'reward' has the wrong type"},
      {2, "outcome", agent::OutcomeJson({}), "only an agent sample"},
      {0, "trajectory", {{"steps", "three"}}, "sample 1: trajectory"},
  };
  for (const auto& [index, key, value, expected] : bad_cases) {
    nlohmann::json j = nlohmann::json::parse(good);
    j["grpo"]["records"][index].erase("outcome");
    j["grpo"]["records"][index][key] = value;
    ASSERT_TRUE(WriteFileAtomic(state_path, j.dump()).ok());
    auto bad = ReadTrainState(ckpt_dir);
    ASSERT_FALSE(bad.ok()) << value;
    EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
    EXPECT_NE(bad.status().message().find(expected), std::string::npos) << bad.status();
    EXPECT_NE(bad.status().message().find("state.json"), std::string::npos) << bad.status();
  }
  // An episode record that is not an object, on a sample that is no agent's,
  // or next to an outcome (an episode runs or has ended, not both).
  for (const auto& [index, episode] : std::vector<std::pair<int, nlohmann::json>>{
           {1, "s3"}, {2, {{"target", "t"}}}, {0, {{"target", "t"}}}}) {
    nlohmann::json j = nlohmann::json::parse(good);
    j["grpo"]["records"][index]["episode"] = episode;
    ASSERT_TRUE(WriteFileAtomic(state_path, j.dump()).ok());
    auto bad = ReadTrainState(ckpt_dir);
    ASSERT_FALSE(bad.ok()) << episode;
    EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
    EXPECT_NE(bad.status().message().find("an episode must be an object"), std::string::npos)
        << bad.status();
  }
}

// A finished harness episode's further sequences come back with it, in
// order, each bit for bit; a sequence whose sample is not a finished one is
// a clear error.
TEST(TrainStateTest, HarnessEpisodesKeepEverySequence) {
  auto m = SmallModel();
  auto engine = EngineWithSamples(*m);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->Step().ok());
  TrainState state = StateWithInflight(*engine);
  // Sample 1 finished as an episode of three sequences: its own state and
  // those of samples 3 and 4, which leave the table.
  std::vector<rollout::SampleState>& inflight = state.grpo->inflight;
  SampleEntry& episode = state.grpo->samples[0];
  episode.agent = true;
  episode.outcome = agent::EpisodeOutcome{1.0, "done", 2, 0, "", false, ""};
  episode.state = inflight[0];
  for (size_t i : {2u, 3u}) {
    rollout::SampleState sequence = inflight[i];
    sequence.id = episode.id;
    episode.sequences.push_back(std::move(sequence));
  }
  inflight = {inflight[1]};
  state.grpo->samples.resize(2);
  TempDir dir;
  const std::string ckpt_dir = WriteCheckpoint(state, *m, dir);
  auto read = ReadTrainState(ckpt_dir);
  ASSERT_TRUE(read.ok()) << read.status();
  const SampleEntry& back = read->grpo->samples[0];
  ASSERT_TRUE(back.state.has_value());
  EXPECT_EQ(back.state->tokens, episode.state->tokens);
  ASSERT_EQ(back.sequences.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const rollout::SampleState& want = episode.sequences[k];
    const rollout::SampleState& got = back.sequences[k];
    EXPECT_EQ(got.id, episode.id);
    EXPECT_EQ(got.tokens, want.tokens) << k;
    EXPECT_EQ(got.loss_mask, want.loss_mask) << k;
    EXPECT_EQ(got.logprobs, want.logprobs) << k;
    EXPECT_EQ(got.versions, want.versions) << k;
  }
  EXPECT_NE(back.sequences[0].tokens, back.sequences[1].tokens);
  EXPECT_TRUE(read->grpo->samples[1].sequences.empty());

  // A sequence of a sample that has not finished.
  const std::string samples_path = ckpt_dir + "/samples.json";
  nlohmann::json j = nlohmann::json::parse(*ReadFile(samples_path));
  j["sequences"][1]["id"] = 2;
  ASSERT_TRUE(WriteFileAtomic(samples_path, j.dump()).ok());
  auto bad = ReadTrainState(ckpt_dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("samples.json"), std::string::npos) << bad.status();
}

TEST(TrainStateTest, MalformedStateFilesAreClearErrors) {
  auto m = SmallModel();
  auto engine = EngineWithSamples(*m);
  ASSERT_TRUE(engine->Step().ok());
  TempDir dir;
  const std::string ckpt_dir = WriteCheckpoint(StateWithInflight(*engine), *m, dir);
  const std::string state_path = ckpt_dir + "/state.json";
  const std::string good = *ReadFile(state_path);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not a JSON object"},
      {"{\"format_version\": 1}", "field 'stage_index' is missing"},
      {"{\"format_version\": 99}", "format_version 99"},
  };
  for (const auto& [text, expected] : cases) {
    ASSERT_TRUE(WriteFileAtomic(state_path, text).ok());
    auto state = ReadTrainState(ckpt_dir);
    ASSERT_FALSE(state.ok()) << text;
    EXPECT_NE(state.status().message().find(expected), std::string::npos) << state.status();
    EXPECT_NE(state.status().message().find("state.json"), std::string::npos) << state.status();
  }
  ASSERT_TRUE(WriteFileAtomic(state_path, good).ok());
  ASSERT_TRUE(
      WriteFileAtomic(ckpt_dir + "/samples.json", "{\"inflight\": [{}], \"finished\": []}").ok());
  auto state = ReadTrainState(ckpt_dir);
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.status().message().find("samples.json"), std::string::npos) << state.status();
  std::filesystem::remove(ckpt_dir + "/samples.safetensors");
  ASSERT_TRUE(
      WriteFileAtomic(ckpt_dir + "/samples.json", "{\"inflight\": [], \"finished\": []}").ok());
  EXPECT_FALSE(ReadTrainState(ckpt_dir).ok());
}

TEST(CheckpointerTest, ResumeSpecsFailClearlyOrStartFresh) {
  TempDir dir;
  auto config = config::LoadRunConfig(LOOM_SOURCE_DIR "/configs/test/preempt.yaml", {});
  ASSERT_TRUE(config.ok()) << config.status();
  auto run_dir = RunDir::Create(*config, dir / "run");
  ASSERT_TRUE(run_dir.ok()) << run_dir.status();
  auto fresh = Checkpointer::Open(*config, *run_dir, "auto");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE((*fresh)->resume_cursor().has_value());
  EXPECT_EQ((*fresh)->ModelDir(), config->model.path);

  auto missing = Checkpointer::Open(*config, *run_dir, dir / "nowhere");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nowhere"), std::string::npos) << missing.status();

  // A checkpoint of a stage this config does not have is unusable, explicitly or by auto.
  auto m = SmallModel();
  auto engine = EngineWithSamples(*m);
  TrainState state = StateWithInflight(*engine);
  state.cursor.stage = "opd";
  auto writer = ckpt::CheckpointWriter::Begin(run_dir->checkpoints_path(), 9);
  ASSERT_TRUE(writer.ok());
  const std::string tokenizer = dir.Write("tokenizer.json", "{}");
  auto meta = WriteTrainState(state, *m, tokenizer, *config, writer->dir());
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto committed = writer->Commit(*meta);
  ASSERT_TRUE(committed.ok());
  auto explicit_path = Checkpointer::Open(*config, *run_dir, *committed);
  ASSERT_FALSE(explicit_path.ok());
  EXPECT_NE(explicit_path.status().message().find("stage 'opd'"), std::string::npos)
      << explicit_path.status();
  auto automatic = Checkpointer::Open(*config, *run_dir, "auto");
  ASSERT_FALSE(automatic.ok());
  EXPECT_NE(automatic.status().message().find("no usable checkpoint"), std::string::npos)
      << automatic.status();
}

TEST(CheckpointerTest, CkptSectionRejectsBadValues) {
  for (const std::string bad : {"ckpt.keep_last=0", "ckpt.every_steps=-1",
                                "ckpt.preempt_deadline_s=0", "ckpt.every_minutes=x"}) {
    auto config = config::LoadRunConfig(LOOM_SOURCE_DIR "/configs/test/preempt.yaml", {bad});
    ASSERT_FALSE(config.ok()) << bad;
    const std::string key = bad.substr(0, bad.find('='));
    EXPECT_NE(config.status().message().find(key), std::string::npos) << config.status();
  }
}

TEST(CkptBenchTest, QuickRunRestoresKvWithoutPrefill) {
  auto result = loom::testing::RunLoom("bench ckpt --quick --samples 4 --prompt-tokens 16");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string last = result.out.substr(result.out.rfind('{'));
  auto json = nlohmann::json::parse(last);
  EXPECT_EQ(json["resume_prefill_tokens"], 0);
  EXPECT_EQ(json["reprefill_tokens"], 4 * (16 + 4));
  EXPECT_GT(json["checkpoint_bytes"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace loom::train
