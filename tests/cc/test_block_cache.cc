// The output cache (common/block_cache.h) keeps at most its capacity of idle bytes, evicting the least recently
// returned blocks first, and hands a returned block out again for a request of about its size.
#include "../../tfring/cc/common/block_cache.h"
#include "check.h"

using namespace tfring;

TEST(BlockCacheKeepsAtMostItsCapacityEvictingTheOldestFirst) {
  const size_t kib = 1024, block = 512 * kib;
  BlockCache cache(1024 * kib);  // room for two idle blocks
  void* a = cache.Allocate(64, block);
  void* b = cache.Allocate(64, block);
  void* c = cache.Allocate(64, block);
  EXPECT(a && b && c);
  cache.Release(a);  // oldest
  cache.Release(b);
  cache.Release(c);  // a third idle block does not fit: a goes
  BlockCache::Stats st = cache.stats();
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.idle_bytes, 2 * block);
  EXPECT_EQ(st.live_bytes, 0u);
  void* again1 = cache.Allocate(64, block);
  void* again2 = cache.Allocate(64, block);
  EXPECT(again1 != a && again2 != a);  // the evicted block is not handed out again
  EXPECT((again1 == b || again1 == c) && (again2 == b || again2 == c) && again1 != again2);
  EXPECT_EQ(cache.stats().hits, 2);
  cache.Release(again1);
  cache.Release(again2);
}

TEST(BlockCacheServesASlightlySmallerRequestButNotAMuchSmallerOne) {
  BlockCache cache(8 << 20);
  void* big = cache.Allocate(64, 1 << 20);
  cache.Release(big);
  void* smaller = cache.Allocate(64, (1 << 20) - (1 << 16));  // 1/16 smaller: the same block
  EXPECT(smaller == big);
  cache.Release(smaller);
  void* half = cache.Allocate(64, 1 << 19);  // half the size: a block of its own
  EXPECT(half != big);
  EXPECT_EQ(cache.stats().misses, 2);
  cache.Release(half);
}

TEST(BlockCacheWithNoCapacityKeepsNothing) {
  BlockCache cache(0);
  void* a = cache.Allocate(64, 1 << 20);
  cache.Release(a);
  EXPECT_EQ(cache.stats().idle_bytes, 0u);
  void* b = cache.Allocate(64, 1 << 20);
  EXPECT_EQ(cache.stats().hits, 0);
  cache.Release(b);
}
