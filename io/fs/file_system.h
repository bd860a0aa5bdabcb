// The local file system, and the io helpers over any FileSystem (io/fs/interface.h).
//
// A FileSystem resolves a uri to metadata, a random-access reader, or a listing, and, for
// checkpoints, writes. The local file system is here; HTTP(S) and S3
// (io/remote/remote_file_system.h) implement the reading half with connection reuse, ranged
// reads, read-ahead and retries inside, and io::default_file_system() there routes each uri
// to the one its scheme names. Test doubles (in memory, slow, failing) live in
// tests/io/fs/test_file_systems.h.
//
// Thread-safety: the local file system and the functions are thread-safe; a ByteStream has
// one owner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/fs/interface.h"
#include "runtime/status.h"

namespace shardyard::io {

// The interface is public (io/fs/interface.h); io code names it io::FileSystem as before.
using shardyard::FileInfo;
using shardyard::FileSystem;
using shardyard::FileSystemWrapper;
using shardyard::MappedRange;
using shardyard::RandomAccessFile;
using shardyard::WritableFile;

// The process's local file system (a singleton).
FileSystem& local_file_system();

// Reads exactly n bytes at offset or fails with a message naming the file and offset.
Status read_exact(RandomAccessFile& f, uint64_t offset, void* dst, size_t n);

// Writes `path` atomically through `fs`: a temporary file beside it, sync, rename over
// `path`, and with `sync_dir` a sync of the directory so the rename itself is durable.
// Readers see the old bytes or the new, never a part; a crash leaves at most a temporary
// (named `path`.tmp.PID.N), which a failed write removes.
Status write_file_atomic(FileSystem& fs, const std::string& path, std::string_view bytes,
                         bool sync_dir);
// The same on the local file system.
Status write_file_atomic(const std::string& path, std::string_view bytes, bool sync_dir);
// The whole file; kNotFound when it does not exist.
Result<std::string> read_file(FileSystem& fs, const std::string& uri);

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
