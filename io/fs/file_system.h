// FileSystem: where source bytes come from.
//
// A FileSystem resolves a uri to metadata, a random-access reader, or a listing. The local
// file system is here; HTTP(S) and S3 (io/remote/remote_file_system.h) implement the same
// interface with connection reuse, ranged reads, read-ahead and retries inside, and
// io::default_file_system() there routes each uri to the one its scheme names. Test doubles (in
// memory, failing) live in tests/io/.
//
// Thread-safety: FileSystem implementations are thread-safe. A RandomAccessFile may be
// read from several threads at once (read_at has no cursor); a ByteStream has one owner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace shardyard::io {

struct FileInfo {
  std::string uri;
  bool is_directory = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;  // local files: status change time (0 where unknown)
  uint64_t inode = 0;    // local files: inode number (0 where unknown)
};

// A read-only view of a byte range of a file, valid while the object lives (a memory
// mapping of the page cache for local files: no copy is made).
class MappedRange {
 public:
  virtual ~MappedRange() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at `offset`; fewer only at the end of the file.
  virtual Result<size_t> read_at(uint64_t offset, void* dst, size_t n) = 0;
  // Maps [offset, offset + n) read-only, or nullptr when this file cannot be mapped (the
  // caller then reads). Fails when the range is past the end of the file.
  virtual Result<std::shared_ptr<const MappedRange>> map(uint64_t /*offset*/, size_t /*n*/) {
    return std::shared_ptr<const MappedRange>();
  }
  // A hint that [offset, offset + n) will be read soon: a remote file starts fetching it
  // in the background. Never required for correctness.
  virtual void will_need(uint64_t /*offset*/, size_t /*n*/) {}
  virtual uint64_t size() const = 0;
  virtual const std::string& uri() const = 0;
  // What identifies this version of the file for the manifest cache (FileInfo::mtime_ns):
  // the modification time of a local file, a stamp of Last-Modified and ETag for a remote
  // object (http_util.h: remote_version_stamp), read when the file was opened.
  virtual int64_t version() const { return 0; }
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // kNotFound when the uri does not exist. The local file system refuses
  // (kInvalidArgument) what is neither a regular file nor a directory, such as a FIFO,
  // which would block a reader forever; open() refuses it too.
  virtual Result<FileInfo> stat(const std::string& uri) = 0;
  virtual Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) = 0;
  // Regular files below a directory, recursively, as sorted paths relative to it.
  virtual Result<std::vector<std::string>> list(const std::string& dir_uri) = 0;
};

// The process's local file system (a singleton).
FileSystem& local_file_system();

// Reads exactly n bytes at offset or fails with a message naming the file and offset.
Status read_exact(RandomAccessFile& f, uint64_t offset, void* dst, size_t n);

// Writes a local file atomically: a temporary file beside `path`, fsync, rename over
// `path`, and with `sync_dir` an fsync of the directory so the rename itself is durable.
// Readers see the old bytes or the new, never a part; a crash leaves at most a temporary.
Status write_file_atomic(const std::string& path, std::string_view bytes, bool sync_dir);

// A sequential byte stream with skipping (file, decompressor).
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to n bytes; returns 0 only at the end of the stream.
  virtual Result<size_t> read(void* dst, size_t n) = 0;
  // Skips n bytes (seeks where it can). Skipping past the end is not an error here; the
  // next read returns 0.
  virtual Status skip(uint64_t n) = 0;
  virtual uint64_t position() const = 0;
};

// A stream over a RandomAccessFile with a read-ahead window: reads of headers inside the
// window cost no system call; a skip beyond it seeks, and the read after such a seek fetches
// only 4 KiB, so a large payload is never read (small members ride along in the window).
std::unique_ptr<ByteStream> file_stream(std::shared_ptr<RandomAccessFile> file,
                                        size_t window_bytes = 64 << 10);
// A stream over bytes in memory (tests, fuzzing).
std::unique_ptr<ByteStream> memory_stream(std::string bytes);

}  // namespace shardyard::io
