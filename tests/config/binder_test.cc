// The binder against a purpose-made struct that uses every supported field
// type, lists of structs and a cross-field rule.

#include <gtest/gtest.h>

#include "loom/config/binder.h"
#include "loom/config/dump.h"
#include "loom/config/tree.h"

namespace loom::config {
namespace {

struct Item {
  std::string name;
  double weight = 1.0;
  template <class V>
  void Visit(V& v) {
    v.Field("name", name, Doc("Item name.").Required());
    v.Field("weight", weight, Doc("Item weight.").Min(0));
  }
};

struct Inner {
  int64_t big = 5;
  std::vector<int> levels = {25, 50};
  template <class V>
  void Visit(V& v) {
    v.Field("big", big, Doc("A 64-bit integer."));
    v.Field("levels", levels, Doc("Levels.").Range(1, 100));
  }
  void Validate(ErrorSink& sink) const {
    for (size_t i = 1; i < levels.size(); ++i) {
      if (levels[i] <= levels[i - 1]) sink.Error("levels", "must be strictly increasing");
    }
  }
};

struct Everything {
  bool flag = false;
  int count = 3;
  double rate = 0.5;
  std::string mode = "a";
  std::vector<double> scales = {1.5};
  std::vector<std::string> tags;
  std::map<std::string, std::string> extra;
  Inner inner;
  std::vector<Item> items;
  template <class V>
  void Visit(V& v) {
    v.Field("flag", flag, Doc("A flag."));
    v.Field("count", count, Doc("A count.").Min(1).Max(10));
    v.Field("rate", rate, Doc("A rate."));
    v.Field("mode", mode, Doc("A mode.").OneOf({"a", "b"}));
    v.Field("scales", scales, Doc("Scales."));
    v.Field("tags", tags, Doc("Tags."));
    v.Field("extra", extra, Doc("Extra."));
    v.Section("inner", inner, Doc("Inner section."));
    v.List("items", items, Doc("Items."));
  }
};

std::vector<std::string> BindText(const std::string& yaml, Everything& out,
                                  const std::vector<std::string>& overrides = {}) {
  std::vector<ConfigError> errors;
  ConfigTree tree = ConfigTree::FromString(yaml, "t.yaml", errors);
  for (const auto& o : overrides) tree.ApplyOverride(o, errors);
  for (auto& e : Bind(tree, out)) errors.push_back(e);
  std::vector<std::string> lines;
  for (const auto& e : errors) lines.push_back(e.ToString());
  return lines;
}

TEST(BinderTest, BindsEveryFieldType) {
  Everything c;
  auto errors = BindText(R"(
flag: true
count: 7
rate: 2.5e-3
mode: b
scales: [0.25, 4]
tags: [x, "y z"]
extra: {hidden_size: 64, act: silu}
inner: {big: 9000000000, levels: [10, 20, 30]}
items:
  - {name: one}
  - {name: two, weight: 3}
)",
                         c);
  ASSERT_TRUE(errors.empty()) << errors[0];
  EXPECT_TRUE(c.flag);
  EXPECT_EQ(c.count, 7);
  EXPECT_DOUBLE_EQ(c.rate, 2.5e-3);
  EXPECT_EQ(c.mode, "b");
  EXPECT_EQ(c.scales, (std::vector<double>{0.25, 4}));
  EXPECT_EQ(c.tags, (std::vector<std::string>{"x", "y z"}));
  EXPECT_EQ(c.extra.at("hidden_size"), "64");
  EXPECT_EQ(c.inner.big, 9000000000LL);
  EXPECT_EQ(c.inner.levels, (std::vector<int>{10, 20, 30}));
  ASSERT_EQ(c.items.size(), 2u);
  EXPECT_EQ(c.items[1].name, "two");
  EXPECT_DOUBLE_EQ(c.items[0].weight, 1.0);
  EXPECT_DOUBLE_EQ(c.items[1].weight, 3.0);
}

TEST(BinderTest, ReportsEveryErrorWithLineAndKeyPath) {
  Everything c;
  auto errors = BindText(
      "flag: maybe\ncount: 11\nrate: fast\nmode: c\n"
      "inner:\n  levels: [10, abc, 200]\n  bigg: 1\n"
      "items:\n  - {weight: -1}\n",
      c);
  ASSERT_EQ(errors.size(), 9u);
  EXPECT_EQ(errors[0], "t.yaml:1:1: flag: expected true or false, got 'maybe'");
  EXPECT_EQ(errors[1],
            "t.yaml:2:1: count: out of range: expected a value between 1 and 10, got 11");
  EXPECT_EQ(errors[2], "t.yaml:3:1: rate: expected a number, got 'fast'");
  EXPECT_EQ(errors[3], "t.yaml:4:1: mode: expected one of 'a' 'b', got 'c'");
  EXPECT_EQ(errors[4], "t.yaml:6:16: inner.levels[1]: expected integers, got 'abc'");
  EXPECT_EQ(
      errors[5],
      "t.yaml:6:21: inner.levels[2]: out of range: expected a value between 1 and 100, got 200");
  EXPECT_EQ(errors[6], "t.yaml:7:3: inner.bigg: unknown key (did you mean 'big'?)");
  EXPECT_EQ(errors[7], "t.yaml:9:5: items[0].name: required key is missing");
  EXPECT_EQ(errors[8], "t.yaml:9:6: items[0].weight: out of range: expected a value >= 0, got -1");
}

TEST(BinderTest, CrossFieldRuleRunsOnlyOnValidFields) {
  Everything c;
  auto errors = BindText("inner: {levels: [50, 20]}\n", c);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "t.yaml:1:9: inner.levels: must be strictly increasing");
}

TEST(BinderTest, WrongShapes) {
  Everything c;
  auto errors = BindText("inner: 3\nitems: {name: x}\ntags: x\nextra: [1]\n", c);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0], "t.yaml:3:1: tags: expected a list of strings, got 'x'");
  EXPECT_EQ(errors[1], "t.yaml:4:1: extra: expected a map of scalars, got a list");
  EXPECT_EQ(errors[2], "t.yaml:1:1: inner: expected a map, got '3'");
  EXPECT_EQ(errors[3], "t.yaml:2:1: items: expected a list of maps, got a map");
}

TEST(BinderTest, OverridesAreTypeCheckedAndNamed) {
  Everything c;
  auto errors = BindText("count: 2\n", c,
                         {"count=4", "inner.levels=[1, 2, 3]", "items=[{name: z}]", "extra={a: 1}",
                          "inner.bog=3", "rate=x", "nokey", "=3", "a..b=1", "count.x=1"});
  ASSERT_EQ(errors.size(), 6u);
  EXPECT_EQ(errors[0],
            "--set nokey: expected key=value, +list=value (append) or ~key (remove), "
            "e.g. --set rollout.max_batch=32");
  EXPECT_EQ(errors[1],
            "--set =3: expected key=value, +list=value (append) or ~key (remove), "
            "e.g. --set rollout.max_batch=32");
  EXPECT_EQ(errors[2], "--set a..b=1: a..b: malformed key path");
  EXPECT_EQ(errors[3], "--set count.x=1: count: is not a map or a list, so it has no entry 'x'");
  EXPECT_EQ(errors[4], "--set rate=x: rate: expected a number, got 'x'");
  EXPECT_EQ(errors[5], "--set inner.bog=3: inner.bog: unknown key (did you mean 'big'?)");
  EXPECT_EQ(c.count, 4);
  EXPECT_EQ(c.inner.levels, (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(c.items.size(), 1u);
  EXPECT_EQ(c.items[0].name, "z");
  EXPECT_EQ(c.extra.at("a"), "1");
}

TEST(BinderTest, OverridesReachListEntriesByIndexAndByName) {
  Everything c;
  auto errors = BindText("items: [{name: one}, {name: two}, {name: three}]\n", c,
                         {"items.1.weight=2", "items[2].weight=3", "items.one.weight=0.5"});
  ASSERT_TRUE(errors.empty()) << errors[0];
  ASSERT_EQ(c.items.size(), 3u);
  EXPECT_DOUBLE_EQ(c.items[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(c.items[1].weight, 2.0);
  EXPECT_DOUBLE_EQ(c.items[2].weight, 3.0);
}

TEST(BinderTest, OverridesAppendAndRemoveListEntries) {
  Everything c;
  auto errors =
      BindText("items: [{name: one}, {name: two}, {name: three}]\n", c,
               {"~items.two", "+items={name: four, weight: 4}", "~items.0", "items.four.weight=5"});
  ASSERT_TRUE(errors.empty()) << errors[0];
  ASSERT_EQ(c.items.size(), 2u);
  EXPECT_EQ(c.items[0].name, "three");
  EXPECT_EQ(c.items[1].name, "four");
  EXPECT_DOUBLE_EQ(c.items[1].weight, 5.0);

  Everything fresh;
  errors = BindText("count: 2\n", fresh, {"+items={name: z}"});
  ASSERT_TRUE(errors.empty()) << errors[0];
  ASSERT_EQ(fresh.items.size(), 1u);
  EXPECT_EQ(fresh.items[0].name, "z");
}

TEST(BinderTest, BadListOverridesNameTheEntriesThereAre) {
  Everything c;
  auto errors = BindText("items: [{name: one}, {name: two}]\ncount: 2\n", c,
                         {"items.5.weight=1", "items.sort.weight=1", "+count=3", "+items.0={}",
                          "~items.nine", "~count=1", "items[1.weight=2", "items.1.weight=-1"});
  ASSERT_EQ(errors.size(), 8u);
  EXPECT_EQ(errors[0],
            "--set items.5.weight=1: items: no entry '5': give an index 0..1 or a name "
            "(one, two)");
  EXPECT_EQ(errors[1],
            "--set items.sort.weight=1: items: no entry 'sort': give an index 0..1 or a "
            "name (one, two)");
  EXPECT_EQ(errors[2], "--set +count=3: count: is not a list, so nothing can be appended to it");
  EXPECT_EQ(errors[3], "--set +items.0={}: items[0]: is a list entry: append with +items=VALUE");
  EXPECT_EQ(errors[4],
            "--set ~items.nine: items: no entry 'nine': give an index 0..1 or a name "
            "(one, two)");
  EXPECT_EQ(errors[5],
            "--set ~count=1: expected key=value, +list=value (append) or ~key "
            "(remove), e.g. --set rollout.max_batch=32");
  EXPECT_EQ(errors[6], "--set items[1.weight=2: items[1.weight: malformed key path");
  // Found while binding, the error points at the override that set it.
  EXPECT_EQ(errors[7],
            "--set items.1.weight=-1: items[1].weight: out of range: expected a value "
            ">= 0, got -1");
  EXPECT_EQ(c.count, 2);
}

TEST(BinderTest, DumpRoundTripsExactly) {
  Everything c;
  ASSERT_TRUE(BindText("rate: 0.1\nscales: [0.3, 1e-7, 3]\ntags: ['true', '1']\n"
                       "mode: b\nitems: [{name: 'x: y'}]\nextra: {k: v}\n",
                       c)
                  .empty());
  const std::string dumped = DumpYaml(c);
  Everything again;
  auto errors = BindText(dumped, again);
  ASSERT_TRUE(errors.empty()) << errors[0] << "\n" << dumped;
  EXPECT_EQ(DumpYaml(again), dumped);
  EXPECT_EQ(again.tags, (std::vector<std::string>{"true", "1"}));
  EXPECT_DOUBLE_EQ(again.rate, 0.1);
  EXPECT_EQ(again.scales, c.scales);
  EXPECT_EQ(again.items[0].name, "x: y");
}

TEST(BinderTest, FormatDoubleIsShortestExact) {
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(FormatDouble(3.0), "3.0");
  EXPECT_EQ(FormatDouble(900.0), "900.0");
  EXPECT_EQ(FormatDouble(-120.0), "-120.0");
  EXPECT_EQ(FormatDouble(1e20), "1e+20");
  EXPECT_EQ(FormatDouble(1e-7), "1e-07");
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::stod(FormatDouble(third)), third);
}

TEST(BinderTest, EditDistance) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("max_batch", "max_batch"), 0);
}

}  // namespace
}  // namespace loom::config
