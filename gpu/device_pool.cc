#include "gpu/device_pool.h"

#include <algorithm>
#include <iterator>

#include "runtime/buffer.h"

namespace shardyard::gpu {

namespace {
// How long freeing a block waits for the last work that touches it. Past that the block is
// leaked rather than freed under a running kernel.
constexpr uint32_t kFenceWaitMs = 60000;

// Drops fences that completed; a fence whose work failed is dropped too (the failure is
// reported by the batch's own events). True when none is left.
bool prune(std::vector<std::shared_ptr<Event>>& fences) {
  fences.erase(std::remove_if(fences.begin(), fences.end(),
                              [](const std::shared_ptr<Event>& e) {
                                auto done = e->query();
                                return !done.is_ok() || *done;
                              }),
               fences.end());
  return fences.empty();
}

void move_into(std::vector<std::shared_ptr<const void>>& from,
               std::vector<std::shared_ptr<const void>>* to) {
  to->insert(to->end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  from.clear();
}
}  // namespace

DeviceBlock::~DeviceBlock() {
  pool_->release(DeviceMemoryPool::Idle{capacity_, data_, std::move(fences_), std::move(keep_)});
}

Device& DeviceBlock::device() const { return pool_->device(); }

std::shared_ptr<DeviceMemoryPool> DeviceMemoryPool::create(std::shared_ptr<Device> device,
                                                           size_t max_cached_bytes) {
  return std::shared_ptr<DeviceMemoryPool>(
      new DeviceMemoryPool(std::move(device), max_cached_bytes));
}

DeviceMemoryPool::~DeviceMemoryPool() {
  for (auto& b : idle_) free_when_done(b);
}

void DeviceMemoryPool::sweep(std::vector<std::shared_ptr<const void>>* done) {
  for (auto& b : idle_)
    if (!b.keep.empty() && prune(b.fences)) move_into(b.keep, done);
}

Result<std::unique_ptr<DeviceBlock>> DeviceMemoryPool::acquire(size_t bytes) {
  const size_t cls = BufferPool::size_class(bytes);
  std::vector<std::shared_ptr<const void>> done;  // dropped after the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    sweep(&done);
    const size_t i =
        BufferPool::pick_idle(idle_.size(), cls, [this](size_t k) { return idle_[k].capacity; });
    if (i < idle_.size()) {
      Idle b = std::move(idle_[i]);
      idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(i));
      stats_.cached_bytes -= b.capacity;
      ++stats_.reuses;
      if (prune(b.fences)) move_into(b.keep, &done);
      // What it keeps stays with it until the fences it still has (waited for by the new
      // writer, so before the new copy's own event) complete.
      return std::unique_ptr<DeviceBlock>(new DeviceBlock(b.data, b.capacity, std::move(b.fences),
                                                          std::move(b.keep), shared_from_this()));
    }
  }
  auto data = device_->allocate(cls);
  if (!data.is_ok())
    return Status(data.status().code(), device_->name() + ": cannot allocate " +
                                            std::to_string(cls) + " bytes of device memory (" +
                                            data.status().message() + ")");
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
  }
  return std::unique_ptr<DeviceBlock>(
      new DeviceBlock(static_cast<uint8_t*>(*data), cls, {}, {}, shared_from_this()));
}

void DeviceMemoryPool::release(Idle block) {
  std::vector<std::shared_ptr<const void>> done;  // dropped after the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    sweep(&done);
    if (stats_.cached_bytes + block.capacity <= max_cached_) {
      if (prune(block.fences)) move_into(block.keep, &done);
      stats_.cached_bytes += block.capacity;
      idle_.push_back(std::move(block));
      return;
    }
  }
  free_when_done(block);
}

void DeviceMemoryPool::free_when_done(Idle& block) {
  bool done = true;
  for (auto& f : block.fences) {
    (void)f->wait(kFenceWaitMs);  // work that failed is over too
    auto q = f->query();
    if (q.is_ok() && !*q) done = false;  // still running: freeing could corrupt a kernel
  }
  if (done) {
    device_->free(block.data);
    block.keep.clear();
  } else {
    new std::vector<std::shared_ptr<const void>>(std::move(block.keep));  // NOLINT: leaked
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++(done ? stats_.frees : stats_.leaked);
}

DevicePoolStats DeviceMemoryPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shardyard::gpu
