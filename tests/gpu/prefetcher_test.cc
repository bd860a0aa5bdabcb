// Tests of gpu/prefetcher.h on the host stand-in: order, bytes, depth, reuse of device
// memory (fenced by the trainer's work), pinned sources, errors, cancellation.
#include "gpu/prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "gpu/pinned_pool.h"
#include "gpu_testing.h"

namespace shardyard::gpu {
namespace {

using testing::byte_at;
using testing::host_bytes;
using testing::make_batch;
using testing::read_back;

constexpr uint32_t kWaitMs = 10000;

// A source of `n` batches (steps 0..n-1) in pinned memory; counts what was taken.
struct Source {
  std::shared_ptr<BufferPool> pool;
  uint64_t n = 0;
  size_t items = 8, a_bytes = 64;
  std::atomic<uint64_t> taken{0};
  Result<std::optional<Batch>> operator()() {
    if (taken == n) return std::optional<Batch>();
    return std::optional<Batch>(make_batch(*pool, taken++, items, a_bytes));
  }
};

struct Rig {
  explicit Rig(HostDeviceOptions o = {}, size_t device_cache = 64u << 20)
      : host(HostDevice::create(o)),
        pinned(pinned_buffer_pool(host, 64u << 20)),
        blocks(DeviceMemoryPool::create(host, device_cache)) {}
  std::shared_ptr<HostDevice> host;
  std::shared_ptr<BufferPool> pinned;
  std::shared_ptr<DeviceMemoryPool> blocks;
};

// Checks a delivered batch: device copy present, every column's bytes as on the host.
void expect_on_device(const Batch& b, uint64_t step) {
  ASSERT_EQ(b.step(), step);
  const DeviceBatch* d = on_device(b);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->wait(kWaitMs).is_ok());
  ASSERT_EQ(d->columns().size(), b.columns().size());
  for (size_t c = 0; c < b.columns().size(); ++c) {
    EXPECT_EQ(d->columns()[c].name, b.columns()[c].name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d->columns()[c].data) % 256, 0u);
    EXPECT_EQ(read_back(*d, c), host_bytes(b.columns()[c])) << "step " << step << " column " << c;
  }
  EXPECT_EQ(b.field("a")->value(3)[5], static_cast<char>(byte_at(step, 3, 'a', 5)));
}

TEST(DevicePrefetcher, DeliversEveryBatchInOrderWithItsColumnsOnTheDevice) {
  Rig rig({/*copy_delay_us=*/300});
  Source src{rig.pinned, 20};
  auto p = DevicePrefetcher::start(rig.blocks, std::ref(src));
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  for (uint64_t step = 0; step < 20; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    ASSERT_TRUE(b->has_value());
    expect_on_device(**b, step);
  }
  for (int again = 0; again < 2; ++again) {  // the end stays the end
    auto end = (*p)->next();
    ASSERT_TRUE(end.is_ok());
    EXPECT_FALSE(end->has_value());
  }
  auto stats = (*p)->stats();
  EXPECT_EQ(stats.batches, 20u);
  auto dev = rig.host->stats();
  EXPECT_EQ(dev.copies, 40u);                // two columns a batch
  EXPECT_EQ(dev.pinned_copies, dev.copies);  // straight from the pinned columns
}

class Depth : public ::testing::TestWithParam<uint32_t> {};

TEST_P(Depth, TakesAtMostDepthBatchesAheadAndFillsThem) {
  const uint32_t depth = GetParam();
  Rig rig;
  Source src{rig.pinned, 30};
  auto p = DevicePrefetcher::start(rig.blocks, std::ref(src), PrefetchOptions{depth});
  ASSERT_TRUE(p.is_ok());
  for (uint64_t delivered = 0; delivered < 30; ++delivered) {
    // The copy thread runs ahead until `depth` batches wait for the trainer.
    const uint64_t expect = std::min<uint64_t>(30, delivered + depth);
    for (int i = 0; i < 2000 && src.taken < expect; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(src.taken, expect) << "after " << delivered << " batches";
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value());
    EXPECT_EQ((**b).step(), delivered);
    EXPECT_LE(src.taken, delivered + 1 + depth);
  }
  EXPECT_EQ((*p)->stats().max_ahead, depth);
}

INSTANTIATE_TEST_SUITE_P(DevicePrefetcher, Depth, ::testing::Values(1u, 2u, 4u));

TEST(DevicePrefetcher, RefusesADepthOutside1To64) {
  Rig rig;
  Source src{rig.pinned, 1};
  EXPECT_EQ(DevicePrefetcher::start(rig.blocks, std::ref(src), {0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DevicePrefetcher::start(rig.blocks, std::ref(src), {65}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(DevicePrefetcher, ReusesDeviceBlocksOfDroppedBatches) {
  Rig rig;
  Source src{rig.pinned, 60};
  auto p = DevicePrefetcher::start(rig.blocks, std::ref(src), {2});
  ASSERT_TRUE(p.is_ok());
  for (uint64_t step = 0; step < 60; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value());
    expect_on_device(**b, step);
  }
  auto pool = rig.blocks->stats();
  // In flight at once: the batch held, `depth` copied ahead, one being filled.
  EXPECT_LE(pool.allocations, 5u);
  EXPECT_EQ(pool.allocations + pool.reuses, 60u);
  EXPECT_EQ(pool.leaked, 0u);
}

// Batches of varied sizes: a block a little larger than a request serves it, instead of a
// new allocation on the device for every size class a batch lands in.
TEST(DeviceMemoryPool, ABlockUpToAQuarterLargerServesARequest) {
  constexpr size_t kMiB = 1u << 20;
  auto pool = DeviceMemoryPool::create(HostDevice::create({}), 64 * kMiB);
  uint8_t* eight = nullptr;
  {
    auto a = pool->acquire(8 * kMiB);
    ASSERT_TRUE(a.is_ok());
    eight = (*a)->data();
  }
  {
    auto b = pool->acquire(7 * kMiB);  // 8 MiB is at most a quarter more than 7
    ASSERT_TRUE(b.is_ok());
    EXPECT_EQ((*b)->data(), eight);
    EXPECT_EQ((*b)->capacity(), 8 * kMiB);
  }
  EXPECT_EQ(pool->stats().cached_bytes, 8 * kMiB);
  auto c = pool->acquire(5 * kMiB);  // too small for it: a block of its own
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE((*c)->data(), eight);
  const auto stats = pool->stats();
  EXPECT_EQ(stats.allocations, 2u);
  EXPECT_EQ(stats.reuses, 1u);
}

// The trainer's kernel reads batch 0 on its own stream and is still running when the
// trainer drops the batch; the next copy into the same block must wait for the kernel.
TEST(DevicePrefetcher, ReuseOfABlockWaitsForTheTrainersKernelOnTheGpu) {
  Rig rig;
  Source src{rig.pinned, 12};
  auto p = DevicePrefetcher::start(rig.blocks, std::ref(src), {1});
  ASSERT_TRUE(p.is_ok());
  auto compute = rig.host->create_stream();
  ASSERT_TRUE(compute.is_ok());
  std::vector<std::vector<uint8_t>> seen(12);
  std::vector<std::vector<uint8_t>> expected(12);
  for (uint64_t step = 0; step < 12; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value());
    const DeviceBatch* d = on_device(**b);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(d->wait_on((*compute)->native()).is_ok());
    expected[step] = host_bytes((**b).columns()[0]);
    const uint8_t* col = d->columns()[0].data;
    const size_t n = d->columns()[0].bytes;
    auto* out = &seen[step];
    // A slow kernel: it reads the column long after the host moved on.
    ASSERT_TRUE(rig.host
                    ->launch(**compute,
                             [col, n, out] {
                               std::this_thread::sleep_for(std::chrono::milliseconds(20));
                               out->assign(col, col + n);
                               return Status::ok();
                             })
                    .is_ok());
  }  // each batch is dropped right after its kernel was queued
  auto done = (*compute)->record();
  ASSERT_TRUE(done.is_ok());
  ASSERT_TRUE((*done)->wait(kWaitMs).is_ok());
  for (uint64_t step = 0; step < 12; ++step) EXPECT_EQ(seen[step], expected[step]) << step;
  EXPECT_GE(rig.blocks->stats().reuses, 5u);  // the blocks were in fact reused
}

// The pinned host columns are read by a copy still in flight after the batch's host side
// is gone; they must not go back to the pool (and be rewritten) before the copy is over.
TEST(DevicePrefetcher, HostColumnsStayUntilTheirCopiesFinish) {
  Rig rig({/*copy_delay_us=*/20000});
  Source src{rig.pinned, 3, 8, 4096};
  auto p = DevicePrefetcher::start(rig.blocks, std::ref(src), {1});
  ASSERT_TRUE(p.is_ok());
  auto b = (*p)->next();
  ASSERT_TRUE(b.is_ok() && b->has_value());
  auto expected = host_bytes((**b).columns()[0]);
  const size_t capacity = (**b).columns()[0].buffer->capacity();
  std::shared_ptr<const BatchAttachment> device_copy = (**b).device();
  b = std::optional<Batch>();  // the host batch is gone, its copy is (likely) still running
  // Scribble over whatever the pool hands out now of the same size.
  std::vector<std::shared_ptr<Buffer>> scribbled;
  for (int i = 0; i < 4; ++i) {
    scribbled.push_back(rig.pinned->acquire(capacity));
    std::memset(scribbled.back()->data(), 0xEE, capacity);
  }
  auto* d = dynamic_cast<const DeviceBatch*>(device_copy.get());
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->wait(kWaitMs).is_ok());
  EXPECT_EQ(read_back(*d, 0), expected);
}

// The whole batch is dropped while its copy runs: its host columns must stay with the
// device block until the copy is over, not go back to the pool to be rewritten.
TEST(DevicePrefetcher, ABatchDroppedDuringItsCopyKeepsItsHostColumnsUntilTheCopyIsOver) {
  Rig rig({/*copy_delay_us=*/20000}, /*device_cache=*/64u << 20);
  Source src{rig.pinned, 1, 8, 4096};
  auto p = DevicePrefetcher::start(rig.blocks, std::ref(src), {1});
  ASSERT_TRUE(p.is_ok());
  auto b = (*p)->next();
  ASSERT_TRUE(b.is_ok() && b->has_value());
  auto expected = host_bytes((**b).columns()[0]);
  const size_t host_capacity = (**b).columns()[0].buffer->capacity();
  const uint8_t* device_column = on_device(**b)->columns()[0].data;
  size_t block_bytes = 0;
  for (const auto& c : on_device(**b)->columns()) block_bytes += (c.bytes + 255) / 256 * 256;
  b = std::optional<Batch>();  // dropped, copy (likely) still running
  std::vector<std::shared_ptr<Buffer>> scribbled;
  for (int i = 0; i < 4; ++i) {
    scribbled.push_back(rig.pinned->acquire(host_capacity));
    std::memset(scribbled.back()->data(), 0xEE, host_capacity);
  }
  // The same block comes back from the pool; once its fences complete it holds the copy.
  auto block = rig.blocks->acquire(block_bytes);
  ASSERT_TRUE(block.is_ok());
  ASSERT_EQ((*block)->data(), device_column);
  for (const auto& f : (*block)->fences()) ASSERT_TRUE(f->wait(kWaitMs).is_ok());
  std::vector<uint8_t> back(expected.size());
  ASSERT_TRUE(rig.host->copy_to_host(back.data(), device_column, back.size()).is_ok());
  EXPECT_EQ(back, expected);
}

TEST(DevicePrefetcher, ASourceErrorComesAfterTheBatchesBeforeItAndStays) {
  Rig rig;
  Source src{rig.pinned, 3};
  auto source = [&]() -> Result<std::optional<Batch>> {
    if (src.taken == 3) return corrupt("/data/shard-000007.tar: bad header checksum at byte 1536");
    return src();
  };
  auto p = DevicePrefetcher::start(rig.blocks, source, {2});
  ASSERT_TRUE(p.is_ok());
  for (uint64_t step = 0; step < 3; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value());
    expect_on_device(**b, step);
  }
  for (int again = 0; again < 2; ++again) {
    auto e = (*p)->next();
    ASSERT_FALSE(e.is_ok());
    EXPECT_EQ(e.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(e.status().message().find("shard-000007.tar"), std::string::npos);
  }
}

TEST(DevicePrefetcher, OutOfDeviceMemoryIsAnErrorNamingTheBatch) {
  auto host = HostDevice::create();
  auto faulty = std::make_shared<testing::FaultyDevice>(host, /*fail_allocation=*/3, 0);
  auto pinned = pinned_buffer_pool(host, 16u << 20);
  auto blocks = DeviceMemoryPool::create(faulty, 0);  // nothing cached: one allocation a batch
  Source src{pinned, 10};
  auto p = DevicePrefetcher::start(blocks, std::ref(src), {2});
  ASSERT_TRUE(p.is_ok());
  for (uint64_t step = 0; step < 2; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value()) << b.status().to_string();
    expect_on_device(**b, step);
  }
  auto e = (*p)->next();
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(e.status().message().find("faulty: cannot allocate"), std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find("step 2"), std::string::npos) << e.status().message();
}

TEST(DevicePrefetcher, ACopyThatFailsOnTheDeviceIsReportedInOrder) {
  auto host = HostDevice::create();
  auto faulty = std::make_shared<testing::FaultyDevice>(host, 0, /*fail_copy=*/7);
  auto pinned = pinned_buffer_pool(host, 16u << 20);
  auto blocks = DeviceMemoryPool::create(faulty, 16u << 20);
  Source src{pinned, 10};
  auto p = DevicePrefetcher::start(blocks, std::ref(src), {2});
  ASSERT_TRUE(p.is_ok());
  // Copy 7 is column "a" of step 3: steps 0..2 arrive intact, then the error, never step 4.
  for (uint64_t step = 0; step < 3; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value()) << b.status().to_string();
    expect_on_device(**b, step);
  }
  auto e = (*p)->next();
  if (e.is_ok()) {  // handed out before the failure showed: its event carries it
    ASSERT_TRUE(e->has_value());
    EXPECT_EQ((**e).step(), 3u);
    Status st = on_device(**e)->wait(kWaitMs);
    EXPECT_NE(st.message().find("injected: the copy engine failed"), std::string::npos);
    e = (*p)->next();
  }
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("injected: the copy engine failed"), std::string::npos)
      << e.status().message();
  EXPECT_FALSE((*p)->next().is_ok());
}

TEST(DevicePrefetcher, CancelUnblocksATrainerWaitingForABatch) {
  Rig rig;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  auto blocked = [&]() -> Result<std::optional<Batch>> {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return release; });
    return cancelled("the source was stopped");
  };
  auto p = DevicePrefetcher::start(rig.blocks, blocked);
  ASSERT_TRUE(p.is_ok());
  Result<std::optional<Batch>> got = std::optional<Batch>();
  std::thread trainer([&] { got = (*p)->next(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  (*p)->cancel();
  trainer.join();
  EXPECT_EQ(got.status().code(), StatusCode::kCancelled);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  p->reset();  // joins the copy thread once the source returned
}

}  // namespace
}  // namespace shardyard::gpu
