// KvBlockPool allocation, accounting and export/import.

#include "loom/model/kv_pool.h"

#include <gtest/gtest.h>

namespace loom::model {
namespace {

KvPoolOptions SmallPool() {
  KvPoolOptions o;
  o.num_layers = 3;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.block_size = 4;
  o.num_blocks = 5;
  return o;
}

TEST(KvBlockPoolTest, AccountingIsExact) {
  KvBlockPool pool(SmallPool());
  EXPECT_EQ(pool.BytesPerToken(), 2 * 3 * 2 * 8 * 4);
  EXPECT_EQ(pool.BytesPerBlock(), pool.BytesPerToken() * 4);
  EXPECT_EQ(pool.CapacityBytes(), 5 * pool.BytesPerBlock());
  KvSequence a;
  ASSERT_TRUE(pool.Reserve(a, 9).ok());  // 3 blocks
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(pool.AllocatedBytes(), 3 * pool.BytesPerBlock());
  ASSERT_TRUE(pool.Reserve(a, 12).ok());  // still 3
  EXPECT_EQ(pool.used_blocks(), 3);
  pool.Free(a);
  EXPECT_EQ(pool.AllocatedBytes(), 0);
  EXPECT_TRUE(a.blocks.empty());
}

TEST(KvBlockPoolTest, ExhaustionAllocatesNothing) {
  KvBlockPool pool(SmallPool());
  KvSequence a, b;
  ASSERT_TRUE(pool.Reserve(a, 16).ok());
  auto status = pool.Reserve(b, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(pool.free_blocks(), 1);
}

TEST(KvBlockPoolTest, TruncateFreesWholeBlocks) {
  KvBlockPool pool(SmallPool());
  KvSequence a;
  ASSERT_TRUE(pool.Reserve(a, 10).ok());
  a.length = 10;
  pool.Truncate(a, 5);
  EXPECT_EQ(a.length, 5);
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(pool.free_blocks(), 3);
}

TEST(KvBlockPoolTest, ExportImportRoundTripIsBitExact) {
  KvBlockPool pool(SmallPool());
  KvSequence a;
  ASSERT_TRUE(pool.Reserve(a, 7).ok());
  a.length = 7;
  at::Tensor slots = pool.Slots(a, 0, 7);
  for (int64_t l = 0; l < 3; ++l) {
    pool.key(l).flatten(0, 1).index_copy_(0, slots, at::randn({7, 2, 8}));
    pool.value(l).flatten(0, 1).index_copy_(0, slots, at::randn({7, 2, 8}));
  }
  KvSnapshot snap = pool.Export(a);
  EXPECT_EQ(snap.key.sizes().vec(), (std::vector<int64_t>{3, 7, 2, 8}));
  KvSequence b;
  ASSERT_TRUE(pool.Import(snap, b).ok());
  EXPECT_EQ(b.length, 7);
  KvSnapshot again = pool.Export(b);
  EXPECT_TRUE(at::equal(snap.key, again.key));
  EXPECT_TRUE(at::equal(snap.value, again.value));
  KvSnapshot wrong = snap;
  wrong.key = snap.key.to(at::kDouble);
  KvSequence c;
  EXPECT_EQ(pool.Import(wrong, c).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::model
