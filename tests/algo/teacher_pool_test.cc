// TeacherPool over real model directories: LRU residency under a byte
// budget, and the checks Open makes on every teacher (vocabulary, tokenizer,
// files, size).

#include "loom/algo/teacher_pool.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/model/init.h"
#include "loom/tokenizer/tiny.h"
#include "testing/temp_dir.h"

namespace loom::algo {
namespace {

using loom::testing::TempDir;
using Json = nlohmann::ordered_json;

// Four teachers of different architectures and widths, similar in size, so
// that any two fit in the budget of TwoTeacherBudget and no three do.
struct TeacherDirs {
  TempDir dir;
  std::vector<TeacherSpec> specs;
  std::vector<std::string> archs = {"llama", "qwen3", "qwen3_moe", "qwen2"};
  std::vector<int64_t> widths = {32, 40, 36, 44};

  TeacherDirs() {
    for (size_t i = 0; i < archs.size(); ++i) {
      const std::string name = archs[i] + "-" + std::to_string(i);
      specs.push_back({name, dir / name});
      Make(specs.back().path, archs[i], widths[i], {});
    }
  }

  // A model directory as `loom init-model` writes it (tiny tokenizer included).
  static void Make(const std::string& path, const std::string& arch, int64_t width,
                   std::vector<std::string> extra) {
    model::InitModelOptions options;
    options.arch = arch;
    options.out_dir = path;
    options.overrides = {"hidden_size=" + std::to_string(width),
                         "intermediate_size=48",
                         "num_hidden_layers=1",
                         "num_attention_heads=2",
                         "num_key_value_heads=1",
                         "head_dim=16"};
    if (arch == "qwen3_moe") options.overrides.push_back("moe_intermediate_size=16");
    for (std::string& e : extra) options.overrides.push_back(std::move(e));
    ASSERT_TRUE(model::InitModelDir(options).ok()) << path;
  }
};

std::unique_ptr<tokenizer::Tokenizer> StudentTokenizer() {
  return std::move(*tokenizer::Tokenizer::FromJson(tokenizer::TinyTokenizerJson(), "tiny"));
}

const int64_t kVocab = tokenizer::TinyTokenizerVocabSize();

absl::StatusOr<std::unique_ptr<TeacherPool>> OpenPool(std::vector<TeacherSpec> specs,
                                                      TeacherPoolOptions options = {}) {
  static const std::unique_ptr<tokenizer::Tokenizer> student =
      StudentTokenizer();  // outlives pools
  return TeacherPool::Open(std::move(specs), kVocab, *student, options);
}

int64_t ResidentSum(const TeacherPool& pool) {
  int64_t sum = 0;
  for (int slot : pool.ResidentSlots()) sum += pool.bytes(slot);
  return sum;
}

// What Open reports for each teacher is what the loaded model holds.
TEST(TeacherPoolTest, BytesAreTheLoadedParameterBytesInThePoolDtype) {
  TeacherDirs teachers;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto pool = OpenPool(teachers.specs, {dtype, at::kCPU, 0});
    ASSERT_TRUE(pool.ok()) << pool.status();
    for (int slot = 0; slot < (*pool)->size(); ++slot) {
      auto direct = model::Transformer::Load(teachers.specs[slot].path, {dtype});
      ASSERT_TRUE(direct.ok()) << direct.status();
      EXPECT_EQ((*pool)->bytes(slot), (*direct)->ParameterBytes()) << slot;
      EXPECT_EQ((*pool)->name(slot), teachers.specs[slot].name);
      auto model = (*pool)->Acquire(slot);
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_EQ((*model)->dtype(), dtype);
    }
  }
}

// A budget for two of the four teachers: residency is LRU with room for two;
// resident bytes never pass the budget.
TEST(TeacherPoolTest, BudgetKeepsTheTwoMostRecentlyUsed) {
  TeacherDirs teachers;
  auto opened = OpenPool(teachers.specs);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::vector<int64_t> bytes;
  for (int slot = 0; slot < 4; ++slot) bytes.push_back((*opened)->bytes(slot));
  std::sort(bytes.begin(), bytes.end());
  const int64_t budget = bytes[2] + bytes[3];
  ASSERT_GT(bytes[0] + bytes[1] + bytes[2], budget) << "three teachers must not fit";

  auto pool = *OpenPool(teachers.specs, {at::kFloat, at::kCPU, budget});
  struct Expect {
    int acquire;
    std::vector<int> resident;  // least recently used first
    int64_t loads, evictions;
  };
  const std::vector<Expect> steps = {
      {0, {0}, 1, 0},    {1, {0, 1}, 2, 0}, {0, {1, 0}, 2, 0}, {2, {0, 2}, 3, 1},
      {3, {2, 3}, 4, 2}, {1, {3, 1}, 5, 3}, {3, {1, 3}, 5, 3}, {3, {1, 3}, 5, 3},
  };
  std::map<int, const model::Transformer*> loaded;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Expect& step = steps[i];
    const bool was_resident = pool->resident(step.acquire);
    auto model = pool->Acquire(step.acquire);
    ASSERT_TRUE(model.ok()) << model.status();
    // A resident teacher is handed out as it is, not loaded again.
    if (was_resident) {
      EXPECT_EQ(*model, loaded.at(step.acquire)) << "step " << i;
    }
    loaded[step.acquire] = *model;
    // It really is that teacher.
    EXPECT_EQ((*model)->config().arch, teachers.archs[step.acquire]) << "step " << i;
    EXPECT_EQ((*model)->config().hidden_size, teachers.widths[step.acquire]) << "step " << i;
    EXPECT_EQ(pool->ResidentSlots(), step.resident) << "step " << i;
    for (int slot = 0; slot < 4; ++slot) {
      const bool listed = std::count(step.resident.begin(), step.resident.end(), slot) > 0;
      EXPECT_EQ(pool->resident(slot), listed) << "step " << i << " slot " << slot;
    }
    EXPECT_EQ(pool->stats().loads, step.loads) << "step " << i;
    EXPECT_EQ(pool->stats().evictions, step.evictions) << "step " << i;
    EXPECT_EQ(pool->stats().resident_bytes, ResidentSum(*pool)) << "step " << i;
    EXPECT_LE(pool->stats().resident_bytes, budget) << "step " << i;
  }
  EXPECT_LE(pool->stats().peak_bytes, budget);
  EXPECT_GE(pool->stats().peak_bytes, bytes[0] + bytes[1]);
  EXPECT_GT(pool->stats().load_seconds, 0);
}

// The pool's models are the teachers' weights from disk, without gradients.
TEST(TeacherPoolTest, AcquiredModelHoldsTheTeachersWeights) {
  TeacherDirs teachers;
  auto pool = *OpenPool(teachers.specs);
  for (int slot : {2, 0}) {
    auto model = pool->Acquire(slot);
    ASSERT_TRUE(model.ok()) << model.status();
    auto direct = *model::Transformer::Load(teachers.specs[slot].path, {});
    EXPECT_TRUE(at::equal((*model)->LmHead(), direct->LmHead())) << slot;
    for (const at::Tensor& p : (*model)->Parameters()) EXPECT_FALSE(p.requires_grad());
  }
}

TEST(TeacherPoolTest, ZeroBudgetKeepsEveryTeacher) {
  TeacherDirs teachers;
  auto pool = *OpenPool(teachers.specs, {at::kFloat, at::kCPU, 0});
  for (int slot : {3, 1, 0, 2, 1}) ASSERT_TRUE(pool->Acquire(slot).ok());
  EXPECT_EQ(pool->ResidentSlots(), (std::vector<int>{3, 0, 2, 1}));
  EXPECT_EQ(pool->stats().loads, 4);
  EXPECT_EQ(pool->stats().evictions, 0);
  int64_t all = 0;
  for (int slot = 0; slot < 4; ++slot) all += pool->bytes(slot);
  EXPECT_EQ(pool->stats().resident_bytes, all);
  EXPECT_EQ(pool->stats().peak_bytes, all);
}

// A budget of exactly one teacher's bytes holds it; a byte less refuses it.
TEST(TeacherPoolTest, TeacherLargerThanTheBudgetIsRefusedAtOpen) {
  TeacherDirs teachers;
  const int64_t largest = (*OpenPool(teachers.specs))->bytes(3);  // widest
  auto fits = OpenPool(teachers.specs, {at::kFloat, at::kCPU, largest});
  ASSERT_TRUE(fits.ok()) << fits.status();
  for (int slot : {0, 3, 1}) ASSERT_TRUE((*fits)->Acquire(slot).ok());
  EXPECT_EQ((*fits)->ResidentSlots(), std::vector<int>{1});
  EXPECT_EQ((*fits)->stats().evictions, 2);

  auto refused = OpenPool(teachers.specs, {at::kFloat, at::kCPU, largest - 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("'" + teachers.specs[3].name + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("teacher_memory_bytes"), std::string::npos) << message;
}

// A teacher whose weights went missing after Open fails to load with its name;
// the pool's accounting stays consistent.
TEST(TeacherPoolTest, FailedLoadNamesTheTeacher) {
  TeacherDirs teachers;
  auto pool = *OpenPool(teachers.specs);
  ASSERT_TRUE(pool->Acquire(0).ok());
  std::filesystem::remove(teachers.specs[1].path + "/model.safetensors");
  auto model = pool->Acquire(1);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(teachers.specs[1].name), std::string::npos)
      << model.status();
  EXPECT_FALSE(pool->resident(1));
  EXPECT_EQ(pool->stats().loads, 1);
  EXPECT_EQ(pool->stats().resident_bytes, ResidentSum(*pool));
}

// Open refuses a bad teacher listed after a good one, naming it and saying
// `why`; so does Add on an open pool (a live change), which then still has
// only its good teacher.
void ExpectRefused(const TeacherSpec& bad, const std::string& why) {
  TeacherDirs teachers;
  auto pool = OpenPool({teachers.specs[0], bad});
  ASSERT_FALSE(pool.ok()) << why;
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument) << pool.status();
  const std::string message(pool.status().message());
  EXPECT_NE(message.find("teacher '" + bad.name + "'"), std::string::npos) << message;
  EXPECT_NE(message.find(why), std::string::npos) << message;

  auto live = OpenPool({teachers.specs[0]});
  ASSERT_TRUE(live.ok()) << live.status();
  auto added = (*live)->Add(bad);
  ASSERT_FALSE(added.ok()) << why;
  EXPECT_EQ(added.status().message(), message);
  EXPECT_EQ((*live)->size(), 1);
  auto good = (*live)->Add(teachers.specs[1]);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, 1) << "an added teacher takes the next slot";
  EXPECT_EQ((*live)->name(1), teachers.specs[1].name);
}

// The tiny tokenizer.json with `change` applied.
std::string EditedTokenizer(void (*change)(Json&)) {
  Json doc = Json::parse(tokenizer::TinyTokenizerJson());
  change(doc);
  return doc.dump(2);
}

TEST(TeacherPoolOpenTest, RefusesAnotherTokenizerWithTheSameVocabSize) {
  TempDir dir;
  // Two byte tokens trade ids.
  const std::string swapped = dir / "swapped";
  TeacherDirs::Make(swapped, "llama", 32, {});
  dir.Write("swapped/tokenizer.json", EditedTokenizer([](Json& doc) {
              Json& vocab = doc["model"]["vocab"];
              std::swap(vocab["a"], vocab["b"]);
            }));
  ExpectRefused({"swapped", swapped},
                "tokenizer differs from the student's (first at token id 97)");
  // A special token made ordinary.
  const std::string plain = dir / "plain";
  TeacherDirs::Make(plain, "qwen3", 32, {});
  dir.Write("plain/tokenizer.json",
            EditedTokenizer([](Json& doc) { doc["added_tokens"][0]["special"] = false; }));
  ExpectRefused({"plain", plain}, "tokenizer differs from the student's (first at token id 256)");
  // One more token than the student's.
  const std::string longer = dir / "longer";
  TeacherDirs::Make(longer, "qwen2", 32, {});
  dir.Write("longer/tokenizer.json", EditedTokenizer([](Json& doc) {
              Json extra = doc["added_tokens"].back();
              extra["id"] = tokenizer::TinyTokenizerVocabSize();
              extra["content"] = "<|loom_extra|>";
              doc["added_tokens"].push_back(extra);
            }));
  ExpectRefused({"longer", longer}, "tokenizer differs from the student's (first at token id " +
                                        std::to_string(kVocab) + ")");
}

TEST(TeacherPoolOpenTest, RefusesAnotherVocabSize) {
  TempDir dir;
  const std::string path = dir / "wide-vocab";
  TeacherDirs::Make(path, "llama", 32, {"vocab_size=" + std::to_string(kVocab + 3)});
  ExpectRefused({"wide-vocab", path}, "vocab_size " + std::to_string(kVocab + 3) + " differs");
}

TEST(TeacherPoolOpenTest, RefusesMissingFiles) {
  TempDir dir;
  const std::string path = dir / "no-tokenizer";
  TeacherDirs::Make(path, "llama", 32, {});
  std::filesystem::remove(path + "/tokenizer.json");
  ExpectRefused({"no-tokenizer", path}, "tokenizer.json");
  ExpectRefused({"nowhere", dir / "does-not-exist"}, "config.json");
}

}  // namespace
}  // namespace loom::algo
