#include "runtime/buffer.h"

#include <cstdlib>
#include <new>
#include <tuple>

namespace shardyard {

namespace {
constexpr size_t kPage = 4096;
// Page-aligned heap memory. Not asked for transparent huge pages: on the VM the benchmarks
// run on, huge-page-sized free blocks are the ones handed back to the host, so a column
// mapped on them after a pause costs more at its first touch than one of small pages
// (docs/performance.md, "Large samples read into the batch").
class HeapAllocator : public BufferAllocator {
 public:
  uint8_t* allocate(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, kPage, bytes == 0 ? kPage : bytes) != 0) return nullptr;
    return static_cast<uint8_t*>(p);
  }
  void deallocate(uint8_t* data, size_t) override { std::free(data); }
};
}  // namespace

Buffer::~Buffer() { pool_->release(data_, capacity_); }

std::shared_ptr<BufferPool> BufferPool::create(size_t max_cached_bytes) {
  return create(max_cached_bytes, nullptr);
}

std::shared_ptr<BufferPool> BufferPool::create(size_t max_cached_bytes,
                                               std::shared_ptr<BufferAllocator> allocator) {
  if (!allocator) allocator = std::make_shared<HeapAllocator>();
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes, std::move(allocator)));
}

BufferPool::~BufferPool() {
  for (auto& [cap, p] : idle_) allocator_->deallocate(p, cap);
}

size_t BufferPool::size_class(size_t bytes) {
  if (bytes <= kPage) return kPage;
  // Powers of two up to 1 MiB, then multiples of 1 MiB: at most 2x waste for small
  // buffers and under 1 MiB for large ones.
  if (bytes <= (1u << 20)) {
    size_t c = kPage;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + (1u << 20) - 1) & ~static_cast<size_t>((1u << 20) - 1);
}

std::shared_ptr<Buffer> BufferPool::acquire(size_t bytes) {
  size_t cap = size_class(bytes);
  uint8_t* data = nullptr;
  {
    MutexLock lock(&mu_);
    const size_t i = pick_idle(idle_.size(), cap, [this](size_t k) SY_NO_THREAD_SAFETY_ANALYSIS {
      return idle_[k].first;
    });
    if (i < idle_.size()) {
      std::tie(cap, data) = idle_[i];
      // Keep the order of release: the search prefers the last released of a class.
      idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(i));
      idle_bytes_ -= cap;
    }
  }
  if (data == nullptr) data = allocator_->allocate(cap);
  if (data == nullptr) throw std::bad_alloc();
  auto buf = std::shared_ptr<Buffer>(new Buffer(data, cap, shared_from_this()));
  buf->set_size(bytes);
  return buf;
}

void BufferPool::release(uint8_t* data, size_t capacity) {
  {
    MutexLock lock(&mu_);
    if (idle_bytes_ + capacity <= max_cached_) {
      idle_.emplace_back(capacity, data);
      idle_bytes_ += capacity;
      return;
    }
  }
  allocator_->deallocate(data, capacity);
}

size_t BufferPool::cached_bytes() const {
  MutexLock lock(&mu_);
  return idle_bytes_;
}

}  // namespace shardyard
