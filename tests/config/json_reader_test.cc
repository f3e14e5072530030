// JsonReader: the typed fields of an untrusted document, with errors that
// name the document and the field's path, and no silent conversions.
#include "loom/config/json_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {
namespace {

using nlohmann::json;

TEST(JsonReaderTest, ReadsRequiredAndOptionalFields) {
  const json doc = {
      {"name", "grpo"}, {"step", 12}, {"ids", {3, 4}}, {"rate", 0.5}, {"skip", nullptr}};
  JsonReader read("state.json");
  std::string name;
  int64_t step = 0;
  std::vector<uint64_t> ids;
  double rate = 0;
  int skip = 7, absent = 9;
  read.Get(doc, "name", name);
  read.Get(doc, "step", step);
  read.Get(doc, "ids", ids);
  read.Get(doc, "rate", rate);
  read.GetOptional(doc, "skip", skip);
  read.GetOptional(doc, "absent", absent);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(name, "grpo");
  EXPECT_EQ(step, 12);
  EXPECT_EQ(ids, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(rate, 0.5);
  EXPECT_EQ(skip, 7) << "null leaves an optional field as it was";
  EXPECT_EQ(absent, 9);
}

TEST(JsonReaderTest, ErrorsNameTheDocumentAndTheFieldPath) {
  const json doc = {{"sampling", {{"top_k", "many"}}}};
  JsonReader read("ckpt/samples.json", absl::StatusCode::kDataLoss);
  int top_k = 0;
  double temperature = 0;
  read.Get(doc["sampling"], "top_k", top_k, "sampling");
  read.Get(doc["sampling"], "temperature", temperature, "sampling");
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsDataLoss(read.status()));
  EXPECT_EQ(read.status().message(),
            "ckpt/samples.json: field 'sampling.top_k' has the wrong type: \"many\"");
  ASSERT_EQ(read.errors().size(), 2u) << "every error is kept";
  EXPECT_EQ(read.errors()[1], "ckpt/samples.json: field 'sampling.temperature' is missing");
}

// nlohmann's own get<> turns 2.5 into 2 and -1 into 2^64 - 1.
TEST(JsonReaderTest, NoSilentNumericConversions) {
  struct Case {
    json value;
    bool as_int, as_uint8, as_uint64, as_bool, as_double;
  };
  const std::vector<Case> cases = {
      {json(3), true, true, true, false, true},
      {json(-1), true, false, false, false, true},
      {json(2.5), false, false, false, false, true},
      {json(300), true, false, true, false, true},
      {json(uint64_t{1} << 40), false, false, true, false, true},
      {json(true), false, false, false, true, false},
      {json("3"), false, false, false, false, false},
  };
  for (const Case& c : cases) {
    const json doc = {{"v", c.value}};
    auto reads = [&](auto out) {
      JsonReader read("doc");
      read.Get(doc, "v", out);
      return read.ok();
    };
    EXPECT_EQ(reads(int{0}), c.as_int) << c.value;
    EXPECT_EQ(reads(uint8_t{0}), c.as_uint8) << c.value;
    EXPECT_EQ(reads(uint64_t{0}), c.as_uint64) << c.value;
    EXPECT_EQ(reads(false), c.as_bool) << c.value;
    EXPECT_EQ(reads(0.0), c.as_double) << c.value;
  }
}

TEST(JsonReaderTest, NotAnObjectIsAnError) {
  JsonReader read("doc");
  int x = 0;
  read.Get(json::array(), "x", x);
  read.GetOptional(json(5), "x", x, "outer");
  ASSERT_EQ(read.errors().size(), 2u);
  EXPECT_EQ(read.errors()[0], "doc: field 'x' is missing");
  EXPECT_EQ(read.errors()[1], "doc: field 'outer' is not an object");
  read.Error("heads and width disagree");
  EXPECT_EQ(read.errors()[2], "doc: heads and width disagree");
}

}  // namespace
}  // namespace loom
