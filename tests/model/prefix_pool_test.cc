// KvBlockPool prefix sharing: the prefix index, copy on write, eviction
// order, and a random-operation property test of the pool's accounting.

#include <algorithm>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "loom/model/kv_pool.h"

namespace loom::model {
namespace {

KvPoolOptions Pool(int64_t blocks) {
  KvPoolOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 1;
  o.head_dim = 2;
  o.block_size = 4;
  o.num_blocks = blocks;
  return o;
}

// What the model would store for token t of `tokens`: a function of the whole
// prefix tokens[0, t], so a block is only valid after the same prefix.
float Content(const std::vector<int64_t>& tokens, int64_t t) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t i = 0; i <= t; ++i)
    h = (h ^ static_cast<uint64_t>(tokens[i] + 7)) * 1099511628211ULL;
  return static_cast<float>(h % 100003);
}

// Extends `seq` to `tokens.size()` tokens as Transformer::Step does: reserve,
// write the new tokens' K/V, advance the length.
absl::Status Write(KvBlockPool& pool, KvSequence& seq, const std::vector<int64_t>& tokens) {
  const int64_t end = static_cast<int64_t>(tokens.size());
  if (absl::Status s = pool.Reserve(seq, end); !s.ok()) return s;
  const at::Tensor slots = pool.Slots(seq, seq.length, end);
  for (int64_t i = 0; i < slots.size(0); ++i) {
    const float value = Content(tokens, seq.length + i);
    for (int64_t l = 0; l < pool.options().num_layers; ++l) {
      pool.key(l).flatten(0, 1)[slots[i].item<int64_t>()].fill_(value);
      pool.value(l).flatten(0, 1)[slots[i].item<int64_t>()].fill_(-value);
    }
  }
  seq.length = end;
  return absl::OkStatus();
}

// Every cached token of `seq` holds what its own prefix would compute.
bool HoldsItsOwnPrefix(const KvBlockPool& pool, const KvSequence& seq,
                       const std::vector<int64_t>& tokens) {
  if (seq.length == 0) return true;
  const at::Tensor slots = pool.Slots(seq, 0, seq.length);
  std::vector<float> expected;
  for (int64_t t = 0; t < seq.length; ++t) expected.push_back(Content(tokens, t));
  const at::Tensor want = at::tensor(expected);
  for (int64_t l = 0; l < pool.options().num_layers; ++l) {
    const at::Tensor keys = pool.key(l).flatten(0, 1).index_select(0, slots);
    const at::Tensor values = pool.value(l).flatten(0, 1).index_select(0, slots);
    if (!at::equal(keys.select(1, 0).select(1, 0), want) ||
        !at::equal(values.select(1, 0).select(1, 1), -want)) {
      return false;
    }
  }
  return true;
}

std::vector<int64_t> Tokens(std::initializer_list<int64_t> head, int64_t length) {
  std::vector<int64_t> t(head);
  while (static_cast<int64_t>(t.size()) < length) t.push_back(static_cast<int64_t>(t.size()) % 5);
  return t;
}

TEST(PrefixPoolTest, ASequenceTakesTheLongestPublishedChainOfItsVersion) {
  KvBlockPool pool(Pool(8));
  const std::vector<int64_t> prompt = Tokens({1, 2, 3}, 10);  // 2 full blocks and 2 tokens
  KvSequence a;
  a.version = 3;
  ASSERT_TRUE(Write(pool, a, prompt).ok());
  pool.Publish(a, prompt);
  EXPECT_EQ(a.published, 2);
  EXPECT_TRUE(pool.published(a.blocks[1]));
  EXPECT_FALSE(pool.published(a.blocks[2]));  // partial

  KvSequence b;
  EXPECT_EQ(pool.AcquirePrefix(b, prompt, 3), 8);
  EXPECT_EQ(b.blocks, std::vector<int32_t>(a.blocks.begin(), a.blocks.begin() + 2));
  EXPECT_EQ(b.version, 3);
  EXPECT_EQ(pool.references(a.blocks[0]), 2);
  EXPECT_EQ(pool.shared_references(), 2);
  EXPECT_EQ(pool.used_blocks(), 3);

  std::vector<int64_t> other = prompt;
  other[5] = 4;  // differs inside the second block
  EXPECT_EQ(pool.MatchPrefix(other, 0), 4);
  other[0] = 4;  // and in the first: the chain has no such root
  EXPECT_EQ(pool.MatchPrefix(other, 0), 0);
  EXPECT_EQ(pool.MatchPrefix(prompt, 4), 0);  // too old for a lag that ends at 4
  pool.Free(a);
  pool.Free(b);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.cached_blocks(), 2);
  EXPECT_EQ(pool.free_blocks(), 8);  // cached blocks count as available
}

TEST(PrefixPoolTest, WritesCopyASharedBlockFirstAtItsStartAndInsideIt) {
  KvBlockPool pool(Pool(8));
  const std::vector<int64_t> prompt = Tokens({1, 2}, 8);
  KvSequence a;
  a.version = 0;
  ASSERT_TRUE(Write(pool, a, prompt).ok());
  pool.Publish(a, prompt);

  // Inside a block: b keeps 6 of the 8 shared tokens and writes its own 2.
  KvSequence b;
  ASSERT_EQ(pool.AcquirePrefix(b, prompt, 0), 8);
  pool.Truncate(b, 6);
  std::vector<int64_t> mine = prompt;
  mine[6] = 9;
  mine[7] = 9;
  EXPECT_EQ(pool.BlocksToReserve(b, 8), 1);  // the copy
  ASSERT_TRUE(Write(pool, b, mine).ok());
  EXPECT_EQ(b.blocks[0], a.blocks[0]);  // the untouched block stays shared
  EXPECT_NE(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(b.published, 1);
  EXPECT_TRUE(HoldsItsOwnPrefix(pool, a, prompt));
  EXPECT_TRUE(HoldsItsOwnPrefix(pool, b, mine));

  // At a block boundary: c keeps the first shared block and writes a block
  // of its own after it; nothing needs copying.
  KvSequence c;
  ASSERT_EQ(pool.AcquirePrefix(c, prompt, 0), 8);
  pool.Truncate(c, 4);
  std::vector<int64_t> theirs = prompt;
  theirs[4] = 8;
  ASSERT_TRUE(Write(pool, c, theirs).ok());
  EXPECT_EQ(c.blocks[0], a.blocks[0]);
  EXPECT_NE(c.blocks[1], a.blocks[1]);
  EXPECT_EQ(pool.references(a.blocks[0]), 3);
  EXPECT_TRUE(HoldsItsOwnPrefix(pool, a, prompt));
  EXPECT_TRUE(HoldsItsOwnPrefix(pool, c, theirs));
  EXPECT_EQ(pool.prefix_counters().copies, 1);

  // Appending past the shared blocks copies nothing.
  KvSequence d;
  ASSERT_EQ(pool.AcquirePrefix(d, prompt, 0), 8);
  std::vector<int64_t> longer = Tokens({1, 2}, 12);
  EXPECT_EQ(pool.BlocksToReserve(d, 12), 1);
  ASSERT_TRUE(Write(pool, d, longer).ok());
  EXPECT_EQ(d.blocks[1], a.blocks[1]);
  EXPECT_EQ(pool.prefix_counters().copies, 1);
}

TEST(PrefixPoolTest, ExhaustionEvictsCachedBlocksLeafFirstAndNeverAHeldOne) {
  KvBlockPool pool(Pool(5));
  const std::vector<int64_t> first = Tokens({1}, 8), second = Tokens({2}, 8);
  KvSequence a, c;
  a.version = c.version = 0;
  ASSERT_TRUE(Write(pool, a, first).ok());
  pool.Publish(a, first);
  pool.Free(a);  // idle: a1, a0
  ASSERT_TRUE(Write(pool, c, second).ok());
  pool.Publish(c, second);
  pool.Free(c);  // idle: a1, a0, c1, c0
  ASSERT_EQ(pool.cached_blocks(), 4);

  // Two blocks beyond the free one: a's tail goes first, then its head.
  KvSequence d;
  d.version = 0;
  ASSERT_TRUE(pool.Reserve(d, 8).ok());
  EXPECT_EQ(pool.prefix_counters().evictions, 1);
  EXPECT_EQ(pool.MatchPrefix(first, 0), 4);  // a0 is left, a1 is gone
  ASSERT_TRUE(pool.Reserve(d, 12).ok());
  EXPECT_EQ(pool.MatchPrefix(first, 0), 0);
  EXPECT_EQ(pool.MatchPrefix(second, 0), 8);

  // A taken prefix is held: a reserve that would need it fails instead.
  KvSequence e;
  ASSERT_EQ(pool.AcquirePrefix(e, second, 0), 8);
  EXPECT_EQ(pool.free_blocks(), 0);
  KvSequence f;
  EXPECT_EQ(pool.Reserve(f, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(f.blocks.empty());
  EXPECT_EQ(pool.MatchPrefix(second, 0), 8);
  pool.Free(e);
  pool.Free(d);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(PrefixPoolTest, DropCachedEvictsOnlyTooOldIdleBlocks) {
  KvBlockPool pool(Pool(8));
  const std::vector<int64_t> old_prompt = Tokens({1}, 4), new_prompt = Tokens({2}, 4);
  KvSequence a, b, held;
  a.version = 0;
  b.version = 1;
  ASSERT_TRUE(Write(pool, a, old_prompt).ok());
  ASSERT_TRUE(Write(pool, b, new_prompt).ok());
  pool.Publish(a, old_prompt);
  pool.Publish(b, new_prompt);
  ASSERT_EQ(pool.AcquirePrefix(held, old_prompt, 0), 4);
  pool.Free(a);
  pool.Free(b);
  pool.DropCached(1);
  EXPECT_EQ(pool.MatchPrefix(old_prompt, 0), 4);  // still held by `held`
  EXPECT_EQ(pool.MatchPrefix(new_prompt, 1), 4);
  pool.Free(held);
  pool.DropCached(1);
  EXPECT_EQ(pool.MatchPrefix(old_prompt, 0), 0);
  EXPECT_EQ(pool.cached_blocks(), 1);
}

TEST(PrefixPoolTest, ASnapshotTakesBackOnlyBlocksThatHoldItsBits) {
  KvBlockPool pool(Pool(12));
  pool.set_keep_released(false);
  const std::vector<int64_t> prompt = Tokens({4}, 14);  // 3 full blocks and 2 tokens
  KvSequence a;
  a.version = 2;
  ASSERT_TRUE(Write(pool, a, prompt).ok());
  pool.Publish(a, prompt);
  const KvSnapshot snapshot = pool.Export(a);
  EXPECT_EQ(snapshot.version, 2);
  EXPECT_EQ(snapshot.published, 3);

  KvSequence b;
  EXPECT_EQ(pool.AcquireSnapshotPrefix(b, snapshot, prompt), 12);
  ASSERT_TRUE(pool.Import(snapshot, b).ok());  // the 2 tokens after the shared blocks
  EXPECT_EQ(b.length, 14);
  EXPECT_EQ(b.version, 2);
  EXPECT_TRUE(std::equal(b.blocks.begin(), b.blocks.begin() + 3, a.blocks.begin()));
  EXPECT_TRUE(HoldsItsOwnPrefix(pool, b, prompt));

  KvSnapshot changed = snapshot;
  changed.key = snapshot.key.clone();
  changed.key[1][5].fill_(-1);  // a bit of the second block differs
  KvSequence c;
  EXPECT_EQ(pool.AcquireSnapshotPrefix(c, changed, prompt), 4);
  pool.Free(c);
  KvSnapshot fewer = snapshot;
  fewer.published = 1;  // it had published one block: it takes no more
  EXPECT_EQ(pool.AcquireSnapshotPrefix(c, fewer, prompt), 4);
  pool.Free(c);
  KvSnapshot unknown = snapshot;
  unknown.version = KvSequence::kUnknownVersion;
  EXPECT_EQ(pool.AcquireSnapshotPrefix(c, unknown, prompt), 0);

  // Without keep_released the last holder's release frees the blocks.
  pool.Free(a);
  pool.Free(b);
  EXPECT_EQ(pool.cached_blocks(), 0);
  EXPECT_EQ(pool.MatchPrefix(prompt, 0), 0);
  EXPECT_EQ(pool.free_blocks(), 12);
}

TEST(PrefixPoolTest, OneEntryPerChainPositionAndVersion) {
  KvBlockPool pool(Pool(8));
  const std::vector<int64_t> prompt = Tokens({6}, 8);
  KvSequence a, b;
  a.version = b.version = 0;
  ASSERT_TRUE(Write(pool, a, prompt).ok());
  ASSERT_TRUE(Write(pool, b, prompt).ok());  // computed twice, side by side
  pool.Publish(a, prompt);
  pool.Publish(b, prompt);
  EXPECT_EQ(a.published, 2);
  EXPECT_EQ(b.published, 0);  // its twin is published: it stays private
  EXPECT_EQ(pool.prefix_counters().published, 2);
}

TEST(PrefixPoolTest, PublishedRowsTravelWithTheirBlocks) {
  KvBlockPool pool(Pool(4));
  const std::vector<int64_t> prompt = Tokens({3}, 9);
  std::vector<int16_t> rows;
  for (int16_t i = 0; i < 9 * 2; ++i) rows.push_back(i);
  KvSequence a;
  a.version = 0;
  ASSERT_TRUE(Write(pool, a, prompt).ok());
  pool.Publish(a, prompt, &rows, 2);
  EXPECT_EQ(pool.PublishedRows(a.blocks[1]),
            std::vector<int16_t>(rows.begin() + 8, rows.begin() + 16));
}

// 10,000 random adds, appends, forks, finishes, exports, imports, truncations
// and evictions over a small pool and a two-letter alphabet (so prefixes
// collide often). After every operation each block's reference count is the
// number of live sequences that hold it, the pool's accounting balances, and
// every sequence reads the K/V of its own prefix.
TEST(PrefixPoolTest, RandomOperationsKeepReferencesAndContentsExact) {
  KvBlockPool pool(Pool(24));
  std::mt19937_64 rng(20261208);
  struct Live {
    KvSequence seq;
    std::vector<int64_t> tokens;
  };
  std::map<int, Live> live;
  std::vector<std::pair<KvSnapshot, std::vector<int64_t>>> exported;
  int next = 0;
  int64_t version = 0;
  auto draw = [&](int64_t n) { return static_cast<int64_t>(rng() % n); };
  auto random_tokens = [&](int64_t length) {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < length; ++i) t.push_back(draw(2) * (i % 3 == 0 ? 1 : 0));
    return t;
  };
  int64_t shared_seen = 0, evictions_seen = 0;
  for (int op = 0; op < 10000; ++op) {
    const int64_t kind = draw(9);
    auto pick = [&]() -> std::map<int, Live>::iterator {
      if (live.empty()) return live.end();
      auto it = live.begin();
      std::advance(it, draw(static_cast<int64_t>(live.size())));
      return it;
    };
    if (kind <= 1 || live.empty()) {  // add: take a prefix, compute the rest
      Live l;
      l.tokens = random_tokens(1 + draw(20));
      pool.AcquirePrefix(l.seq, l.tokens, version - draw(2));
      if (l.seq.length == 0) l.seq.version = version;
      if (Write(pool, l.seq, l.tokens).ok()) {
        pool.Publish(l.seq, l.tokens);
        live.emplace(next++, std::move(l));
      } else {
        pool.Free(l.seq);
      }
    } else if (kind == 2) {  // append
      auto it = pick();
      std::vector<int64_t> longer = it->second.tokens;
      for (int64_t i = draw(6); i >= 0; --i) longer.push_back(draw(2));
      if (Write(pool, it->second.seq, longer).ok()) {
        it->second.tokens = longer;
        pool.Publish(it->second.seq, longer);
      }
    } else if (kind == 3) {  // fork: a new sequence on another's tokens, cut somewhere
      auto it = pick();
      Live l;
      l.tokens.assign(it->second.tokens.begin(),
                      it->second.tokens.begin() + 1 + draw(it->second.tokens.size()));
      pool.AcquirePrefix(l.seq, l.tokens, version);
      if (l.seq.length >= static_cast<int64_t>(l.tokens.size())) {
        pool.Truncate(l.seq, l.tokens.size() - 1);  // recompute the last token
      }
      if (l.seq.length == 0) l.seq.version = version;
      if (Write(pool, l.seq, l.tokens).ok()) {
        live.emplace(next++, std::move(l));
      } else {
        pool.Free(l.seq);
      }
    } else if (kind == 4) {  // finish
      auto it = pick();
      pool.Free(it->second.seq);
      live.erase(it);
    } else if (kind == 5) {  // export
      auto it = pick();
      exported.emplace_back(pool.Export(it->second.seq), it->second.tokens);
      pool.Free(it->second.seq);
      live.erase(it);
    } else if (kind == 6 && !exported.empty()) {  // import
      const size_t i = draw(exported.size());
      Live l;
      l.tokens = exported[i].second;
      if (pool.Import(exported[i].first, l.seq).ok()) live.emplace(next++, std::move(l));
      exported.erase(exported.begin() + i);
    } else if (kind == 7) {  // truncate and write other tokens: writes land in shared blocks
      auto it = pick();
      Live& l = it->second;
      const int64_t keep = draw(l.seq.length + 1);
      pool.Truncate(l.seq, keep);
      l.tokens.resize(keep);
      for (int64_t i = draw(8); i >= 0; --i) l.tokens.push_back(draw(3));
      if (Write(pool, l.seq, l.tokens).ok()) {
        pool.Publish(l.seq, l.tokens);
      } else {
        pool.Free(l.seq);
        live.erase(it);
      }
    } else if (kind == 8) {  // a weight update: old cached blocks go
      ++version;
      pool.DropCached(version - draw(2));
    }
    // Invariants.
    std::vector<int32_t> holders(pool.num_blocks(), 0);
    int64_t held = 0;
    for (const auto& [id, l] : live) {
      ASSERT_EQ(l.seq.length, static_cast<int64_t>(l.tokens.size())) << "op " << op;
      ASSERT_TRUE(HoldsItsOwnPrefix(pool, l.seq, l.tokens)) << "op " << op << " seq " << id;
      for (int32_t b : l.seq.blocks) ++holders[b];
      held += static_cast<int64_t>(l.seq.blocks.size());
    }
    int64_t used = 0;
    for (int32_t b = 0; b < pool.num_blocks(); ++b) {
      ASSERT_EQ(pool.references(b), holders[b]) << "op " << op << " block " << b;
      used += holders[b] > 0;
    }
    ASSERT_EQ(pool.used_blocks(), used) << "op " << op;
    ASSERT_EQ(pool.used_blocks() + pool.shared_references(), held) << "op " << op;
    ASSERT_LE(pool.cached_blocks(), pool.free_blocks());
    shared_seen += pool.shared_references() > 0;
    evictions_seen = pool.prefix_counters().evictions;
  }
  for (auto& [id, l] : live) pool.Free(l.seq);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.shared_references(), 0);
  EXPECT_EQ(pool.free_blocks(), pool.num_blocks());
  // The operations did exercise sharing, copies and eviction.
  EXPECT_GT(shared_seen, 1000);
  EXPECT_GT(pool.prefix_counters().copies, 100);
  EXPECT_GT(evictions_seen, 100);
}

}  // namespace
}  // namespace loom::model
