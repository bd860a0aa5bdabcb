// The CUDA Device (gpu/cuda_device.cc), declared without CUDA types; built only when the
// CUDA toolkit was found (SHARDYARD_HAVE_CUDA). Internal to gpu/: use open_device().
#pragma once

#include <memory>

#include "gpu/device.h"

namespace shardyard::gpu {

// Device `ordinal` when the driver and the GPU answer; kUnavailable naming why not.
Result<std::shared_ptr<Device>> open_cuda_device(int ordinal);

}  // namespace shardyard::gpu
