// The FileSystem interface: where source bytes come from and where checkpoints go.
//
// A public extension point (installed as <shardyard/file_system.h>): a user serves sources
// from a store of their own, or a test injects faults, by implementing FileSystem or by
// deriving from FileSystemWrapper and overriding what differs (leveldb's EnvWrapper). The
// local file system (io/fs/file_system.h) implements every operation; the HTTP and S3 file
// systems (io/remote/) only read. The write operations are what a checkpoint needs (a new
// file, sync, rename over the old one, sync of the directory, removal of stale files); their
// defaults refuse with an error naming the uri, so a read-only file system implements none.
//
// Thread-safety: FileSystem implementations are thread-safe. A RandomAccessFile may be read
// from several threads at once (read_at has no cursor); a WritableFile has one owner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace shardyard {

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
  // caller then reads). Fails when the range is past the end of the file. Mapping reads
  // nothing ahead: will_need() does, where the caller is about to read the whole range.
  virtual Result<std::shared_ptr<const MappedRange>> map(uint64_t /*offset*/, size_t /*n*/) {
    return std::shared_ptr<const MappedRange>();
  }
  // A hint that [offset, offset + n) will be read soon: a remote file starts fetching it
  // in the background. Never required for correctness.
  virtual void will_need(uint64_t /*offset*/, size_t /*n*/) {}
  // Whether will_need() would do anything now: false lets a caller skip working out the
  // range (a local file whose last read found the page cache holding it ignores hints).
  virtual bool wants_hints() const { return true; }
  // How many bytes one will_need() had best name. A remote file fetches a hint with one
  // request, and a request costs more than its bytes: a caller that reads such a file in
  // order names its next pieces together, up to this many bytes. 0: name each piece alone
  // (a local file, which the kernel reads ahead).
  virtual size_t hint_bytes() const { return 0; }
  virtual uint64_t size() const = 0;
  virtual const std::string& uri() const = 0;
  // What identifies this version of the file for the manifest cache (FileInfo::mtime_ns):
  // the modification time of a local file, a stamp of Last-Modified and ETag for a remote
  // object, read when the file was opened.
  virtual int64_t version() const { return 0; }
};

// A file being written from its start. Dropping it without close() closes it and reports
// nothing; what was appended is durable only after sync().
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status append(std::string_view bytes) = 0;
  virtual Status sync() = 0;
  virtual Status close() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // kNotFound when the uri does not exist. The local file system refuses
  // (kInvalidArgument) what is neither a regular file nor a directory, such as a FIFO,
  // which would block a reader forever; open() refuses it too.
  virtual Result<FileInfo> stat(const std::string& uri) = 0;
  virtual Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) = 0;
  // Opens a file whose size and version (`known.size`, `known.mtime_ns`: a manifest's) the
  // caller knows already, which spares a remote file system its look-up: the HTTP and S3
  // ones send no HEAD, and every answer's size and ETag/Last-Modified are checked against
  // `known` instead, so an object that changed fails its first read (kCorrupt), as it
  // failed the open before. The file's size() and version() are then `known`'s. The default
  // is open(known.uri), which FileSystemWrapper keeps: what a wrapper's open() does applies.
  virtual Result<std::unique_ptr<RandomAccessFile>> open_known(const FileInfo& known) {
    return open(known.uri);
  }
  // Regular files below a directory, recursively, as sorted paths relative to it.
  virtual Result<std::vector<std::string>> list(const std::string& dir_uri) = 0;

  // Writing. Creates `uri`, or truncates it when it exists.
  virtual Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri);
  // Replaces `to` with `from` in one step (readers see the old file or the new one).
  virtual Status rename(const std::string& from, const std::string& to);
  virtual Status remove(const std::string& uri);
  // Creates one directory level; OK when the directory exists.
  virtual Status create_dir(const std::string& uri);
  // Makes the directory's entries durable, so that a rename into it survives a crash.
  virtual Status sync_dir(const std::string& uri);
};

// Forwards every call to another file system (which must outlive it): derive from it and
// override only what differs.
class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(FileSystem* target) : target_(target) {}
  FileSystem* target() const { return target_; }

  Result<FileInfo> stat(const std::string& uri) override { return target_->stat(uri); }
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    return target_->open(uri);
  }
  Result<std::vector<std::string>> list(const std::string& dir_uri) override {
    return target_->list(dir_uri);
  }
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri) override {
    return target_->new_writable_file(uri);
  }
  Status rename(const std::string& from, const std::string& to) override {
    return target_->rename(from, to);
  }
  Status remove(const std::string& uri) override { return target_->remove(uri); }
  Status create_dir(const std::string& uri) override { return target_->create_dir(uri); }
  Status sync_dir(const std::string& uri) override { return target_->sync_dir(uri); }

 private:
  FileSystem* target_;
};

}  // namespace shardyard
