// Tests of gpu/dlpack.h: the tensor's shape, type, strides and device, the checks, and that
// the tensor keeps the batch's memory until its deleter runs.
#include "gpu/dlpack.h"

#include <gtest/gtest.h>

#include <cstring>

#include "gpu/pinned_pool.h"
#include "gpu/prefetcher.h"
#include "gpu_testing.h"

namespace shardyard::gpu {
namespace {

using testing::make_batch;

struct Deleter {
  void operator()(DLManagedTensor* t) const { t->deleter(t); }
};
using Tensor = std::unique_ptr<DLManagedTensor, Deleter>;

Tensor export_ok(const Batch& b, std::string_view col, const TensorOptions& o = {}) {
  auto t = to_dlpack(b, col, o);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return Tensor(t.is_ok() ? *t : nullptr);
}

std::vector<int64_t> shape_of(const DLTensor& t) { return {t.shape, t.shape + t.ndim}; }
std::vector<int64_t> strides_of(const DLTensor& t) { return {t.strides, t.strides + t.ndim}; }

TEST(DLPack, AFixedSizeColumnIsABatchMajorTensorOfTheHostBytes) {
  auto pool = BufferPool::create();
  Batch b = make_batch(*pool, 5, /*items=*/4, /*a_bytes=*/24);
  TensorOptions f32;
  f32.dtype = DLDataType{kDLFloat, 32, 1};
  Tensor t = export_ok(b, "a", f32);
  ASSERT_TRUE(t);
  const DLTensor& x = t->dl_tensor;
  EXPECT_EQ(x.device.device_type, kDLCPU);
  EXPECT_EQ(x.data, b.field("a")->data());
  EXPECT_EQ(x.ndim, 2);
  EXPECT_EQ(shape_of(x), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(strides_of(x), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(x.dtype.code, kDLFloat);
  EXPECT_EQ(x.dtype.bits, 32);
  EXPECT_EQ(x.byte_offset, 0u);

  TensorOptions shaped;
  shaped.item_shape = {2, 3, 4};
  Tensor u = export_ok(b, "a", shaped);
  ASSERT_TRUE(u);
  EXPECT_EQ(shape_of(u->dl_tensor), (std::vector<int64_t>{4, 2, 3, 4}));
  EXPECT_EQ(strides_of(u->dl_tensor), (std::vector<int64_t>{24, 12, 4, 1}));
}

TEST(DLPack, RefusesWhatIsNotATensorWithAMessageThatSaysWhy) {
  auto pool = BufferPool::create();
  Batch b = make_batch(*pool, 1, 4, 24);
  auto missing = to_dlpack(b, "png");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("column 'png' of batch (epoch 0, step 1)"),
            std::string::npos);
  auto ragged = to_dlpack(b, "b");  // 1, 4, 7, 10 bytes
  EXPECT_EQ(ragged.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ragged.status().message().find("flat"), std::string::npos);
  TensorOptions f64;
  f64.dtype = DLDataType{kDLFloat, 64, 1};  // 24 bytes = 3 doubles: fine
  EXPECT_TRUE(export_ok(b, "a", f64));
  TensorOptions odd;
  odd.dtype = DLDataType{kDLInt, 32, 1};
  odd.item_shape = {5};
  EXPECT_EQ(to_dlpack(b, "a", odd).status().code(), StatusCode::kInvalidArgument);
  TensorOptions nibble;
  nibble.dtype = DLDataType{kDLUInt, 4, 1};
  EXPECT_EQ(to_dlpack(b, "a", nibble).status().code(), StatusCode::kInvalidArgument);
  Batch c = make_batch(*pool, 1, 4, 10);
  TensorOptions i32;
  i32.dtype = DLDataType{kDLInt, 32, 1};
  auto not_whole = to_dlpack(c, "a", i32);
  EXPECT_NE(not_whole.status().message().find("not a whole number of 4-byte elements"),
            std::string::npos);
}

TEST(DLPack, FlatExportsAnyColumnAsItsBytes) {
  auto pool = BufferPool::create();
  Batch b = make_batch(*pool, 2, 4, 24);
  TensorOptions flat;
  flat.flat = true;
  flat.dtype = DLDataType{kDLFloat, 32, 1};  // ignored: flat is bytes
  Tensor t = export_ok(b, "b", flat);
  ASSERT_TRUE(t);
  EXPECT_EQ(shape_of(t->dl_tensor), (std::vector<int64_t>{1 + 4 + 7 + 10}));
  EXPECT_EQ(t->dl_tensor.dtype.bits, 8);
  EXPECT_EQ(t->dl_tensor.dtype.code, kDLUInt);
}

TEST(DLPack, TheTensorKeepsTheBatchUntilItsDeleterRuns) {
  auto pool = BufferPool::create(64u << 20);
  Tensor t;
  std::vector<uint8_t> expected;
  {
    Batch b = make_batch(*pool, 3, 8, 64);
    expected.assign(b.field("a")->data(), b.field("a")->data() + b.field("a")->bytes());
    t = export_ok(b, "a");
  }  // the loader's batch is gone
  ASSERT_TRUE(t);
  EXPECT_EQ(pool->cached_bytes(), 0u);  // nothing went back to the pool
  const auto* data = static_cast<const uint8_t*>(t->dl_tensor.data);
  EXPECT_EQ(std::vector<uint8_t>(data, data + expected.size()), expected);
  t.reset();  // the consumer is done
  EXPECT_GT(pool->cached_bytes(), 0u);
}

TEST(DLPack, ADeviceBatchExportsItsDeviceCopyAndTheConsumerStreamWaitsForIt) {
  auto host = HostDevice::create({/*copy_delay_us=*/10000});
  auto consumer = host->create_stream();  // outlives the batch and its tensors, as it must
  ASSERT_TRUE(consumer.is_ok());
  auto pinned = pinned_buffer_pool(host, 16u << 20);
  auto blocks = DeviceMemoryPool::create(host, 16u << 20);
  uint64_t made = 0;
  auto p = DevicePrefetcher::start(blocks, [&]() -> Result<std::optional<Batch>> {
    if (made == 2) return std::optional<Batch>();
    return std::optional<Batch>(make_batch(*pinned, made++, 8, 64));
  });
  ASSERT_TRUE(p.is_ok());
  auto b = (*p)->next();
  ASSERT_TRUE(b.is_ok() && b->has_value());
  TensorOptions o;
  o.stream = (*consumer)->native();
  Tensor t = export_ok(**b, "a", o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->dl_tensor.data, on_device(**b)->field("a")->data);
  EXPECT_NE(t->dl_tensor.data, (**b).field("a")->data());
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCPU);  // the stand-in's memory is host memory
  // Work the consumer queues after the export sees the copied bytes (the copy is slow).
  auto expected = testing::host_bytes(*(**b).field("a"));
  std::vector<uint8_t> seen;
  const auto* data = static_cast<const uint8_t*>(t->dl_tensor.data);
  ASSERT_TRUE(host->launch(**consumer,
                           [&] {
                             seen.assign(data, data + expected.size());
                             return Status::ok();
                           })
                  .is_ok());
  auto done = (*consumer)->record();
  ASSERT_TRUE(done.is_ok());
  ASSERT_TRUE((*done)->wait(10000).is_ok());
  EXPECT_EQ(seen, expected);
  TensorOptions on_host;
  on_host.host = true;
  Tensor h = export_ok(**b, "a", on_host);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->dl_tensor.data, (**b).field("a")->data());
}

}  // namespace
}  // namespace shardyard::gpu
