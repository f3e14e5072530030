#include "loom/algo/teacher_pool.h"

#include <algorithm>
#include <chrono>

#include <c10/core/ScalarType.h>

#include "absl/strings/str_cat.h"
#include "loom/model/config.h"

namespace loom::algo {
namespace {

// The first id whose token differs between the two tokenizers, or -1.
int32_t FirstDifference(const tokenizer::Tokenizer& a, const tokenizer::Tokenizer& b) {
  if (a.VocabSize() != b.VocabSize()) return std::min(a.VocabSize(), b.VocabSize());
  for (int32_t id = 0; id < a.VocabSize(); ++id) {
    if (a.IdToToken(id) != b.IdToToken(id) || a.IsSpecial(id) != b.IsSpecial(id)) return id;
  }
  return -1;
}

// The teacher's config, once its vocabulary is checked against the student's.
absl::StatusOr<model::ModelConfig> CheckTeacher(const TeacherSpec& spec, int64_t vocab_size,
                                                const tokenizer::Tokenizer& student) {
  const std::string who = "teacher '" + spec.name + "' (" + spec.path + ")";
  auto config = model::LoadModelConfig(spec.path);
  if (!config.ok())
    return absl::InvalidArgumentError(who + ": " + std::string(config.status().message()));
  if (config->vocab_size != vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": vocab_size ", config->vocab_size, " differs from the student's ",
                     vocab_size, "; teachers must share the student's tokenizer"));
  }
  auto tokenizer = tokenizer::Tokenizer::FromFile(spec.path + "/tokenizer.json");
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(who + ": " + std::string(tokenizer.status().message()) +
                                      "; teachers must share the student's tokenizer");
  }
  const int32_t differs = FirstDifference(**tokenizer, student);
  if (differs >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": its tokenizer differs from the student's (first at token id ", differs,
                     "); teachers must share the student's tokenizer"));
  }
  return config;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TeacherPool>> TeacherPool::Open(
    std::vector<TeacherSpec> teachers, int64_t vocab_size,
    const tokenizer::Tokenizer& student_tokenizer, const TeacherPoolOptions& options) {
  std::unique_ptr<TeacherPool> pool(new TeacherPool(options, vocab_size, student_tokenizer));
  for (TeacherSpec& spec : teachers) {
    auto slot = pool->Add(std::move(spec));
    if (!slot.ok()) return slot.status();
  }
  return pool;
}

absl::StatusOr<int64_t> TeacherPool::Check(const TeacherSpec& spec) const {
  auto config = CheckTeacher(spec, vocab_size_, student_tokenizer_);
  if (!config.ok()) return config.status();
  const int64_t bytes = model::Transformer::ParameterCount(*config) *
                        static_cast<int64_t>(c10::elementSize(options_.dtype));
  if (options_.memory_bytes > 0 && bytes > options_.memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "teacher '", spec.name, "' (", spec.path, ") needs ", bytes,
        " bytes of parameters, more than opd.teacher_memory_bytes (", options_.memory_bytes, ")"));
  }
  return bytes;
}

absl::StatusOr<int> TeacherPool::Add(TeacherSpec spec) {
  auto bytes = Check(spec);
  if (!bytes.ok()) return bytes.status();
  Teacher teacher;
  teacher.bytes = *bytes;
  teacher.spec = std::move(spec);
  teachers_.push_back(std::move(teacher));
  return size() - 1;
}

void TeacherPool::Evict(int slot) {
  Teacher& teacher = teachers_[slot];
  teacher.model.reset();
  stats_.resident_bytes -= teacher.bytes;
  lru_.remove(slot);
  ++stats_.evictions;
}

absl::StatusOr<const model::Transformer*> TeacherPool::Acquire(int slot) {
  Teacher& teacher = teachers_.at(slot);
  if (teacher.model != nullptr) {
    lru_.remove(slot);
    lru_.push_back(slot);
    return teacher.model.get();
  }
  while (options_.memory_bytes > 0 && !lru_.empty() &&
         stats_.resident_bytes + teacher.bytes > options_.memory_bytes) {
    Evict(lru_.front());
  }
  const auto start = std::chrono::steady_clock::now();
  auto loaded =
      model::Transformer::Load(teacher.spec.path, {options_.dtype, options_.device, false});
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(), "teacher '" + teacher.spec.name +
                                                    "': " + std::string(loaded.status().message()));
  }
  stats_.load_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.loads;
  teacher.model = *std::move(loaded);
  stats_.resident_bytes += teacher.bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.resident_bytes);
  lru_.push_back(slot);
  return teacher.model.get();
}

}  // namespace loom::algo
