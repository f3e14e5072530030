// The async loop with a trainer of its own (not GRPO): every batch it hands
// over is whole subgroups of finished samples, at least batch_samples of
// them, within the staleness bound, in step order; the policy version the
// trainer bumps is what the engine resumes at; samples that could not start
// drop their prompt group and never reach a trainer. A real tiny model and
// the real engine and dispatcher.

#include "loom/train/async_loop.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "loom/model/transformer.h"
#include "loom/v1/sandbox.pb.h"

namespace loom::train {
namespace {

std::unique_ptr<model::Transformer> TinyModel() {
  model::ModelConfig c = *model::DefaultModelConfig("llama");
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  return model::Transformer::RandomInit(c, 3, {at::kFloat, at::kCPU, /*requires_grad=*/false});
}

// Prompts of 4 tokens; every `poison`-th prompt group has one too long to
// start (the engine refuses it).
class Prompts : public PromptSource {
 public:
  explicit Prompts(int poison) : poison_(poison) {}
  Prompt Open(const dispatch::PromptGroup& group, const dispatch::Subgroup& subgroup,
              const dispatch::SampleTicket& ticket) override {
    const bool too_long = poison_ > 0 && group.prompt_id % poison_ == 0;
    Prompt prompt;
    prompt.entry.effort = subgroup.effort;
    prompt.entry.problem = std::make_shared<tasks::Problem>();
    rollout::SampleRequest request;
    request.prompt.assign(too_long ? 80 : prompt_length,
                          static_cast<int64_t>(group.prompt_id % 60) + 1);
    request.stop.max_new_tokens =
        same_length > 0 ? same_length : 1 + static_cast<int64_t>(ticket.sample_id % 9);
    prompt.request = std::move(request);
    (too_long ? refused : opened).insert(ticket.sample_id);
    return prompt;
  }
  absl::StatusOr<rollout::SampleRequest> Reopen(SampleEntry&) override {
    return absl::UnimplementedError("not resumed");
  }
  std::set<uint64_t> opened, refused;
  int64_t same_length = 0;  // > 0: every sample generates this many tokens
  int64_t prompt_length = 4;

 private:
  int poison_;
};

// Records what it was given and bumps the version.
class RecordingTrainer : public BatchTrainer {
 public:
  explicit RecordingTrainer(int64_t max_staleness) : max_staleness_(max_staleness) {}
  absl::StatusOr<TrainedStep> Train(const Batch& batch) override {
    steps.push_back(batch.step);
    std::map<uint64_t, int> per_subgroup;
    for (const TrainingSample& s : batch.samples) {
      EXPECT_EQ(s.state.id, s.info.id);
      EXPECT_FALSE(s.info.state.has_value()) << "the state moved to TrainingSample::state";
      EXPECT_GT(s.state.generated, 0);
      ++per_subgroup[s.info.subgroup_id];
      for (int64_t t = s.state.prompt_length; t < s.state.length(); ++t) {
        EXPECT_LE(version_ - s.state.versions[t], max_staleness_) << "sample " << s.state.id;
      }
      trained.insert(s.state.id);
    }
    for (const auto& [subgroup, count] : per_subgroup) EXPECT_EQ(count, 3) << subgroup;
    sizes.push_back(static_cast<int>(batch.samples.size()));
    return TrainedStep{{{"samples", batch.samples.size()}}, ++version_};
  }
  std::vector<int64_t> steps;
  std::vector<int> sizes;
  std::set<uint64_t> trained;

 private:
  int64_t version_ = 0;
  int64_t max_staleness_;
};

AsyncLoop::Options LoopOptions() {
  AsyncLoop::Options options;
  options.engine.max_batch = 16;
  options.engine.pool_tokens = 4096;
  options.dispatch.policy = "sample";
  options.dispatch.max_inflight = 12;
  options.dispatch.batch_samples = 6;
  options.dispatch.max_staleness = 1;
  options.dispatch.efforts = {{100, 3}};
  options.dispatch.datasets = {{"d", 1.0, 0}};
  return options;
}

TEST(AsyncLoopTest, HandsTheTrainerWholeSubgroupsInStepOrder) {
  auto model = TinyModel();
  auto loop = AsyncLoop::Create(*model, LoopOptions());
  ASSERT_TRUE(loop.ok()) << loop.status();
  Prompts prompts(/*poison=*/0);
  RecordingTrainer trainer(1);
  std::vector<int64_t> resumed_at;
  LoopHooks hooks;
  hooks.after_step = [&](int64_t done, const nlohmann::json& record) {
    EXPECT_EQ(done, (*loop)->step());
    EXPECT_TRUE(record.contains("decode_tokens")) << record.dump();
    resumed_at.push_back((*loop)->engine().policy_version());
    return absl::OkStatus();
  };
  ASSERT_TRUE((*loop)->Run(prompts, trainer, 5, hooks).ok());
  EXPECT_EQ((*loop)->step(), 5);
  EXPECT_EQ((*loop)->policy_version(), 5);
  EXPECT_EQ(trainer.steps, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(resumed_at, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  for (int size : trainer.sizes) EXPECT_GE(size, 6);
  // Everything trained was started, and nothing twice (sets would hide it).
  int total = 0;
  for (int size : trainer.sizes) total += size;
  EXPECT_EQ(static_cast<size_t>(total), trainer.trained.size());
  for (uint64_t id : trainer.trained) EXPECT_TRUE(prompts.opened.count(id)) << id;
  // Untrained samples are still in the table, the rest left it.
  for (uint64_t id : trainer.trained) EXPECT_EQ((*loop)->table().Find(id), nullptr);
  EXPECT_GT((*loop)->inflight().count, 0);
}

// A batch larger than what may be in flight: each wave of samples finishes
// in one engine step (the same lengths), leaving a part of a batch ready and
// nothing in flight. That is room to dispatch the next wave, not a stall.
// A group's samples share their prompt's full blocks; the step lines count it.
TEST(AsyncLoopTest, PrefixSharingIsCountedOnTheStepLine) {
  auto model = TinyModel();
  AsyncLoop::Options options = LoopOptions();
  options.engine.prefix_cache = true;
  auto loop = AsyncLoop::Create(*model, options);
  ASSERT_TRUE(loop.ok()) << loop.status();
  Prompts prompts(/*poison=*/0);
  prompts.prompt_length = 20;  // one full block of 16 and 4 tokens
  RecordingTrainer trainer(1);
  int64_t hits = 0;
  LoopHooks hooks;
  hooks.after_step = [&](int64_t, const nlohmann::json& record) {
    EXPECT_TRUE(record.contains("prefix_shared_blocks")) << record.dump();
    EXPECT_TRUE(record.contains("prefix_kv_bytes_saved")) << record.dump();
    EXPECT_TRUE(record.contains("prefix_evictions")) << record.dump();
    hits += record["prefix_hit_tokens"].get<int64_t>();
    return absl::OkStatus();
  };
  ASSERT_TRUE((*loop)->Run(prompts, trainer, 4, hooks).ok());
  // Each group of 3 computes its prompt once: the other two take 16 tokens each.
  EXPECT_GE(hits, 4 * 2 * 16);
  EXPECT_EQ(hits % 16, 0);
}

TEST(AsyncLoopTest, ABatchLargerThanTheInflightCapFillsOverWaves) {
  auto model = TinyModel();
  AsyncLoop::Options options = LoopOptions();
  options.dispatch.max_inflight = 3;  // one prompt group
  options.dispatch.batch_samples = 6;
  auto loop = AsyncLoop::Create(*model, options);
  ASSERT_TRUE(loop.ok()) << loop.status();
  Prompts prompts(/*poison=*/0);
  prompts.same_length = 4;
  RecordingTrainer trainer(1);
  const absl::Status run = (*loop)->Run(prompts, trainer, 3, LoopHooks());
  ASSERT_TRUE(run.ok()) << run;
  EXPECT_EQ(trainer.sizes, (std::vector<int>{6, 6, 6}));
}

TEST(AsyncLoopTest, SamplesThatCannotStartNeverReachTheTrainer) {
  auto model = TinyModel();
  auto loop = AsyncLoop::Create(*model, LoopOptions());
  ASSERT_TRUE(loop.ok()) << loop.status();
  Prompts prompts(/*poison=*/3);
  RecordingTrainer trainer(1);
  ASSERT_TRUE((*loop)->Run(prompts, trainer, 6, {}).ok());
  EXPECT_FALSE(prompts.refused.empty()) << "some prompt groups must have been too long";
  for (uint64_t id : trainer.trained) EXPECT_TRUE(prompts.opened.count(id)) << id;
  for (const auto& [id, entry] : (*loop)->table().entries()) {
    EXPECT_TRUE(prompts.opened.count(id)) << "failed sample " << id << " left in the table";
  }
}

TEST(SampleTableTest, TakeMovesFinishedSamplesOutInSubgroupOrder) {
  SampleTable table;
  for (uint64_t id : {1, 2, 3, 4}) {
    SampleEntry entry;
    entry.id = id;
    entry.subgroup_id = id <= 2 ? 10 : 20;
    table.Admit(std::move(entry));
  }
  for (uint64_t id : {4, 3, 2, 1}) {
    rollout::SampleState state;
    state.id = id;
    table.Finish(id, std::move(state));
  }
  EXPECT_EQ(table.finished(), 4u);
  dispatch::ReadySubgroup b, a;
  b.sample_ids = {3, 4};
  a.sample_ids = {2, 1};
  std::vector<TrainingSample> taken = table.Take({b, a});
  std::vector<uint64_t> order;
  for (const auto& s : taken) order.push_back(s.state.id);
  EXPECT_EQ(order, (std::vector<uint64_t>{3, 4, 2, 1}));
  EXPECT_TRUE(table.entries().empty());

  table.Fail(7, absl::InvalidArgumentError("too long"));
  EXPECT_EQ(table.TakeFailures().size(), 1u);
  EXPECT_TRUE(table.TakeFailures().empty()) << "failures are reported once";
}

TEST(MaskTest, InfrastructureFailuresLeaveTheBatchCountedByCause) {
  // id, failure_reason, penalty (infrastructure); id 7 is not an agent sample.
  const std::vector<std::tuple<uint64_t, std::string, bool>> episodes = {
      {1, "", false},
      {2, "worker_lost: Socket closed", true},
      {3, "time_limit", false},
      {4, "no_sandbox: after 5 placement attempts: refused", true},
      {5, "worker_lost: Connection reset", true},
      {6, "step_limit", false}};
  std::vector<TrainingSample> samples;
  for (const auto& [id, reason, penalty] : episodes) {
    v1::Trajectory trajectory;  // as a worker reports it
    trajectory.set_failure_reason(reason);
    trajectory.set_penalty(penalty);
    TrainingSample sample;
    sample.state.id = id;
    sample.info.agent = true;
    sample.info.outcome = agent::OutcomeOf(trajectory);
    samples.push_back(std::move(sample));
  }
  samples.emplace_back().state.id = 7;
  std::map<std::string, int64_t> by_cause = {{"worker_lost", 1}};  // from an earlier batch
  std::vector<TrainingSample> masked;
  MaskInfrastructureFailures(samples, by_cause, &masked);
  std::vector<uint64_t> kept, taken;
  for (const TrainingSample& s : samples) kept.push_back(s.state.id);
  for (const TrainingSample& s : masked) taken.push_back(s.state.id);
  EXPECT_EQ(kept, (std::vector<uint64_t>{1, 3, 6, 7})) << "the agent's own failures stay";
  EXPECT_EQ(taken, (std::vector<uint64_t>{2, 4, 5}));
  EXPECT_EQ(by_cause, (std::map<std::string, int64_t>{{"worker_lost", 3}, {"no_sandbox", 1}}));
}

}  // namespace
}  // namespace loom::train
