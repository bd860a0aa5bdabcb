// PinnedAllocator: page-locked host memory for a BufferPool, so batch columns are built
// where a device copies them from directly (no staging copy, and the copy runs
// asynchronously).
//
// Page-locked memory is a scarce system resource and slow to allocate, which is why it sits
// under a pool: a buffer is pinned once and reused for batch after batch. When the device
// cannot pin more, the allocator falls back to ordinary page-aligned memory (counted in
// `fallbacks`): the batch still reaches the device, through a slower copy.
//
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_set>

#include "gpu/device.h"
#include "runtime/buffer.h"

namespace shardyard::gpu {

class PinnedAllocator : public BufferAllocator {
 public:
  explicit PinnedAllocator(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  uint8_t* allocate(size_t bytes) override;
  void deallocate(uint8_t* data, size_t bytes) override;
  uint64_t pinned() const;     // allocations that are page-locked
  uint64_t fallbacks() const;  // allocations that are not

 private:
  const std::shared_ptr<Device> device_;
  mutable std::mutex mu_;
  std::unordered_set<uint8_t*> fallback_;  // guarded by mu_
  uint64_t pinned_ = 0, fallbacks_ = 0;    // guarded by mu_
};

// A BufferPool of `device`'s pinned memory.
std::shared_ptr<BufferPool> pinned_buffer_pool(std::shared_ptr<Device> device,
                                               size_t max_cached_bytes);

}  // namespace shardyard::gpu
