// Tests of runtime/buffer.h: page-aligned buffers, size classes, reuse and the cache bound.
#include "runtime/buffer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace shardyard {
namespace {

bool page_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4096 == 0; }

TEST(BufferPool, BuffersArePageAlignedAndAtLeastTheRequestedSize) {
  auto pool = BufferPool::create();
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{100}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{65536},
        size_t{(1 << 20) - 1}, size_t{1 << 20}, size_t{(1 << 20) + 1}, size_t{5u << 20}}) {
    auto buf = pool->acquire(bytes);
    ASSERT_NE(buf, nullptr);
    EXPECT_TRUE(page_aligned(buf->data())) << bytes;
    EXPECT_EQ(buf->size(), bytes);
    EXPECT_GE(buf->capacity(), bytes);
    EXPECT_GE(buf->capacity(), 4096u);
    EXPECT_EQ(buf->capacity() % 4096, 0u) << bytes;
    // Under 1 MiB at most twice the request; above, less than 1 MiB of waste.
    if (bytes > 4096 && bytes <= (1u << 20)) {
      EXPECT_LT(buf->capacity(), 2 * bytes);
    }
    if (bytes > (1u << 20)) {
      EXPECT_LT(buf->capacity() - bytes, 1u << 20);
    }
    if (bytes > 0) {
      std::memset(buf->data(), 0xab, buf->capacity());  // the whole capacity is writable
      EXPECT_EQ(buf->data()[buf->capacity() - 1], 0xab);
    }
  }
}

TEST(BufferPool, ReusesAReleasedBufferOfTheSameSizeClass) {
  auto pool = BufferPool::create();
  uint8_t* first = nullptr;
  {
    auto buf = pool->acquire(10000);
    first = buf->data();
    EXPECT_EQ(pool->cached_bytes(), 0u);
  }
  EXPECT_EQ(pool->cached_bytes(), 16384u);
  auto again = pool->acquire(9000);  // same 16 KiB class
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(again->size(), 9000u);
  EXPECT_EQ(pool->cached_bytes(), 0u);
  auto other = pool->acquire(100000);  // another class: a fresh block
  EXPECT_NE(other->data(), first);
}

TEST(BufferPool, KeepsAtMostMaxCachedBytesOfIdleBuffers) {
  auto pool = BufferPool::create(3 * 4096);
  {
    std::vector<std::shared_ptr<Buffer>> held;
    for (int i = 0; i < 8; ++i) held.push_back(pool->acquire(100));
  }
  EXPECT_EQ(pool->cached_bytes(), 3u * 4096);
  auto none = BufferPool::create(0);
  { auto b = none->acquire(1); }
  EXPECT_EQ(none->cached_bytes(), 0u);
}

TEST(BufferPool, ABufferKeepsItsPoolAlive) {
  auto pool = BufferPool::create();
  std::weak_ptr<BufferPool> weak = pool;
  auto buf = pool->acquire(5000);
  pool.reset();
  EXPECT_FALSE(weak.expired());
  buf->data()[0] = 1;
  buf.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(BufferPool, AcquireAndReleaseFromManyThreads) {
  auto pool = BufferPool::create(1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([pool, t] {
      for (int i = 0; i < 2000; ++i) {
        auto buf = pool->acquire(static_cast<size_t>(1000 + (i * 37 + t) % 20000));
        buf->data()[0] = static_cast<uint8_t>(i);
        ASSERT_TRUE(reinterpret_cast<uintptr_t>(buf->data()) % 4096 == 0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(pool->cached_bytes(), size_t{1} << 20);
  EXPECT_GT(pool->cached_bytes(), 0u);
}

// An allocator that counts what it hands out and takes back, for the pool's contract.
class CountingAllocator : public BufferAllocator {
 public:
  uint8_t* allocate(size_t bytes) override {
    if (fail) return nullptr;
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes) != 0) return nullptr;
    ++allocated;
    live_bytes += bytes;
    return static_cast<uint8_t*>(p);
  }
  void deallocate(uint8_t* data, size_t bytes) override {
    ++freed;
    live_bytes -= bytes;
    std::free(data);
  }
  std::atomic<int> allocated{0}, freed{0};
  std::atomic<size_t> live_bytes{0};
  bool fail = false;
};

TEST(BufferPool, TakesItsMemoryFromItsAllocatorAndGivesItBack) {
  auto alloc = std::make_shared<CountingAllocator>();
  auto pool = BufferPool::create(8192, alloc);
  {
    auto a = pool->acquire(5000);  // 8 KiB class, kept when released
    auto b = pool->acquire(5000);  // beyond the cache: given back at once
    EXPECT_EQ(alloc->allocated, 2);
    EXPECT_EQ(a->capacity(), BufferPool::size_class(5000));
  }
  EXPECT_EQ(alloc->freed, 1);
  auto c = pool->acquire(6000);  // reused, no new allocation
  EXPECT_EQ(alloc->allocated, 2);
  c.reset();
  pool.reset();  // the idle buffer goes back too
  EXPECT_EQ(alloc->freed, 2);
  EXPECT_EQ(alloc->live_bytes, 0u);
}

// Columns of large samples of varied sizes differ from batch to batch by a few MiB: an idle
// buffer up to a quarter larger serves a request, the smallest such one, and one of exactly
// the request's class before it; anything larger makes a new one.
TEST(BufferPool, AnIdleBufferUpToAQuarterLargerIsReused) {
  constexpr size_t kMiB = 1u << 20;
  auto alloc = std::make_shared<CountingAllocator>();
  auto pool = BufferPool::create(64 * kMiB, alloc);
  auto take = [&](size_t mib) { return pool->acquire(mib * kMiB - 1000); };
  uint8_t *nine = nullptr, *eight = nullptr, *seven = nullptr;
  {
    auto a = take(9), b = take(8), c = take(7);
    nine = a->data();
    eight = b->data();
    seven = c->data();
    EXPECT_EQ(a->capacity(), 9 * kMiB);
  }
  EXPECT_EQ(alloc->allocated, 3);
  {
    auto exact = take(7);  // its own class first
    EXPECT_EQ(exact->data(), seven);
    auto smallest = take(7);  // then the smallest larger one: 8 of {8, 9}
    EXPECT_EQ(smallest->data(), eight);
    EXPECT_EQ(smallest->size(), 7 * kMiB - 1000);
    EXPECT_EQ(smallest->capacity(), 8 * kMiB);
    auto too_large = take(6);  // 9 MiB is half as much again: not for 6
    EXPECT_NE(too_large->data(), nine);
    EXPECT_EQ(alloc->allocated, 4);
  }
  // Powers of two below 1 MiB: the next class is twice as large, never taken.
  { auto big = pool->acquire(256 << 10); }
  auto small = pool->acquire(128 << 10);
  EXPECT_EQ(small->capacity(), size_t{128} << 10);
  EXPECT_EQ(alloc->allocated, 6);
}

TEST(BufferPool, AnAllocatorWithoutMemoryMakesAcquireThrowBadAlloc) {
  auto alloc = std::make_shared<CountingAllocator>();
  alloc->fail = true;
  auto pool = BufferPool::create(8192, alloc);
  EXPECT_THROW(pool->acquire(100), std::bad_alloc);
}

}  // namespace
}  // namespace shardyard
