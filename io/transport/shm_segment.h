// Shared-memory segments: unnamed files in a memory file system, mapped by several
// processes of one node (docs/shared-memory.md, "Segments").
//
// A segment is created with open(dir, O_TMPFILE) in the shared-memory folder (dir =
// SegmentOptions::dir, else $SHARDYARD_SHM_DIR, else /dev/shm), or with memfd_create()
// where the folder refuses O_TMPFILE. It never has a name, so a process that crashes leaves
// nothing behind: the memory goes back when the last descriptor and mapping are gone. Its
// whole size is reserved at creation (posix_fallocate), so a folder that is too small is an
// error that says how much is free, how much is needed and what to do, never a SIGBUS on a
// later write. Another process gets a segment as a descriptor (an SCM_RIGHTS frame,
// io/transport/unix_socket.h) and adopts it; read_only_fd() hands out a descriptor that can
// only be mapped read-only.
//
// ShmSegment is single-owner (move it); ShmMapping is immutable once made and may be shared
// by any threads (hold it by shared_ptr: views into it stay valid while it lives).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/transport/unique_fd.h"
#include "runtime/status.h"

namespace shardyard::io {

struct SegmentOptions {
  // Folder of the segment; empty: $SHARDYARD_SHM_DIR when set, else /dev/shm.
  std::string dir;
  // The option that sizes the segment, named in the message when the folder is too small
  // ("LoaderOptions::shm_arena_bytes"); empty: "a smaller segment".
  std::string size_option;
  // Names the segment in messages ("shared arena of channel r0/e1/w2").
  std::string what = "shared-memory segment";
};

// $SHARDYARD_SHM_DIR when set and not empty, else /dev/shm.
std::string default_shm_dir();

class ShmMapping {
 public:
  ~ShmMapping();
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  const uint8_t* data() const { return data_; }
  uint8_t* writable_data() const { return writable_ ? data_ : nullptr; }  // null: read-only
  size_t size() const { return size_; }

 private:
  friend class ShmSegment;
  ShmMapping(uint8_t* data, size_t size, bool writable)
      : data_(data), size_(size), writable_(writable) {}
  uint8_t* data_;
  size_t size_;
  bool writable_;
};

class ShmSegment {
 public:
  enum class Access { kReadOnly, kReadWrite };

  // A new segment of `bytes` bytes, reserved in full, zero-filled.
  static Result<ShmSegment> create(uint64_t bytes, const SegmentOptions& options);
  // A segment received from another process; its size is the file's size.
  static Result<ShmSegment> adopt(UniqueFd fd, std::string what);

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  const std::string& what() const { return what_; }
  // "O_TMPFILE in /dev/shm" or "memfd".
  const std::string& backing() const { return backing_; }

  // A second descriptor of the segment to send to another process (close-on-exec).
  Result<UniqueFd> duplicate() const;
  // A descriptor opened read-only: the process that gets it can map the segment read-only
  // only. (It guards against mistakes, not against a hostile process of the same user.)
  Result<UniqueFd> read_only_fd() const;
  // Maps [offset, offset + length) (length 0: to the end); offset is a multiple of the
  // page size. Mapping a read-only descriptor kReadWrite is an error. Pages are mapped at
  // their first touch.
  Result<std::shared_ptr<ShmMapping>> map(Access access, uint64_t offset = 0,
                                          uint64_t length = 0) const;

 private:
  ShmSegment(UniqueFd fd, uint64_t size, std::string what, std::string backing)
      : fd_(std::move(fd)), size_(size), what_(std::move(what)), backing_(std::move(backing)) {}
  UniqueFd fd_;
  uint64_t size_ = 0;
  std::string what_;
  std::string backing_;
};

// "12.0 MiB" (for messages).
std::string format_bytes(uint64_t bytes);

}  // namespace shardyard::io
