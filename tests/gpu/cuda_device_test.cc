// Tests of the CUDA device (gpu/cuda_device.cc) and of open_device(). The device names are
// checked everywhere; the CUDA tests run where a GPU is usable and are skipped, with the
// reason, where it is not (no CUDA in this build, no driver, no GPU).
#include <gtest/gtest.h>

#include <cstring>

#include "gpu/device.h"
#include "gpu/dlpack.h"
#include "gpu/pinned_pool.h"
#include "gpu/prefetcher.h"
#include "gpu_testing.h"

namespace shardyard::gpu {
namespace {

constexpr uint32_t kWaitMs = 30000;

TEST(OpenDevice, RefusesNamesItDoesNotKnow) {
  for (const char* name : {"tpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA:0", "cuda:0 ", "gpu"}) {
    auto d = open_device(name);
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(d.status().message().find("use cuda:N"), std::string::npos) << name;
  }
  auto host = open_device("host");
  ASSERT_TRUE(host.is_ok());
  EXPECT_EQ((*host)->kind(), DeviceKind::kHost);
  EXPECT_EQ((*host)->name(), "host");
}

TEST(OpenDevice, WithoutAUsableGpuCudaIsAClearErrorNotACrash) {
  auto d = open_device("cuda:0");
  if (d.is_ok()) GTEST_SKIP() << "a GPU is usable here: " << (*d)->name();
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  const std::string& m = d.status().message();
  if (cuda_built()) {
    EXPECT_NE(m.find("cuda:0: no usable CUDA device"), std::string::npos) << m;
  } else {
    EXPECT_NE(m.find("built without CUDA support"), std::string::npos) << m;
  }
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = open_device("cuda:0");
    if (!d.is_ok()) GTEST_SKIP() << "no usable CUDA device: " << d.status().to_string();
    dev_ = *d;
  }
  std::shared_ptr<Device> dev_;
};

TEST_F(Cuda, ReportsOrdinalsBeyondTheLastDevice) {
  auto d = open_device("cuda:4096");
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("CUDA device(s), cuda:0 to cuda:"), std::string::npos);
  EXPECT_EQ(dev_->kind(), DeviceKind::kCuda);
}

TEST_F(Cuda, CopiesFromPinnedMemoryOnAStreamInOrder) {
  const size_t n = 8u << 20;
  auto mem = dev_->allocate(n);
  auto src = dev_->allocate_pinned(n);
  ASSERT_TRUE(mem.is_ok() && src.is_ok());
  auto a = dev_->create_stream();
  auto b = dev_->create_stream();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (size_t i = 0; i < n; ++i) (*src)[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> over(n / 2, 0x5A);
  auto* d = static_cast<uint8_t*>(*mem);
  ASSERT_TRUE((*a)->copy_to_device(d, *src, n).is_ok());
  auto ev = (*a)->record();
  ASSERT_TRUE(ev.is_ok());
  ASSERT_TRUE((*b)->wait(**ev).is_ok());  // b's copy lands after a's
  ASSERT_TRUE((*b)->copy_to_device(d, over.data(), over.size()).is_ok());
  auto eb = (*b)->record();
  ASSERT_TRUE(eb.is_ok());
  ASSERT_TRUE((*eb)->wait(kWaitMs).is_ok());
  std::vector<uint8_t> back(n);
  ASSERT_TRUE(dev_->copy_to_host(back.data(), d, n).is_ok());
  EXPECT_EQ(back[0], 0x5A);
  EXPECT_EQ(back[n / 2 - 1], 0x5A);
  EXPECT_EQ(back[n / 2], static_cast<uint8_t>((n / 2) * 7));
  EXPECT_EQ(back[n - 1], static_cast<uint8_t>((n - 1) * 7));
  dev_->free(d);
  dev_->free_pinned(*src, n);
}

TEST_F(Cuda, ThePrefetcherDeliversEveryBatchToTheGpuFromPinnedColumns) {
  auto alloc = std::make_shared<PinnedAllocator>(dev_);
  auto pinned = BufferPool::create(64u << 20, alloc);
  auto blocks = DeviceMemoryPool::create(dev_, 64u << 20);
  uint64_t made = 0;
  auto p = DevicePrefetcher::start(blocks, [&]() -> Result<std::optional<Batch>> {
    if (made == 50) return std::optional<Batch>();
    return std::optional<Batch>(testing::make_batch(*pinned, made++, 16, 64 << 10));
  });
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  for (uint64_t step = 0; step < 50; ++step) {
    auto b = (*p)->next();
    ASSERT_TRUE(b.is_ok() && b->has_value()) << b.status().to_string();
    const DeviceBatch* d = on_device(**b);
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(d->wait(kWaitMs).is_ok());
    for (size_t c = 0; c < d->columns().size(); ++c)
      EXPECT_EQ(testing::read_back(*d, c), testing::host_bytes((**b).columns()[c]));
    auto t = to_dlpack(**b, "a");
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ((*t)->dl_tensor.device.device_type, kDLCUDA);
    EXPECT_EQ((*t)->dl_tensor.device.device_id, 0);
    EXPECT_EQ((*t)->dl_tensor.data, d->field("a")->data);
    (*t)->deleter(*t);
  }
  auto end = (*p)->next();
  ASSERT_TRUE(end.is_ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_GT(alloc->pinned(), 0u);
  EXPECT_EQ(alloc->fallbacks(), 0u);
  EXPECT_GT(blocks->stats().reuses, 0u);
}

}  // namespace
}  // namespace shardyard::gpu
