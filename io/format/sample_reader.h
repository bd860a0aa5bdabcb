// SampleReader: reads a run of a source's samples into items, one read per run.
//
// For a tar shard the byte range of samples [first, last) (known from the manifest) is read
// with one positioned read into a pooled page-aligned buffer (or memory from a
// ChunkAllocator, when one is set) and parsed in place; every item's fields are views into
// that buffer, which the items keep alive. Ranges of at least
// `map_threshold_bytes` are memory-mapped instead of read where the file system allows it:
// the page cache is then copied once, straight into the batch, and the mapping is dropped
// when the range's last item is. A gzip-compressed
// shard is inflated forward from where this reader last stopped (restarting only when asked
// for an earlier run). A directory source reads the run's files. What is read is checked
// against the manifest (keys and member boundaries), so a shard that changed since its
// manifest was built is reported as corrupt, not silently misread.
//
// A records source (a windows dataset, runtime/window.h) reads windows [first, last): the
// records they cover, [first window's start, last window's start + span), with one
// positioned read into one pooled buffer (or one mapping when the range is at least
// `map_threshold_bytes`); when the last windows are stitched, the head of the next source
// follows the tail in the same buffer (a second read, never a mapping). Every window's
// fields ("x": LENGTH records, "y": the target record when TARGET > 0) are views into that
// one buffer, so overlapping windows share bytes and no window is copied. Reading a whole
// logical shard of windows as one buffer is one read() call over its item range.
//
// A file is checked against its manifest entry when it is opened (size, and version when
// both are known): a shard replaced since the manifest was built is reported as changed,
// naming the shard and what differs, before any byte of it is used. A shard that shrinks
// while it is read is reported as changed too, never delivered short (a short read), and a
// memory-mapped range cut short is caught by the mapping guard (mapping_guard.h).
//
// No sample larger than `max_sample_bytes` (its members with their headers) is read: it
// fails with its key, before its buffer is allocated or a compressed shard is inflated
// into it, so a small .tar.gz that inflates to gigabytes cannot take the memory.
//
// Single-owner: one SampleReader per worker thread (it caches open files).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/format/tar.h"
#include "io/fs/file_system.h"
#include "runtime/buffer.h"
#include "runtime/item.h"
#include "runtime/manifest.h"

namespace shardyard::io {

struct SampleReaderOptions {
  size_t max_open_files = 64;
  size_t map_threshold_bytes = 256u << 10;  // ranges at least this long are mapped
  uint64_t max_sample_bytes = kDefaultMaxSampleBytes;
  // Where every source is remote: a remote file holds no descriptor (its requests go on the
  // calling thread's connections), and one opened again has lost the blocks it fetched, so
  // many more stay open.
  size_t max_open_remote_files = 1024;
};

// kInvalidArgument naming the shard and the sample's key when one sample (its tar members
// with their headers; the files of a directory sample; a window) is larger than
// max_sample_bytes. A job checks its whole manifest once before it starts (so a run fails
// before its first batch, not in the middle of an epoch); every read checks its run again.
Status check_sample_bytes(const Manifest& manifest, uint64_t max_sample_bytes);

class SampleReader {
 public:
  SampleReader(FileSystem& fs, std::shared_ptr<const Manifest> manifest,
               std::shared_ptr<BufferPool> pool, SampleReaderOptions options = {});
  ~SampleReader();
  // Appends samples (or windows) [first, last) of source `source` to `out`; item ids are
  // first_item_id, first_item_id + 1, ... (shard is left for the caller to set).
  Status read(uint32_t source, uint64_t first, uint64_t last, uint64_t first_item_id,
              std::vector<Item>* out);
  // A hint that samples [first, last) of `source` come next: the file is opened now and a
  // remote one starts fetching the range in the background (read_ahead.h). Errors are left
  // for read() to report.
  void will_need(uint32_t source, uint64_t first, uint64_t last);
  // For a caller that names a tar shard's next runs together: how many bytes one hint to
  // its file had best name (RandomAccessFile::hint_bytes(); 0, also for any other source:
  // name each run alone), and the bytes of samples [first, last). Opens the file, as a
  // hint would.
  uint64_t hint_bytes(uint32_t source);
  uint64_t tar_bytes(uint32_t source, uint64_t first, uint64_t last) const;
  // How many source files stay open at once (SampleReaderOptions::max_open_files, or
  // max_open_remote_files where every source is remote).
  size_t max_open_files() const { return max_open_; }
  uint64_t bytes_read() const { return bytes_read_; }
  // Where the ranges of tar shards that are read (not mapped) go from now on, ahead of the
  // pool: a worker process reads them into its channel's shared arena, so that the loader
  // takes the items there without a copy. Null: the pool alone.
  void set_chunk_allocator(std::shared_ptr<ChunkAllocator> chunks) { chunks_ = std::move(chunks); }
  // From now on, members of at least `bytes` (0: none) in runs of a local, uncompressed tar
  // shard whose samples average at least that many bytes are left unread: the run's headers
  // and small members are read with small positioned reads, and each large member becomes
  // an unread field (runtime/item.h Field::unread()) of an item whose owner is a FileBytes
  // with a reader of the shard, for build_batch() to read into its column. Only for items
  // that go to a batch untouched (no stage reads their bytes).
  void set_unread_field_bytes(uint64_t bytes) { unread_bytes_ = bytes; }

 private:
  struct GzCursor;
  Result<std::shared_ptr<RandomAccessFile>> file(uint32_t source);
  Status read_tar(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                  std::vector<Item>* out);
  Status read_records(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                      std::vector<Item>* out);
  Status read_dir(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                  std::vector<Item>* out);
  Status read_tar_unread(uint32_t source, const std::shared_ptr<RandomAccessFile>& f,
                         uint64_t first, uint64_t last, uint64_t id, std::vector<Item>* out);
  class SmallBytes;
  // parse() over a run read (or mapped) whole: bytes [base, base + size) of the source.
  Status parse_buffer(uint32_t source, const uint8_t* data, size_t size,
                      std::shared_ptr<const void> owner, uint64_t base, uint64_t first,
                      uint64_t last, uint64_t id, std::vector<Item>* out);
  // Matches the entries that `walk` hands out (bytes [.., end) of the source) to samples
  // [first, last) and makes their items, owned by `owner`; with `small`, read payloads are
  // copied there (they are valid only during the call) and null ones become unread fields.
  Status parse(uint32_t source, const std::function<Status(const TarPayloadFn&)>& walk,
               uint64_t end, std::shared_ptr<const void> owner, uint64_t first, uint64_t last,
               uint64_t id, std::vector<Item>* out, SmallBytes* small = nullptr);

  // The error for a short read or a failed mapping: "changed" when the file's size is not
  // the manifest's any more.
  Status changed(uint32_t source, const Status& st);
  Status inflate_range(uint32_t source, const std::shared_ptr<RandomAccessFile>& f, uint64_t begin,
                       uint64_t n, uint8_t* dst);
  Status check_sizes(uint32_t source, uint64_t first, uint64_t last) const;

  FileSystem& fs_;
  std::shared_ptr<const Manifest> manifest_;
  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<ChunkAllocator> chunks_;
  size_t max_open_;
  size_t map_threshold_;
  uint64_t max_sample_bytes_;
  // The open files, and their order of use (most recent first). Each keeps its place in
  // lru_, so that a read moves it to the front without walking the list: a reader of
  // remote shards keeps up to 1,024 open, and every chunk read and hint asks for its file.
  struct OpenFile {
    std::shared_ptr<RandomAccessFile> file;
    std::list<uint32_t>::iterator place;  // in lru_
  };
  std::list<uint32_t> lru_;
  std::unordered_map<uint32_t, OpenFile> open_;
  std::unordered_map<uint32_t, std::unique_ptr<GzCursor>> gz_;
  // Per open source: where parse()'s walks over its last runs stopped, the oldest first
  // (one per logical shard that reads the source, up to kMaxCursorsPerSource).
  static constexpr size_t kMaxCursorsPerSource = 16;
  std::unordered_map<uint32_t, std::vector<SampleTable::const_iterator>> cursors_;
  uint64_t bytes_read_ = 0;
  uint64_t unread_bytes_ = 0;
};

// A FileReader (runtime/item.h) of a source's open file: a short read is reported as the
// shard having changed since its manifest was built when its size is not the manifest's.
std::shared_ptr<const FileReader> source_file_reader(FileSystem& fs,
                                                     std::shared_ptr<RandomAccessFile> file,
                                                     const SourceEntry& src);

}  // namespace shardyard::io
