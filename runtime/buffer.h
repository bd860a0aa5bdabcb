// Page-aligned byte buffers and a pool that recycles them.
//
// Fresh buffers of 128 KiB or more cost a page fault per 4 KiB on first touch, and copies
// into buffers that start 8 or 16 bytes into a page run at a quarter of the speed on this
// CPU (see docs/performance.md). Every bulk buffer (chunks read from a source, batch
// columns) therefore comes from a BufferPool: page-aligned, reused, bounded.
//
// A pool takes its memory from a BufferAllocator: page-aligned heap memory by default;
// gpu/ gives batch columns page-locked (pinned) memory, which a device copies from without
// staging.
//
// Thread-safe: acquire() and the release done by a buffer's last owner may run on any
// thread. The pool must outlive its buffers (hold it by shared_ptr; buffers keep it alive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/mutex.h"

namespace shardyard {

class BufferPool;

// Where a pool's memory comes from. Thread-safe: called from any thread.
class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;
  // A page-aligned block of `bytes` bytes, or null when there is no memory.
  virtual uint8_t* allocate(size_t bytes) = 0;
  // Gives back a block of allocate(bytes).
  virtual void deallocate(uint8_t* data, size_t bytes) = 0;
};

// Memory a reader may read chunks into instead of its pool, where what it reads then goes
// on without a copy: a worker process reads into its channel's shared arena
// (io/transport/shm_arena.h ArenaChunks), so the loader sees the bytes where they landed.
// Thread-safe: called from any thread.
class ChunkAllocator {
 public:
  virtual ~ChunkAllocator() = default;
  // `bytes` (> 0) writable bytes, 64-byte aligned, kept alive by what it stores in *owner;
  // nullptr (owner untouched) when there is no room now: the caller uses its pool instead.
  virtual uint8_t* allocate(size_t bytes, std::shared_ptr<const void>* owner) = 0;
};

// A page-aligned block of `capacity()` bytes; `size()` is how much is in use.
class Buffer {
 public:
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  void set_size(size_t n) { size_ = n; }

 private:
  friend class BufferPool;

  Buffer(uint8_t* data, size_t capacity, std::shared_ptr<BufferPool> pool)
      : data_(data), capacity_(capacity), pool_(std::move(pool)) {}
  uint8_t* data_;
  size_t size_ = 0;
  size_t capacity_;
  std::shared_ptr<BufferPool> pool_;  // never null
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_cached_bytes` of idle buffers for reuse.
  static std::shared_ptr<BufferPool> create(size_t max_cached_bytes = 32u << 20);
  // The same with memory from `allocator` (null: page-aligned heap memory).
  static std::shared_ptr<BufferPool> create(size_t max_cached_bytes,
                                            std::shared_ptr<BufferAllocator> allocator);
  ~BufferPool();
  // A buffer of at least `bytes` (rounded up to a size class; an idle one may be up to a
  // quarter larger, see pick_idle), size() == bytes.
  std::shared_ptr<Buffer> acquire(size_t bytes);
  size_t cached_bytes() const;
  // The capacity acquire(bytes) hands out: 4 KiB, powers of two to 1 MiB, then whole MiB.
  static size_t size_class(size_t bytes);
  // Which of `n` idle blocks (capacity(i): the capacity of block i, released in order i)
  // serves a request of size class `cls`: the last released of exactly that class, else the
  // smallest of up to a quarter more (whole-MiB classes: the columns of large samples of
  // varied sizes differ from batch to batch by a few MiB, and a block that is not reused
  // makes another one of fresh, page-faulting memory); n when none does.
  template <typename Capacity>
  static size_t pick_idle(size_t n, size_t cls, Capacity capacity) {
    size_t best = n;
    for (size_t i = n; i-- > 0;) {
      const size_t c = capacity(i);
      if (c == cls) return i;
      if (c > cls && c - cls <= cls / 4 && (best == n || c < capacity(best))) best = i;
    }
    return best;
  }

 private:
  BufferPool(size_t max_cached, std::shared_ptr<BufferAllocator> allocator)
      : max_cached_(max_cached), allocator_(std::move(allocator)) {}
  friend class Buffer;
  void release(uint8_t* data, size_t capacity);

  const size_t max_cached_;
  const std::shared_ptr<BufferAllocator> allocator_;  // never null
  mutable Mutex mu_;
  std::vector<std::pair<size_t, uint8_t*>> idle_ SY_GUARDED_BY(mu_);
  size_t idle_bytes_ SY_GUARDED_BY(mu_) = 0;
};

}  // namespace shardyard
