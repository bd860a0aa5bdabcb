#include "io/remote/read_ahead.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "io/remote/http_util.h"
#include "runtime/buffer.h"

namespace shardyard::io {

namespace {

class TaskPool {
 public:
  explicit TaskPool(unsigned threads) {
    for (unsigned i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { loop(); });
  }
  ~TaskPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and every queued task has run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

TaskPool& pool() {
  static TaskPool p([] {
    uint32_t n = 8;
    (void)env_u32("SHARDYARD_HTTP_THREADS", &n);  // checked by ReadAheadOptions::from_env
    return std::clamp<uint32_t>(n, 1, 256);
  }());
  return p;
}

// Buffers of blocks come from a pool (runtime/buffer.h): page-aligned, reused by size class
// (blocks have the size of each hinted chunk), at most 128 MiB idle. A fresh multi-MiB
// allocation is a fresh mapping that is page-faulted in on every fill (TOOLCHAIN.md:
// memory copies on this CPU).
std::shared_ptr<BufferPool> block_buffers() {
  static const std::shared_ptr<BufferPool> pool = BufferPool::create(128u << 20);
  return pool;
}

// One cached range of the file. Written by one fetch, then read-only once `ready` is set.
struct Block {
  uint64_t begin = 0;
  size_t size = 0;
  std::shared_ptr<Buffer> buffer;
  size_t got = 0;
  Status status;
  std::promise<void> done;
  std::shared_future<void> ready;

  Block(uint64_t b, size_t n)
      : begin(b), size(n), buffer(block_buffers()->acquire(n)), ready(done.get_future()) {}
  uint8_t* data() const { return buffer->data(); }
  uint64_t end() const { return begin + size; }
  void fill(RandomAccessFile& file) {
    auto r = file.read_at(begin, data(), size);
    if (r.is_ok()) {
      got = *r;
    } else {
      status = r.status();
    }
    done.set_value();
  }
};

// What ReadAheadFile::map gives: bytes of a fetched block, which it keeps.
class BlockView final : public MappedRange {
 public:
  BlockView(std::shared_ptr<Block> block, size_t at, size_t n)
      : block_(std::move(block)), at_(at), n_(n) {}
  const uint8_t* data() const override { return block_->data() + at_; }
  size_t size() const override { return n_; }

 private:
  std::shared_ptr<Block> block_;
  size_t at_, n_;
};

class ReadAheadFile : public RandomAccessFile {
 public:
  ReadAheadFile(std::shared_ptr<RandomAccessFile> base, const ReadAheadOptions& o)
      : base_(std::move(base)), o_(o), window_(o.initial_block_bytes / 2) {}

  uint64_t size() const override { return base_->size(); }
  const std::string& uri() const override { return base_->uri(); }
  int64_t version() const override { return base_->version(); }

  Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
    const uint64_t size = base_->size();
    if (offset >= size || n == 0) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, size - offset));
    const uint64_t end = offset + n;
    bool hinted;
    size_t window;
    const bool sequential = note_read(offset, end, &window, &hinted);
    // A hinted reader's misses fetch what they need, not a guess of a whole block.
    if (hinted) window = std::min(window, std::max(n, o_.initial_block_bytes));
    auto* out = static_cast<uint8_t*>(dst);
    uint64_t pos = offset;
    while (pos < end) {
      std::shared_ptr<Block> hit;
      uint64_t next_block = kNone;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& b : blocks_) {
          if (b->begin <= pos && pos < b->end()) hit = b;
          if (b->begin > pos) next_block = std::min(next_block, b->begin);
        }
      }
      if (hit) {
        hit->ready.wait();
        if (hit->status.is_ok() && pos < hit->begin + hit->got) {
          size_t take = static_cast<size_t>(std::min(end, hit->begin + hit->got) - pos);
          std::memcpy(out + (pos - offset), hit->data() + (pos - hit->begin), take);
          pos += take;
          // Its last byte is read: readers do not come back (a tar scan and the sample
          // reader both read each byte once), so its memory goes to the next block.
          if (pos == hit->end()) forget(hit);
          continue;
        }
        // A failed fetch had its retries and its deadline: its error is the read's (trying
        // again would double the time a dead server holds the reader). A short one: forget
        // it and read the range directly.
        forget(hit);
        if (!hit->status.is_ok()) return hit->status;
        uint64_t stop = std::min(end, hit->end());
        SY_RETURN_IF_ERROR(direct(pos, static_cast<size_t>(stop - pos), out + (pos - offset)));
        pos = stop;
        continue;
      }
      const uint64_t gap_end = std::min(end, next_block);
      const size_t gap = static_cast<size_t>(gap_end - pos);
      if (sequential && gap < o_.block_bytes) {
        size_t len = static_cast<size_t>(
            std::min<uint64_t>({size - pos, std::max(window, gap), next_block - pos}));
        auto b = std::make_shared<Block>(pos, len);
        insert(b);
        b->fill(*base_);  // on this thread: the reader waits for it anyway
        continue;
      }
      SY_RETURN_IF_ERROR(direct(pos, gap, out + (pos - offset)));
      pos = gap_end;
    }
    // Blind read-ahead only for a reader that gives no hints (a header scan, a gzip
    // stream): one that does (the sample reader) says exactly what comes next, and
    // guessing on top of it, for many interleaved streams, evicts blocks before use.
    if (sequential && window >= o_.block_bytes && o_.readahead_blocks > 0 && !hinted)
      prefetch(end, o_.readahead_blocks * o_.block_bytes, false);
    return n;
  }

  // A view of a fetched block when one holds all of [offset, offset + n) (waiting for it
  // while it is fetched), so that a chunk the reader asked for ahead is not copied out of
  // it; nullptr otherwise (the caller reads, which fetches). The view keeps the block's
  // memory; the block leaves the cache as a read would take it out (its last byte taken).
  Result<std::shared_ptr<const MappedRange>> map(uint64_t offset, size_t n) override {
    const uint64_t size = base_->size();
    if (n == 0 || offset >= size || n > size - offset) return std::shared_ptr<const MappedRange>();
    const uint64_t end = offset + n;
    std::shared_ptr<Block> hit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& b : blocks_)
        if (b->begin <= offset && end <= b->end()) hit = b;
    }
    if (!hit) return std::shared_ptr<const MappedRange>();
    hit->ready.wait();
    if (!hit->status.is_ok() || end > hit->begin + hit->got) {
      return std::shared_ptr<const MappedRange>();  // read_at says what went wrong
    }
    note_read(offset, end);
    if (end == hit->end()) forget(hit);
    return std::shared_ptr<const MappedRange>(
        std::make_shared<BlockView>(hit, static_cast<size_t>(offset - hit->begin), n));
  }

  size_t hint_bytes() const override { return o_.readahead_blocks == 0 ? 0 : o_.hint_bytes; }

  void will_need(uint64_t offset, size_t n) override {
    if (offset >= base_->size() || o_.readahead_blocks == 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::find(ends_.begin(), ends_.end(), offset) == ends_.end())
        ends_[next_end_++ % ends_.size()] = offset;  // a read there will be sequential
      hinted_ = true;
    }
    // The range the reader names, so that its read of it finds one block and takes a view
    // of it (map) instead of a copy: a hint rounded up to initial_block_bytes covered a
    // small chunk and part of the next, whose read then spanned two blocks and was copied.
    // At least kMinHintBytes, so that tiny chunks still cost few requests.
    const size_t most = std::max(o_.max_cached_bytes / 2, o_.initial_block_bytes);
    prefetch(offset, std::clamp(n, kMinHintBytes, most), true);
  }

 private:
  static constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  static constexpr size_t kMinHintBytes = 64u << 10;

  // Notes a read of [offset, end): whether it continues a stream (where one of the last
  // reads ended, or where a hint pointed), the next sequential fetch size and whether the
  // reader gives hints.
  bool note_read(uint64_t offset, uint64_t end, size_t* window = nullptr, bool* hinted = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(ends_.begin(), ends_.end(), offset);
    const bool sequential = it != ends_.end();
    if (sequential) {
      *it = end;  // this stream goes on
    } else {
      ends_[next_end_++ % ends_.size()] = end;
    }
    window_ = sequential ? std::min(o_.block_bytes, std::max(window_ * 2, o_.initial_block_bytes))
                         : o_.initial_block_bytes / 2;
    if (window) *window = window_;
    if (hinted) *hinted = hinted_;
    return sequential;
  }

  // Reads [pos, pos + n) into dst with ranged reads of at most block_bytes, all but the
  // first on the I/O pool, in parallel.
  Status direct(uint64_t pos, size_t n, uint8_t* dst) {
    const size_t piece = o_.block_bytes;
    const size_t pieces = (n + piece - 1) / piece;
    std::vector<Status> results(pieces);
    std::vector<std::promise<void>> done(pieces);
    auto read_piece = [this, pos, n, piece, dst, &results](size_t i) {
      uint64_t at = pos + i * piece;
      size_t len = std::min(piece, n - i * piece);
      auto r = base_->read_at(at, dst + i * piece, len);
      if (!r.is_ok()) {
        results[i] = r.status();
      } else if (*r != len) {
        results[i] = corrupt(base_->uri() + ": object ended at byte " + std::to_string(at + *r) +
                             ", expected " + std::to_string(base_->size()) +
                             " bytes (it changed since it was opened)");
      }
    };
    for (size_t i = 1; i < pieces; ++i)
      run_io_task([&, i] {
        read_piece(i);
        done[i].set_value();
      });
    read_piece(0);
    for (size_t i = 1; i < pieces; ++i) done[i].get_future().wait();
    for (auto& st : results) SY_RETURN_IF_ERROR(st);
    return Status::ok();
  }

  // Starts background fetches of the uncached parts of [from, from + bytes), in blocks of
  // block_bytes; `exact`: the last block ends at from + bytes (a hint's range).
  void prefetch(uint64_t from, size_t bytes, bool exact) {
    const uint64_t size = base_->size();
    const uint64_t until = std::min<uint64_t>(size, from + bytes);
    std::vector<std::shared_ptr<Block>> started;
    {
      std::lock_guard<std::mutex> lock(mu_);
      uint64_t p = from;
      while (p < until) {
        uint64_t covered = 0, next_block = kNone;
        for (const auto& b : blocks_) {
          if (b->begin <= p && p < b->end()) covered = b->end();
          if (b->begin > p) next_block = std::min(next_block, b->begin);
        }
        if (covered) {
          p = covered;
          continue;
        }
        size_t len = static_cast<size_t>(
            std::min<uint64_t>({o_.block_bytes, (exact ? until : size) - p, next_block - p}));
        auto b = std::make_shared<Block>(p, len);
        insert_locked(b);
        started.push_back(b);
        p += len;
      }
    }
    for (auto& b : started) {
      std::shared_ptr<RandomAccessFile> base = base_;
      run_io_task([base, b] { b->fill(*base); });
    }
  }

  void insert(std::shared_ptr<Block> b) {
    std::lock_guard<std::mutex> lock(mu_);
    insert_locked(std::move(b));
  }

  // Keeps at most max_cached_bytes (read blocks are dropped as soon as read): the oldest
  // goes first.
  void insert_locked(std::shared_ptr<Block> b) {
    while (!blocks_.empty() && cached_ + b->size > o_.max_cached_bytes) {
      cached_ -= blocks_.front()->size;
      blocks_.erase(blocks_.begin());
    }
    cached_ += b->size;
    blocks_.push_back(std::move(b));
  }

  void forget(const std::shared_ptr<Block>& b) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(blocks_.begin(), blocks_.end(), b);
    if (it == blocks_.end()) return;  // already evicted
    cached_ -= b->size;
    blocks_.erase(it);
  }

  std::shared_ptr<RandomAccessFile> base_;
  const ReadAheadOptions o_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Block>> blocks_;  // guarded by mu_; oldest first
  size_t cached_ = 0;                           // guarded by mu_: bytes of blocks_
  // Guarded by mu_: where the last few reads ended and where hints point. A read starting
  // at one of them is sequential (several streams can read one file: the chunks of
  // different logical shards, interleaved by a worker).
  std::array<uint64_t, 8> ends_{0, kNone, kNone, kNone, kNone, kNone, kNone, kNone};
  size_t next_end_ = 1;  // guarded by mu_
  size_t window_;        // guarded by mu_: the next sequential fetch size
  bool hinted_ = false;  // guarded by mu_: will_need() has been called
};

}  // namespace

void run_io_task(std::function<void()> task) { pool().submit(std::move(task)); }

Result<ReadAheadOptions> ReadAheadOptions::from_env() {
  ReadAheadOptions o;
  uint32_t block = static_cast<uint32_t>(o.block_bytes), threads = 8;
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_BLOCK_BYTES", &block));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_READAHEAD_BLOCKS", &o.readahead_blocks));
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_THREADS", &threads));
  if (block < (64u << 10))
    return invalid_argument("SHARDYARD_HTTP_BLOCK_BYTES=" + std::to_string(block) +
                            " is below the minimum of 65536");
  o.block_bytes = block;
  o.initial_block_bytes = std::min(o.initial_block_bytes, o.block_bytes);
  uint32_t cache = static_cast<uint32_t>(o.max_cached_bytes);
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_FILE_CACHE_BYTES", &cache));
  uint32_t hint = static_cast<uint32_t>(o.hint_bytes);
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_HINT_BYTES", &hint));
  o.hint_bytes = hint;
  o.max_cached_bytes = std::max<size_t>(cache, (o.readahead_blocks + 2) * o.block_bytes);
  return o;
}

std::unique_ptr<RandomAccessFile> read_ahead_file(std::shared_ptr<RandomAccessFile> base,
                                                  const ReadAheadOptions& options) {
  return std::make_unique<ReadAheadFile>(std::move(base), options);
}

}  // namespace shardyard::io
