#include "gpu/pinned_pool.h"

#include <cstdlib>

namespace shardyard::gpu {

uint8_t* PinnedAllocator::allocate(size_t bytes) {
  auto p = device_->allocate_pinned(bytes);
  if (p.is_ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++pinned_;
    return *p;
  }
  void* q = nullptr;
  if (posix_memalign(&q, 4096, bytes == 0 ? 4096 : bytes) != 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  fallback_.insert(static_cast<uint8_t*>(q));
  ++fallbacks_;
  return static_cast<uint8_t*>(q);
}

void PinnedAllocator::deallocate(uint8_t* data, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fallback_.erase(data) > 0) {
      std::free(data);
      return;
    }
  }
  device_->free_pinned(data, bytes);
}

uint64_t PinnedAllocator::pinned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_;
}

uint64_t PinnedAllocator::fallbacks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fallbacks_;
}

std::shared_ptr<BufferPool> pinned_buffer_pool(std::shared_ptr<Device> device,
                                               size_t max_cached_bytes) {
  return BufferPool::create(max_cached_bytes, std::make_shared<PinnedAllocator>(std::move(device)));
}

}  // namespace shardyard::gpu
