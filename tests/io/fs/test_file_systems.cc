#include "test_file_systems.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace shardyard::testing {

namespace {

std::string base_name(const std::string& uri) {
  auto slash = uri.rfind('/');
  return slash == std::string::npos ? uri : uri.substr(slash + 1);
}

// A file of the memory file system as it was opened.
class MemoryFile : public RandomAccessFile {
 public:
  MemoryFile(std::string uri, std::string bytes) : uri_(std::move(uri)), bytes_(std::move(bytes)) {}
  Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
    if (offset >= bytes_.size()) return size_t{0};
    const size_t take = std::min<uint64_t>(n, bytes_.size() - offset);
    std::memcpy(dst, bytes_.data() + offset, take);
    return take;
  }
  uint64_t size() const override { return bytes_.size(); }
  const std::string& uri() const override { return uri_; }

 private:
  std::string uri_, bytes_;
};

}  // namespace

class MemoryWritableFile : public WritableFile {
 public:
  MemoryWritableFile(MemoryFileSystem* fs, std::string uri) : fs_(fs), uri_(std::move(uri)) {}
  ~MemoryWritableFile() override { (void)close(); }
  Status append(std::string_view bytes) override {
    if (closed_) return io_error("cannot write " + uri_ + ": closed");
    bytes_.append(bytes);
    return Status::ok();
  }
  Status sync() override { return Status::ok(); }
  Status close() override {
    if (!closed_) fs_->store(uri_, std::move(bytes_));
    closed_ = true;
    return Status::ok();
  }

 private:
  MemoryFileSystem* fs_;
  std::string uri_, bytes_;
  bool closed_ = false;
};

std::string MemoryFileSystem::parent_of(const std::string& uri) const {
  auto slash = uri.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : uri.substr(0, slash);
}

void MemoryFileSystem::store(const std::string& uri, std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[uri] = std::move(bytes);
}

Result<FileInfo> MemoryFileSystem::stat(const std::string& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  FileInfo info;
  info.uri = uri;
  if (dirs_.count(uri)) {
    info.is_directory = true;
    return info;
  }
  auto it = files_.find(uri);
  if (it == files_.end()) return not_found(uri + ": no such file");
  info.size = it->second.size();
  return info;
}

Result<std::unique_ptr<RandomAccessFile>> MemoryFileSystem::open(const std::string& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(uri);
  if (it == files_.end()) return not_found(uri + ": no such file");
  return std::unique_ptr<RandomAccessFile>(new MemoryFile(uri, it->second));
}

Result<std::vector<std::string>> MemoryFileSystem::list(const std::string& dir_uri) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirs_.count(dir_uri)) return not_found(dir_uri + ": no such directory");
  const std::string prefix = dir_uri.back() == '/' ? dir_uri : dir_uri + "/";
  std::vector<std::string> out;
  for (const auto& [uri, bytes] : files_)
    if (uri.compare(0, prefix.size(), prefix) == 0) out.push_back(uri.substr(prefix.size()));
  return out;  // sorted: the map is
}

Result<std::unique_ptr<WritableFile>> MemoryFileSystem::new_writable_file(const std::string& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirs_.count(parent_of(uri))) return io_error("cannot write " + uri + ": no such directory");
  files_[uri].clear();
  return std::unique_ptr<WritableFile>(new MemoryWritableFile(this, uri));
}

Status MemoryFileSystem::rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return io_error("cannot rename " + from + ": no such file");
  if (!dirs_.count(parent_of(to))) return io_error("cannot rename to " + to + ": no directory");
  std::string bytes = std::move(it->second);
  files_.erase(it);
  files_[to] = std::move(bytes);
  return Status::ok();
}

Status MemoryFileSystem::remove(const std::string& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.erase(uri) == 0) return not_found(uri + ": no such file");
  return Status::ok();
}

Status MemoryFileSystem::create_dir(const std::string& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirs_.count(parent_of(uri)))
    return io_error("cannot create directory " + uri + ": no parent directory");
  dirs_.insert(uri);
  return Status::ok();
}

Status MemoryFileSystem::sync_dir(const std::string& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirs_.count(uri)) return io_error("cannot flush directory " + uri + ": no such directory");
  return Status::ok();
}

std::optional<std::string> MemoryFileSystem::contents(const std::string& uri) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(uri);
  if (it == files_.end()) return std::nullopt;
  return it->second;
}

size_t MemoryFileSystem::files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

// ---- faults ------------------------------------------------------------------------------

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultFileSystem* fs, std::unique_ptr<WritableFile> f, std::string uri)
      : fs_(fs), f_(std::move(f)), uri_(std::move(uri)) {}
  Status append(std::string_view bytes) override {
    SY_RETURN_IF_ERROR(fs_->enter(FsOp::kWrite, uri_));
    return f_->append(bytes);
  }
  Status sync() override {
    SY_RETURN_IF_ERROR(fs_->enter(FsOp::kSync, uri_));
    return f_->sync();
  }
  Status close() override { return f_->close(); }

 private:
  FaultFileSystem* fs_;
  std::unique_ptr<WritableFile> f_;
  std::string uri_;
};

void FaultFileSystem::hold_renames_onto(std::string name, int ms) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_name_ = std::move(name);
  hold_ms_ = ms;
}

void FaultFileSystem::fail_next(FsOp op, int count) { failures_[static_cast<int>(op)] = count; }

Status FaultFileSystem::enter(FsOp op, const std::string& uri) {
  const int i = static_cast<int>(op);
  ++calls_[i];
  int left = failures_[i].load();
  while (left > 0 && !failures_[i].compare_exchange_weak(left, left - 1)) {
  }
  if (left > 0) return io_error(uri + ": injected fault");
  return Status::ok();
}

Result<std::unique_ptr<RandomAccessFile>> FaultFileSystem::open(const std::string& uri) {
  SY_RETURN_IF_ERROR(enter(FsOp::kOpen, uri));
  return target()->open(uri);
}

Result<std::unique_ptr<WritableFile>> FaultFileSystem::new_writable_file(const std::string& uri) {
  SY_ASSIGN_OR_RETURN(auto f, target()->new_writable_file(uri));
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, std::move(f), uri));
}

Status FaultFileSystem::rename(const std::string& from, const std::string& to) {
  int hold = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!hold_name_.empty() && base_name(to) == hold_name_) hold = hold_ms_;
  }
  if (hold > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold));
  SY_RETURN_IF_ERROR(enter(FsOp::kRename, from));
  return target()->rename(from, to);
}

Status FaultFileSystem::remove(const std::string& uri) {
  SY_RETURN_IF_ERROR(enter(FsOp::kRemove, uri));
  return target()->remove(uri);
}

Status FaultFileSystem::create_dir(const std::string& uri) {
  SY_RETURN_IF_ERROR(enter(FsOp::kCreateDir, uri));
  return target()->create_dir(uri);
}

Status FaultFileSystem::sync_dir(const std::string& uri) {
  SY_RETURN_IF_ERROR(enter(FsOp::kSyncDir, uri));
  return target()->sync_dir(uri);
}

}  // namespace shardyard::testing
