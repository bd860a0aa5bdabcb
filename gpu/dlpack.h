// DLPack export of a batch column, so PyTorch (torch.utils.dlpack.from_dlpack), JAX
// (jax.dlpack.from_dlpack), CuPy and others take it without a copy.
//
// The tensor is the column's device copy when the batch has one (kDLCUDA for a CUDA
// device, kDLCPU for the host stand-in), else the host column (kDLCPU). Its manager context
// holds a copy of the Batch, so the memory stays valid until the consumer calls the
// deleter, whatever happens to the loader's batch. For a device tensor the consumer's
// stream is made to wait for the batch's copies (the host does not block), and the memory
// is reused only after the work queued on that stream when the tensor is released
// (gpu/device_batch.h), the contract of the array API's __dlpack__(stream=...).
//
// A tensor is [B, ...item_shape] of `dtype`: every item must have the field, all with the
// same size, item_shape's elements times the element size. `flat` exports the column's bytes
// as one [bytes] uint8 tensor instead (any column; Column::offsets locate the items).
//
// Thread-safe (a batch is immutable); the returned tensor belongs to the caller until it
// calls its deleter (exactly once).
#pragma once

#include <dlpack/dlpack.h>

#include <string_view>
#include <vector>

#include "runtime/batch.h"
#include "runtime/status.h"

namespace shardyard::gpu {

struct TensorOptions {
  DLDataType dtype{kDLUInt, 8, 1};  // the element type; its bits must be a multiple of 8
  std::vector<int64_t> item_shape;  // one item's shape; empty: [item bytes / element size]
  bool flat = false;                // all bytes as one [bytes] uint8 tensor
  bool host = false;                // the host column even when the batch has a device copy
  void* stream = nullptr;           // the consumer's stream (cudaStream_t); null: the default
};

Result<DLManagedTensor*> to_dlpack(const Batch& batch, std::string_view column,
                                   const TensorOptions& options = {});

}  // namespace shardyard::gpu
