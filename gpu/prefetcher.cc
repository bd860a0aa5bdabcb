#include "gpu/prefetcher.h"

#include <algorithm>

namespace shardyard::gpu {

namespace {
constexpr size_t kColumnAlign = 256;  // what DLPack and CUDA kernels expect of a tensor

std::string batch_name(const Batch& b) {
  return "batch (epoch " + std::to_string(b.epoch()) + ", step " + std::to_string(b.step()) + ")";
}
}  // namespace

Result<std::unique_ptr<DevicePrefetcher>> DevicePrefetcher::start(
    std::shared_ptr<DeviceMemoryPool> pool, Source source, PrefetchOptions options) {
  if (options.depth == 0 || options.depth > 64)
    return invalid_argument("device prefetch depth must be 1..64, not " +
                            std::to_string(options.depth));
  auto stream = pool->device().create_stream();
  if (!stream.is_ok())
    return Status(
        stream.status().code(),
        pool->device().name() + ": cannot create the copy stream: " + stream.status().message());
  return std::unique_ptr<DevicePrefetcher>(
      new DevicePrefetcher(std::move(pool), std::move(stream).value(), std::move(source), options));
}

DevicePrefetcher::DevicePrefetcher(std::shared_ptr<DeviceMemoryPool> pool,
                                   std::unique_ptr<Stream> stream, Source source,
                                   PrefetchOptions options)
    : pool_(std::move(pool)),
      stream_(std::move(stream)),
      source_(std::move(source)),
      options_(options) {
  thread_ = std::thread([this] { run(); });
}

DevicePrefetcher::~DevicePrefetcher() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

void DevicePrefetcher::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  arrived_.notify_all();
}

void DevicePrefetcher::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_.wait(lock, [&] { return stop_ || queue_.size() < options_.depth; });
      if (stop_) return;
    }
    Entry got = source_();
    bool last = !got.is_ok() || !got->has_value();
    if (!last) {
      // A copy that failed on the device shows in the last batch's event: stop there.
      Status st = Status::ok();
      if (last_ready_) {
        auto done = last_ready_->query();
        if (!done.is_ok())
          st = Status(done.status().code(), pool_->device().name() + ": an earlier copy failed: " +
                                                done.status().message());
      }
      if (st.is_ok()) st = copy(**got);
      if (!st.is_ok()) {
        got = st;
        last = true;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(got));
      stats_.max_ahead = std::max<uint32_t>(stats_.max_ahead, queue_.size());
    }
    arrived_.notify_one();
    if (last) return;
  }
}

Status DevicePrefetcher::copy(Batch& batch) {
  Device& dev = pool_->device();
  const auto& cols = batch.columns();
  std::vector<DeviceColumn> out(cols.size());
  std::vector<size_t> at(cols.size());
  size_t total = 0;
  for (size_t i = 0; i < cols.size(); ++i) {
    out[i].name = cols[i].name;
    out[i].bytes = cols[i].bytes();
    at[i] = total;
    total += (out[i].bytes + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
  }
  auto block = pool_->acquire(total);
  if (!block.is_ok())
    return Status(block.status().code(), block.status().message() + " for " + batch_name(batch));
  // The block's last readers (the trainer's kernels on an earlier batch) finish first.
  for (const auto& f : (*block)->fences()) SY_RETURN_IF_ERROR(stream_->wait(*f));
  (*block)->clear_fences();

  std::vector<std::shared_ptr<Buffer>> sources;
  Status st = Status::ok();
  uint64_t bytes = 0;
  for (size_t i = 0; i < cols.size() && st.is_ok(); ++i) {
    out[i].data = (*block)->data() + at[i];
    if (out[i].bytes == 0) continue;
    st = stream_->copy_to_device(out[i].data, cols[i].data(), out[i].bytes);
    if (!st.is_ok()) {
      st = Status(st.code(), dev.name() + ": copy of column '" + cols[i].name + "' (" +
                                 std::to_string(out[i].bytes) + " bytes) of " + batch_name(batch) +
                                 " failed: " + st.message());
    }
    sources.push_back(cols[i].buffer);
    bytes += out[i].bytes;
  }
  auto ready = stream_->record();
  if (!ready.is_ok()) {
    // Copies may be queued with no way to know when they end: keep what they touch.
    new std::vector<std::shared_ptr<Buffer>>(std::move(sources));  // NOLINT: leaked on purpose
    (void)block->release();                                        // NOLINT: leaked on purpose
    return Status(ready.status().code(), dev.name() + ": cannot record the copy event of " +
                                             batch_name(batch) + ": " + ready.status().message());
  }
  last_ready_ = *ready;
  // On a failed copy it is dropped at once: its block goes back fenced by what was queued.
  auto device_copy = std::make_shared<const DeviceBatch>(
      std::move(block).value(), std::move(out), std::move(ready).value(), std::move(sources));
  if (!st.is_ok()) return st;
  batch.set_device(std::move(device_copy));
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.batches;
  stats_.bytes += bytes;
  return Status::ok();
}

Result<std::optional<Batch>> DevicePrefetcher::next() {
  Entry e = std::optional<Batch>();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (final_) return *final_;
    arrived_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return cancelled("the device prefetcher was stopped");
    e = std::move(queue_.front());
    queue_.pop_front();
    if (!e.is_ok() || !e->has_value()) final_ = e;
  }
  room_.notify_one();
  if (e.is_ok() && e->has_value()) {
    // A copy of this batch, or of the one before, may have failed already: say so now
    // rather than hand out memory that never got its bytes.
    Event& ready = on_device(**e)->ready();
    for (Event* ev : {last_given_.get(), &ready}) {
      auto done = ev ? ev->query() : Result<bool>(true);
      if (done.is_ok()) continue;
      Status st(done.status().code(),
                pool_->device().name() + ": a copy of " + batch_name(**e) +
                    " or of the batch before it failed: " + done.status().message());
      std::lock_guard<std::mutex> lock(mu_);
      final_ = st;
      return st;
    }
    last_given_ = on_device(**e)->ready_event();
  }
  return e;
}

PrefetchStats DevicePrefetcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shardyard::gpu
