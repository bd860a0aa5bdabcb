#include "actors/device_feed.h"

#include <algorithm>

#include "gpu/pinned_pool.h"

namespace shardyard {

Result<std::unique_ptr<DeviceFeed>> DeviceFeed::open(const LoaderOptions& options) {
  if (options.device.empty() && !options.custom_device) return std::unique_ptr<DeviceFeed>();
  auto feed = std::make_unique<DeviceFeed>();
  feed->device = options.custom_device;
  if (!feed->device) {
    auto device = gpu::open_device(options.device);
    if (!device.is_ok())
      return Status(device.status().code(),
                    "cannot deliver batches to the device: " + device.status().message());
    feed->device = std::move(device).value();
  }
  feed->prefetch.depth = options.device_prefetch;
  return feed;
}

void DeviceFeed::size_pools(uint64_t batch_bytes, size_t ranks, const LoaderOptions& options) {
  // Freeing pinned or device memory synchronises the device: keep what the batches in flight
  // need (collated ahead, copied ahead, held by the trainer, being released) cached.
  auto cache = [&](uint64_t batches) {
    return static_cast<size_t>(
        std::clamp<uint64_t>(batch_bytes * batches * ranks, 16u << 20, 4ull << 30));
  };
  columns = gpu::pinned_buffer_pool(device,
                                    cache(options.prefetch_batches + options.device_prefetch + 3));
  blocks = gpu::DeviceMemoryPool::create(device, cache(options.device_prefetch + 3));
}

}  // namespace shardyard
