// DeviceFeed: what a Cluster holds to deliver batches on a device (LoaderOptions::device):
// the device, the pinned pool the collators build batch columns in, and the pool of device
// blocks the copies go to. Every rank hosted by the cluster shares them; each rank's epoch
// runs its own gpu::DevicePrefetcher (its own copy stream) on them.
//
// Filled once by Cluster::start (open(), then size_pools()); then read-only, and the pools
// are internally synchronised.
#pragma once

#include <memory>

#include "actors/loader.h"
#include "gpu/device_pool.h"
#include "gpu/prefetcher.h"
#include "runtime/buffer.h"

namespace shardyard {

struct DeviceFeed {
  std::shared_ptr<gpu::Device> device;
  std::shared_ptr<BufferPool> columns;  // pinned host memory
  std::shared_ptr<gpu::DeviceMemoryPool> blocks;
  gpu::PrefetchOptions prefetch;

  // Null when the options ask for no device. Fails when the device cannot be used, before
  // any manifest is scanned. `batch_bytes` (a typical batch) and `ranks` (hosted here) size
  // the pools' caches: every batch in flight, collated, copied and held, stays pooled.
  static Result<std::unique_ptr<DeviceFeed>> open(const LoaderOptions& options);
  void size_pools(uint64_t batch_bytes, size_t ranks, const LoaderOptions& options);
};

}  // namespace shardyard
