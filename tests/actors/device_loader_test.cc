// The loader with LoaderOptions::device: batches arrive with their columns on the device
// (the host stand-in here; a CUDA GPU where one is usable), the same batches as without a
// device, checkpoints count what the trainer took, and device faults are errors, not
// crashes or hangs.
#include <gtest/gtest.h>

#include "../gpu/gpu_testing.h"
#include "actors/loader.h"
#include "gpu/device_batch.h"
#include "testdata.h"

namespace shardyard {
namespace {

constexpr uint32_t kWaitMs = 30000;

struct Step {
  uint64_t step;
  std::vector<std::string> keys;
  std::vector<std::vector<uint8_t>> columns;  // the host columns' bytes
};

class DeviceLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pattern_ = testing::make_dataset(tmp_.path() + "/d", 5, 24, 300, 11);
    ASSERT_FALSE(pattern_.empty());
    opt_.sources = {pattern_};
    opt_.workers = 2;
    opt_.batch_size = 7;
    opt_.plan.shuffle = true;
    opt_.plan.seed = 5;
    opt_.cache_dir = tmp_.path() + "/cache";
  }

  // Takes up to `steps` batches (all when 0). With `device`, checks that each batch's
  // device copy holds the host columns' bytes.
  static std::vector<Step> take(Loader& l, size_t steps, bool device, Status* error = nullptr) {
    std::vector<Step> out;
    while (steps == 0 || out.size() < steps) {
      auto b = l.next();
      if (!b.is_ok()) {
        if (error) *error = b.status();
        break;
      }
      if (!b->has_value()) break;
      const Batch& batch = **b;
      Step s{batch.step(), batch.keys(), {}};
      for (const auto& c : batch.columns()) s.columns.push_back(gpu::testing::host_bytes(c));
      const gpu::DeviceBatch* d = gpu::on_device(batch);
      EXPECT_EQ(d != nullptr, device);
      if (d != nullptr) {
        Status st = d->wait(kWaitMs);
        if (!st.is_ok()) {
          if (error) *error = st;
          break;
        }
        for (size_t c = 0; c < batch.columns().size(); ++c)
          EXPECT_EQ(gpu::testing::read_back(*d, c), s.columns[c]) << "step " << s.step;
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  std::vector<Step> run_epoch(const LoaderOptions& opt, bool device) {
    auto l = Loader::open(opt);
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    if (!l.is_ok()) return {};
    EXPECT_TRUE((*l)->start_epoch(0).is_ok());
    Status error;
    auto steps = take(**l, 0, device, &error);
    EXPECT_TRUE(error.is_ok()) << error.to_string();
    return steps;
  }

  static void expect_same(const std::vector<Step>& a, const std::vector<Step>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].step, b[i].step);
      EXPECT_EQ(a[i].keys, b[i].keys) << "step " << a[i].step;
      EXPECT_EQ(a[i].columns, b[i].columns) << "step " << a[i].step;
    }
  }

  testing::TempDir tmp_;
  std::string pattern_;
  LoaderOptions opt_;
};

TEST_F(DeviceLoaderTest, TheStandInDeliversTheSameBatchesWithTheirColumnsOnTheDevice) {
  const auto host = run_epoch(opt_, false);
  ASSERT_EQ(host.size(), 18u);  // 120 samples in batches of 7
  auto device = gpu::HostDevice::create({/*copy_delay_us=*/500});
  for (uint32_t depth : {1u, 2u, 5u}) {
    for (uint32_t collated : {0u, 2u}) {
      LoaderOptions opt = opt_;
      opt.custom_device = device;
      opt.device_prefetch = depth;
      opt.prefetch_batches = collated;
      expect_same(run_epoch(opt, true), host);
    }
  }
  auto stats = device->stats();
  EXPECT_GT(stats.copies, 0u);
  EXPECT_EQ(stats.pinned_copies, stats.copies);  // columns were collated into pinned memory
  LoaderOptions by_name = opt_;
  by_name.device = "host";
  expect_same(run_epoch(by_name, true), host);
}

TEST_F(DeviceLoaderTest, ACheckpointHoldsOnlyTheBatchesTheTrainerTook) {
  const auto full = run_epoch(opt_, false);
  const std::string ckpt = tmp_.path() + "/ckpt";
  LoaderOptions opt = opt_;
  opt.device = "host";
  opt.device_prefetch = 4;  // copies run well ahead of what the trainer took
  opt.prefetch_batches = 3;
  std::vector<Step> before, after;
  {
    auto l = Loader::open(opt);
    ASSERT_TRUE(l.is_ok());
    ASSERT_TRUE((*l)->start_epoch(0).is_ok());
    before = take(**l, 5, true);
    ASSERT_TRUE((*l)->save(ckpt).is_ok());
  }
  {
    auto l = Loader::open(opt);
    ASSERT_TRUE(l.is_ok());
    auto point = (*l)->restore(ckpt);
    ASSERT_TRUE(point.is_ok()) << point.status().to_string();
    EXPECT_EQ(point->step, 5u);
    ASSERT_TRUE((*l)->start_epoch(point->epoch).is_ok());
    after = take(**l, 0, true);
  }
  before.insert(before.end(), after.begin(), after.end());
  expect_same(before, full);
}

TEST_F(DeviceLoaderTest, AnUnusableDeviceFailsOpenWithAClearError) {
  LoaderOptions cuda = opt_;
  cuda.device = "cuda:0";
  auto l = Loader::open(cuda);
  if (l.is_ok()) {
    GTEST_SKIP() << "a GPU is usable here";
  }
  EXPECT_EQ(l.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(l.status().message().find("cannot deliver batches to the device: cuda:0"),
            std::string::npos)
      << l.status().message();
  LoaderOptions unknown = opt_;
  unknown.device = "tpu:0";
  EXPECT_EQ(Loader::open(unknown).status().code(), StatusCode::kInvalidArgument);
  LoaderOptions no_depth = opt_;
  no_depth.device = "host";
  no_depth.device_prefetch = 0;
  EXPECT_EQ(Loader::open(no_depth).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DeviceLoaderTest, ADeviceFaultFailsTheEpochAndTheNextEpochRunsAgain) {
  LoaderOptions opt = opt_;
  opt.custom_device = std::make_shared<gpu::testing::FaultyDevice>(gpu::HostDevice::create(), 0,
                                                                   /*fail_copy=*/9);
  auto l = Loader::open(opt);
  ASSERT_TRUE(l.is_ok());
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  Status error;
  auto got = take(**l, 0, true, &error);
  EXPECT_LT(got.size(), 18u);
  EXPECT_NE(error.message().find("injected: the copy engine failed"), std::string::npos)
      << error.to_string();
  auto again = (*l)->next();  // a failed epoch stays failed
  EXPECT_FALSE(again.is_ok());
  ASSERT_TRUE((*l)->start_epoch(1).is_ok());
  Status error1;
  EXPECT_EQ(take(**l, 0, true, &error1).size(), 18u);
  EXPECT_TRUE(error1.is_ok()) << error1.to_string();
}

TEST_F(DeviceLoaderTest, AbandoningAnEpochWithCopiesInFlightNeitherHangsNorLeaks) {
  LoaderOptions opt = opt_;
  opt.custom_device = gpu::HostDevice::create({/*copy_delay_us=*/5000});
  opt.device_prefetch = 3;
  auto l = Loader::open(opt);
  ASSERT_TRUE(l.is_ok());
  ASSERT_TRUE((*l)->start_epoch(0).is_ok());
  EXPECT_EQ(take(**l, 1, true).size(), 1u);
  ASSERT_TRUE((*l)->start_epoch(1).is_ok());  // epoch 0 abandoned mid-copy
  EXPECT_EQ(take(**l, 0, true).size(), 18u);
  ASSERT_TRUE((*l)->start_epoch(2).is_ok());
  auto held = (*l)->next();  // the trainer holds a batch past the loader's end
  ASSERT_TRUE(held.is_ok() && held->has_value());
  l->reset();
  const gpu::DeviceBatch* d = gpu::on_device(**held);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->wait(kWaitMs).is_ok());
  EXPECT_EQ(gpu::testing::read_back(*d, 0), gpu::testing::host_bytes((**held).columns()[0]));
}

}  // namespace
}  // namespace shardyard
