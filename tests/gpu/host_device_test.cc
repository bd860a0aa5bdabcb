// Tests of gpu/host_device.h: the stand-in behaves as the device path expects of a GPU
// (in-order streams, events, cross-stream waits, sticky errors, bounds, pinned memory).
#include "gpu/host_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace shardyard::gpu {
namespace {

constexpr uint32_t kWaitMs = 10000;

TEST(HostDevice, CopiesRunInOrderAndTheEventCompletesAfterThem) {
  auto dev = HostDevice::create({/*copy_delay_us=*/2000});
  auto mem = dev->allocate(3 * 4096);
  ASSERT_TRUE(mem.is_ok());
  auto* d = static_cast<uint8_t*>(*mem);
  auto src = dev->allocate_pinned(4096);
  ASSERT_TRUE(src.is_ok());
  auto stream = dev->create_stream();
  ASSERT_TRUE(stream.is_ok());
  // The same source rewritten between copies would be a bug; here every copy has its own
  // source, and the second copy overwrites part of the first: order decides the result.
  std::vector<uint8_t> one(4096, 1), two(2048, 2);
  ASSERT_TRUE((*stream)->copy_to_device(d, one.data(), one.size()).is_ok());
  ASSERT_TRUE((*stream)->copy_to_device(d + 1024, two.data(), two.size()).is_ok());
  std::memset(*src, 3, 4096);
  ASSERT_TRUE((*stream)->copy_to_device(d + 8192, *src, 4096).is_ok());
  auto ev = (*stream)->record();
  ASSERT_TRUE(ev.is_ok());
  ASSERT_TRUE((*ev)->wait(kWaitMs).is_ok());
  auto done = (*ev)->query();
  ASSERT_TRUE(done.is_ok());
  EXPECT_TRUE(*done);
  std::vector<uint8_t> back(3 * 4096);
  ASSERT_TRUE(dev->copy_to_host(back.data(), d, back.size()).is_ok());
  EXPECT_EQ(back[0], 1);
  EXPECT_EQ(back[1023], 1);
  EXPECT_EQ(back[1024], 2);
  EXPECT_EQ(back[3071], 2);
  EXPECT_EQ(back[3072], 1);
  EXPECT_EQ(back[4096], 0xCD);  // never written: fresh device memory is poisoned
  EXPECT_EQ(back[8192], 3);
  auto stats = dev->stats();
  EXPECT_EQ(stats.copies, 3u);
  EXPECT_EQ(stats.pinned_copies, 1u);  // only the last source was pinned memory
  EXPECT_EQ(stats.bytes_copied, 4096u + 2048 + 4096);
  dev->free(d);
  dev->free_pinned(*src, 4096);
  EXPECT_EQ(dev->stats().live_allocations, 0u);
}

TEST(HostDevice, ACopyOutsideEveryAllocationFailsAtOnce) {
  auto dev = HostDevice::create();
  auto mem = dev->allocate(256);
  ASSERT_TRUE(mem.is_ok());
  auto stream = dev->create_stream();
  ASSERT_TRUE(stream.is_ok());
  uint8_t src[16] = {};
  Status st = (*stream)->copy_to_device(static_cast<uint8_t*>(*mem) + 250, src, 16);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside every device allocation"), std::string::npos)
      << st.message();
  std::vector<uint8_t> host(16);
  EXPECT_FALSE(dev->copy_to_host(host.data(), src, 16).is_ok());  // not device memory
  dev->free(*mem);
  EXPECT_FALSE((*stream)->copy_to_device(*mem, src, 16).is_ok());  // freed
}

TEST(HostDevice, AStreamWaitsForAnotherStreamsEventWithoutBlockingTheHost) {
  auto dev = HostDevice::create();
  auto a = dev->create_stream();
  auto b = dev->create_stream();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  std::atomic<bool> a_done{false};
  ASSERT_TRUE(dev->launch(**a,
                          [&] {
                            std::this_thread::sleep_for(std::chrono::milliseconds(50));
                            a_done = true;
                            return Status::ok();
                          })
                  .is_ok());
  auto ev = (*a)->record();
  ASSERT_TRUE(ev.is_ok());
  ASSERT_TRUE((*b)->wait(**ev).is_ok());  // returns at once; b's later work waits
  ASSERT_TRUE(
      dev->launch(**b,
                  [&] { return a_done ? Status::ok() : internal_error("b ran before a's event"); })
          .is_ok());
  auto eb = (*b)->record();
  ASSERT_TRUE(eb.is_ok());
  EXPECT_TRUE((*eb)->wait(kWaitMs).is_ok());
}

TEST(HostDevice, FailedWorkFailsTheLaterEventsOfItsStreamAndOfStreamsThatWaitForIt) {
  auto dev = HostDevice::create();
  auto a = dev->create_stream();
  auto b = dev->create_stream();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto before = (*a)->record();
  ASSERT_TRUE(dev->launch(**a, [] { return io_error("kernel fault"); }).is_ok());
  auto after = (*a)->record();
  ASSERT_TRUE(before.is_ok() && after.is_ok());
  EXPECT_TRUE((*before)->wait(kWaitMs).is_ok());
  Status st = (*after)->wait(kWaitMs);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(st.message(), "kernel fault");
  auto q = (*after)->query();
  EXPECT_FALSE(q.is_ok());
  auto later = (*a)->record();  // sticky
  ASSERT_TRUE(later.is_ok());
  EXPECT_FALSE((*later)->wait(kWaitMs).is_ok());
  ASSERT_TRUE((*b)->wait(**after).is_ok());
  auto eb = (*b)->record();
  ASSERT_TRUE(eb.is_ok());
  st = (*eb)->wait(kWaitMs);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("kernel fault"), std::string::npos) << st.message();
}

TEST(HostDevice, BorrowsItsOwnStreamsAndTheDefaultStreamOnly) {
  auto dev = HostDevice::create();
  auto s = dev->create_stream();
  ASSERT_TRUE(s.is_ok());
  auto borrowed = dev->borrow_stream((*s)->native());
  ASSERT_TRUE(borrowed.is_ok());
  EXPECT_EQ((*borrowed)->native(), (*s)->native());
  auto def = dev->borrow_stream(nullptr);
  ASSERT_TRUE(def.is_ok());
  auto ev = (*def)->record();
  ASSERT_TRUE(ev.is_ok());
  EXPECT_TRUE((*ev)->wait(kWaitMs).is_ok());
  auto again = dev->borrow_stream((*def)->native());  // the default stream by its handle
  EXPECT_TRUE(again.is_ok());
  int not_a_stream = 0;
  auto bad = dev->borrow_stream(&not_a_stream);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostDevice, DestroyingAStreamRunsWhatWasQueuedOnIt) {
  auto dev = HostDevice::create({/*copy_delay_us=*/5000});
  auto mem = dev->allocate(64);
  ASSERT_TRUE(mem.is_ok());
  std::vector<uint8_t> src(64, 9);
  {
    auto s = dev->create_stream();
    ASSERT_TRUE(s.is_ok());
    ASSERT_TRUE((*s)->copy_to_device(*mem, src.data(), src.size()).is_ok());
  }
  std::vector<uint8_t> back(64);
  ASSERT_TRUE(dev->copy_to_host(back.data(), *mem, 64).is_ok());
  EXPECT_EQ(back, src);
  dev->free(*mem);
}

TEST(HostDevice, AnEventWaitTimesOutWithAClearError) {
  auto dev = HostDevice::create();
  auto s = dev->create_stream();
  ASSERT_TRUE(s.is_ok());
  std::atomic<bool> release{false};
  ASSERT_TRUE(dev->launch(**s,
                          [&] {
                            for (int i = 0; i < 2000 && !release; ++i)
                              std::this_thread::sleep_for(std::chrono::milliseconds(5));
                            return Status::ok();
                          })
                  .is_ok());
  auto ev = (*s)->record();
  ASSERT_TRUE(ev.is_ok());
  Status st = (*ev)->wait(20);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("did not complete within 20 ms"), std::string::npos);
  release = true;
  EXPECT_TRUE((*ev)->wait(kWaitMs).is_ok());
}

}  // namespace
}  // namespace shardyard::gpu
