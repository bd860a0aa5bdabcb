// File systems for tests (io/fs/interface.h): one in memory, and one that wraps another to
// inject faults (leveldb's fault-injection Env; Arrow's mock and slow file systems).
//
// MemoryFileSystem holds files and directories in a map: a checkpoint written through it
// never touches the disk, so a test proves that a path goes through the FileSystem it was
// given. FaultFileSystem forwards to a real file system and, as told, holds renames onto a
// given file name for a while (so a test can kill the process inside a save) or fails the
// next calls of one operation.
//
// Thread-safe: both may be used from every thread of a job.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/fs/file_system.h"

namespace shardyard::testing {

class MemoryFileSystem : public FileSystem {
 public:
  Result<FileInfo> stat(const std::string& uri) override;
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override;
  Result<std::vector<std::string>> list(const std::string& dir_uri) override;
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove(const std::string& uri) override;
  Status create_dir(const std::string& uri) override;
  Status sync_dir(const std::string& uri) override;

  // The bytes of a file as last closed (synced or not), or nullopt.
  std::optional<std::string> contents(const std::string& uri) const;
  size_t files() const;

 private:
  friend class MemoryWritableFile;
  void store(const std::string& uri, std::string bytes);
  std::string parent_of(const std::string& uri) const;

  mutable std::mutex mu_;
  std::map<std::string, std::string> files_;  // guarded by mu_
  std::set<std::string> dirs_{"/"};           // guarded by mu_
};

enum class FsOp { kOpen, kWrite, kSync, kRename, kRemove, kCreateDir, kSyncDir };

class FaultFileSystem : public FileSystemWrapper {
 public:
  explicit FaultFileSystem(FileSystem* target) : FileSystemWrapper(target) {}

  // Every rename onto a file whose base name is `name` waits `ms` first.
  void hold_renames_onto(std::string name, int ms);
  // The next `count` calls of `op` fail with an io_error naming the uri ("injected fault").
  void fail_next(FsOp op, int count = 1);
  // Calls of `op` so far.
  int calls(FsOp op) const { return calls_[static_cast<int>(op)]; }

  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override;
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove(const std::string& uri) override;
  Status create_dir(const std::string& uri) override;
  Status sync_dir(const std::string& uri) override;

 private:
  friend class FaultWritableFile;
  // Counts a call of `op` on `uri`; an error when a fault is due.
  Status enter(FsOp op, const std::string& uri);

  std::mutex mu_;
  std::string hold_name_;  // guarded by mu_
  int hold_ms_ = 0;        // guarded by mu_
  std::atomic<int> failures_[7] = {};
  std::atomic<int> calls_[7] = {};
};

}  // namespace shardyard::testing
