#include "gpu/dlpack.h"

#include <memory>

#include "gpu/device_batch.h"

namespace shardyard::gpu {

namespace {

// The manager context: the tensor itself, the batch that owns its memory, its shape.
struct Exported {
  DLManagedTensor tensor{};
  Batch batch;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

void delete_exported(DLManagedTensor* t) { delete static_cast<Exported*>(t->manager_ctx); }

}  // namespace

Result<DLManagedTensor*> to_dlpack(const Batch& batch, std::string_view column,
                                   const TensorOptions& options) {
  const Column* col = batch.field(column);
  const std::string what = "column '" + std::string(column) + "' of batch (epoch " +
                           std::to_string(batch.epoch()) + ", step " +
                           std::to_string(batch.step()) + ")";
  if (col == nullptr) return not_found(what + ": the batch has no such field");
  auto ex = std::make_unique<Exported>();
  ex->batch = batch;
  DLDataType dtype = options.dtype;
  if (options.flat) {
    dtype = DLDataType{kDLUInt, 8, 1};
    ex->shape = {static_cast<int64_t>(col->bytes())};
  } else {
    const uint64_t elem = uint64_t{dtype.bits} * dtype.lanes / 8;
    if (dtype.bits % 8 != 0 || elem == 0)
      return invalid_argument(what + ": element types narrower than a byte are not exported");
    const int64_t item = col->fixed_size();
    if (item < 0)
      return invalid_argument(what +
                              ": items differ in size or lack the field; export it "
                              "with TensorOptions::flat and use the offsets");
    if (item % elem != 0)
      return invalid_argument(what + ": " + std::to_string(item) +
                              " bytes per item are not a whole number of " + std::to_string(elem) +
                              "-byte elements");
    ex->shape = {static_cast<int64_t>(batch.size())};
    if (options.item_shape.empty()) {
      ex->shape.push_back(item / static_cast<int64_t>(elem));
    } else {
      int64_t n = 1;
      for (int64_t d : options.item_shape) {
        if (d < 0) return invalid_argument(what + ": item_shape has a negative dimension");
        n *= d;
        ex->shape.push_back(d);
      }
      if (n * static_cast<int64_t>(elem) != item)
        return invalid_argument(what + ": item_shape holds " + std::to_string(n) +
                                " elements, but an item has " + std::to_string(item / elem));
    }
  }

  DLTensor& t = ex->tensor.dl_tensor;
  t.data = const_cast<uint8_t*>(col->data());  // NOLINT: DLPack has no const tensors
  t.device = DLDevice{kDLCPU, 0};
  const DeviceBatch* dev = on_device(batch);
  if (dev != nullptr && !options.host) {
    const DeviceColumn* dc = dev->field(column);
    if (dc == nullptr) return internal_error(what + ": the device copy lacks it");
    SY_RETURN_IF_ERROR(dev->wait_on(options.stream));
    t.data = dc->data;
    if (dev->device().kind() == DeviceKind::kCuda)
      t.device = DLDevice{kDLCUDA, dev->device().ordinal()};
  }
  t.ndim = static_cast<int>(ex->shape.size());
  t.dtype = dtype;
  t.shape = ex->shape.data();
  // Compact and row-major, written out: DLPack 0.6 allows null, newer consumers want them.
  ex->strides.assign(ex->shape.size(), 1);
  for (size_t i = ex->shape.size(); i-- > 1;) ex->strides[i - 1] = ex->strides[i] * ex->shape[i];
  t.strides = ex->strides.data();
  t.byte_offset = 0;
  ex->tensor.manager_ctx = ex.get();
  ex->tensor.deleter = delete_exported;
  return &ex.release()->tensor;
}

}  // namespace shardyard::gpu
