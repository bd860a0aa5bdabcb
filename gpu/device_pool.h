// DeviceMemoryPool: device memory for batches, reused from one batch to the next.
//
// Allocating and freeing device memory is slow and, with CUDA, synchronises the whole
// device, so a copy pipeline keeps its blocks. A block goes back to the pool with fences:
// events after the last work that touches it (the copy that filled it, the trainer's
// kernels). Whoever takes it again makes its writing stream wait for those fences first, so
// the memory is never overwritten while a kernel still reads it, and the host never blocks
// for it. A block also keeps the host memory its copies read (the pinned batch columns)
// until its fences complete: dropping a batch whose copy still runs blocks nobody. Sizes
// come in BufferPool's size classes, and an idle block serves a request as
// BufferPool::pick_idle says (its class, else up to a quarter larger); idle blocks are kept
// up to `max_cached_bytes`, and a block beyond that is freed once its fences completed.
//
// Thread-safe. Blocks keep their pool (and its device) alive.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "gpu/device.h"

namespace shardyard::gpu {

class DeviceMemoryPool;

class DeviceBlock {
 public:
  ~DeviceBlock();  // back to the pool, with its fences and what it keeps
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  Device& device() const;
  // Work that must finish before the block is written: a writer's stream waits for these
  // (Stream::wait) and then clears them.
  const std::vector<std::shared_ptr<Event>>& fences() const { return fences_; }
  void clear_fences() { fences_.clear(); }
  // Adds the point after work that touches the block, before it goes back.
  void add_fence(std::shared_ptr<Event> event) { fences_.push_back(std::move(event)); }
  // Keeps `memory` (what a copy into the block reads) alive until the block's fences, as
  // they are when it goes back to the pool, have completed.
  void keep(std::shared_ptr<const void> memory) { keep_.push_back(std::move(memory)); }

 private:
  friend class DeviceMemoryPool;
  DeviceBlock(uint8_t* data, size_t capacity, std::vector<std::shared_ptr<Event>> fences,
              std::vector<std::shared_ptr<const void>> keep, std::shared_ptr<DeviceMemoryPool> pool)
      : data_(data),
        capacity_(capacity),
        fences_(std::move(fences)),
        keep_(std::move(keep)),
        pool_(std::move(pool)) {}
  uint8_t* data_;
  size_t capacity_;
  std::vector<std::shared_ptr<Event>> fences_;
  std::vector<std::shared_ptr<const void>> keep_;
  std::shared_ptr<DeviceMemoryPool> pool_;
};

struct DevicePoolStats {
  uint64_t allocations = 0;  // blocks allocated on the device
  uint64_t reuses = 0;       // blocks handed out again
  uint64_t frees = 0;        // blocks freed (cache full, or the pool destroyed)
  uint64_t leaked = 0;       // blocks never freed: their fences did not complete in time
  size_t cached_bytes = 0;
};

class DeviceMemoryPool : public std::enable_shared_from_this<DeviceMemoryPool> {
 public:
  static std::shared_ptr<DeviceMemoryPool> create(std::shared_ptr<Device> device,
                                                  size_t max_cached_bytes);
  ~DeviceMemoryPool();
  // A block of at least `bytes` bytes (its capacity() may be larger).
  Result<std::unique_ptr<DeviceBlock>> acquire(size_t bytes);
  Device& device() const { return *device_; }
  DevicePoolStats stats() const;

 private:
  friend class DeviceBlock;
  struct Idle {
    size_t capacity;
    uint8_t* data;
    std::vector<std::shared_ptr<Event>> fences;
    std::vector<std::shared_ptr<const void>> keep;
  };
  DeviceMemoryPool(std::shared_ptr<Device> device, size_t max_cached)
      : device_(std::move(device)), max_cached_(max_cached) {}
  void release(Idle block);
  // Drops the completed fences of every idle block, and moves what a block keeps into
  // `done` once it has no fence left (dropped by the caller outside the lock).
  void sweep(std::vector<std::shared_ptr<const void>>* done);  // mu_ held
  void free_when_done(Idle& block);  // waits for the fences, then frees (or leaks)

  const std::shared_ptr<Device> device_;
  const size_t max_cached_;
  mutable std::mutex mu_;
  std::vector<Idle> idle_;  // guarded by mu_
  DevicePoolStats stats_;   // guarded by mu_
};

}  // namespace shardyard::gpu
