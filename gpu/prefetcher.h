// DevicePrefetcher: copies batches to a device ahead of the trainer, on a stream of its own.
//
// A copy thread takes host batches from `source` in order (the loader's collated batches,
// whose columns sit in pinned memory), queues one host-to-device copy per column into a
// pooled device block on the prefetcher's stream, records one event per batch, attaches a
// DeviceBatch to it (gpu/device_batch.h) and queues it for next(). So the copies of the
// next `depth` batches run while the trainer computes on the current one; next() does not
// wait for a copy, the trainer's stream does (DeviceBatch::wait_on).
//
// Bounds: at most `depth` batches are taken from the source and not yet handed out.
// Device blocks come back to the pool when the trainer drops a batch, fenced by the
// trainer's work (gpu/device_pool.h), and are reused.
//
// Errors come in order: the batches before a source error or a failed copy are delivered,
// then next() returns the error, and keeps returning it (or the end of the epoch). A copy
// that fails on the device is reported by its batch's ready event, and by next() as soon
// as it is known: a batch is not handed out once its copies or those of the batch before
// it are known to have failed.
//
// Thread-compatible for the consumer (one thread calls next()); cancel() from any thread.
// The source is called on the copy thread only; destroying the prefetcher joins that
// thread, so whoever owns the source must make it return first (the loader stops its
// collators).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "gpu/device_batch.h"
#include "gpu/device_pool.h"

namespace shardyard::gpu {

struct PrefetchOptions {
  uint32_t depth = 2;  // batches copied or being copied ahead of the trainer, 1..64
};

struct PrefetchStats {
  uint64_t batches = 0;    // batches whose copies were queued
  uint64_t bytes = 0;      // bytes queued for copying
  uint32_t max_ahead = 0;  // most batches taken from the source and not yet handed out
};

class DevicePrefetcher {
 public:
  using Source = std::function<Result<std::optional<Batch>>()>;
  // Creates the copy stream and starts the copy thread.
  static Result<std::unique_ptr<DevicePrefetcher>> start(std::shared_ptr<DeviceMemoryPool> pool,
                                                         Source source,
                                                         PrefetchOptions options = {});
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // The next batch with its device copy attached (gpu::on_device), nullopt after the last.
  Result<std::optional<Batch>> next();
  // Stops the copy thread after its current batch; a blocked next() returns kCancelled.
  void cancel();
  PrefetchStats stats() const;

 private:
  using Entry = Result<std::optional<Batch>>;
  DevicePrefetcher(std::shared_ptr<DeviceMemoryPool> pool, std::unique_ptr<Stream> stream,
                   Source source, PrefetchOptions options);
  void run();
  Status copy(Batch& batch);

  const std::shared_ptr<DeviceMemoryPool> pool_;
  const std::unique_ptr<Stream> stream_;  // used by the copy thread only
  const Source source_;
  const PrefetchOptions options_;
  std::shared_ptr<Event> last_ready_;  // of the last batch queued; copy thread only
  std::shared_ptr<Event> last_given_;  // of the last batch next() returned; consumer only
  mutable std::mutex mu_;
  std::condition_variable room_;     // the copy thread waits for room here
  std::condition_variable arrived_;  // next() waits for a batch here
  std::deque<Entry> queue_;          // guarded by mu_
  std::optional<Entry> final_;       // the end or the error, once next() saw it; guarded by mu_
  bool stop_ = false;                // guarded by mu_
  PrefetchStats stats_;              // guarded by mu_
  std::thread thread_;
};

}  // namespace shardyard::gpu
