#include "io/fs/file_system.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/fs/mapping_guard.h"
#include "io/fs/uri.h"

namespace shardyard::io {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

int64_t ctime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}

// A source is a regular file or a directory; anything else (a FIFO, a device, a socket)
// would block or never end: refused with what it is.
Status check_file_type(const std::string& uri, mode_t mode) {
  if (S_ISREG(mode) || S_ISDIR(mode)) return Status::ok();
  const char* what = S_ISFIFO(mode)   ? "a FIFO (named pipe)"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "not a regular file";
  return invalid_argument(uri + ": is " + std::string(what) +
                          ", not a regular file or a directory; give the path of a shard");
}

// A mapping guarded against the file being cut short (mapping_guard.h): it owns a copy of
// the file's name, which the SIGBUS handler reports.
class LocalMapping : public MappedRange {
 public:
  LocalMapping(void* base, size_t length, size_t skip, size_t n, std::string uri)
      : base_(base),
        length_(length),
        data_(static_cast<const uint8_t*>(base) + skip),
        n_(n),
        uri_(std::move(uri)),
        slot_(guard_mapping(base, length, &uri_)) {}
  ~LocalMapping() override {
    unguard_mapping(slot_);
    ::munmap(base_, length_);
  }
  bool guarded() const { return slot_ >= 0; }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return n_; }

 private:
  void* base_;
  size_t length_;
  const uint8_t* data_;
  size_t n_;
  const std::string uri_;
  const int slot_;
};

class LocalFile : public RandomAccessFile {
 public:
  LocalFile(int fd, uint64_t size, int64_t mtime_ns, std::string uri)
      : fd_(fd), size_(size), mtime_ns_(mtime_ns), uri_(std::move(uri)) {}
  ~LocalFile() override { ::close(fd_); }
  Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
    size_t done = 0;
    auto* out = static_cast<char*>(dst);
    // First from the page cache alone (RWF_NOWAIT): whether it held the whole range decides
    // whether will_need() is worth its cost for this file. The rest, if any, is read below.
    if (n > 0 && nowait_.load(std::memory_order_relaxed)) {
      iovec iov{out, n};
      const ssize_t got = ::preadv2(fd_, &iov, 1, static_cast<off_t>(offset), RWF_NOWAIT);
      if (got > 0) done = static_cast<size_t>(got);
      if (got < 0 && (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS))
        nowait_.store(false, std::memory_order_relaxed);  // this file system cannot say
      cached_.store(got >= 0 && static_cast<size_t>(got) == n, std::memory_order_relaxed);
    }
    while (done < n) {
      ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        return io_error(uri_ + ": read failed at byte " + std::to_string(offset + done) + ": " +
                        errno_text(errno));
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
  uint64_t size() const override { return size_; }
  const std::string& uri() const override { return uri_; }
  int64_t version() const override { return mtime_ns_; }
  // Asks the kernel to read the range ahead, unless the last read found its whole range in
  // the page cache: then the next range most likely is there too, and the hint would only
  // look up every page of it again (5% of the CPU of a run over cached small samples,
  // docs/performance.md). A read that finds the cache cold turns the hints back on.
  void will_need(uint64_t offset, size_t n) override {
    if (!wants_hints()) return;
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
  }
  bool wants_hints() const override { return !cached_.load(std::memory_order_relaxed); }

  Result<std::shared_ptr<const MappedRange>> map(uint64_t offset, size_t n) override {
    // A range past the end of the file as it is now: it shrank since it was opened. (The
    // file can still shrink after this check: the mapping is guarded for that.)
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return io_error(uri_ + ": stat failed: " + errno_text(errno));
    if (offset + n > static_cast<uint64_t>(st.st_size))
      return corrupt(uri_ + ": changed during the run: it is now " + std::to_string(st.st_size) +
                     " bytes, was " + std::to_string(size_) + " when opened (wanted " +
                     std::to_string(n) + " bytes at byte " + std::to_string(offset) + ")");
    const uint64_t start = offset & ~static_cast<uint64_t>(4095);
    const size_t skip = static_cast<size_t>(offset - start), length = skip + n;
    void* base = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd_, static_cast<off_t>(start));
    if (base == MAP_FAILED) return std::shared_ptr<const MappedRange>();  // read instead
    auto mapping = std::make_shared<LocalMapping>(base, length, skip, n, uri_);
    if (!mapping->guarded()) return std::shared_ptr<const MappedRange>();  // read instead
    return std::shared_ptr<const MappedRange>(std::move(mapping));
  }

 private:
  int fd_;
  uint64_t size_;
  int64_t mtime_ns_;
  std::string uri_;
  std::atomic<bool> nowait_{true};   // RWF_NOWAIT reads work on this file
  std::atomic<bool> cached_{false};  // the last read found its whole range in the page cache
};

class LocalWritableFile : public WritableFile {
 public:
  LocalWritableFile(int fd, std::string uri) : fd_(fd), uri_(std::move(uri)) {}
  ~LocalWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status append(std::string_view bytes) override {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return io_error("cannot write " + uri_ + ": " + errno_text(n < 0 ? errno : ENOSPC));
      done += static_cast<size_t>(n);
    }
    return Status::ok();
  }
  Status sync() override {
    if (::fsync(fd_) != 0) return io_error("cannot flush " + uri_ + ": " + errno_text(errno));
    return Status::ok();
  }
  Status close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0)
      return io_error("cannot flush " + uri_ + ": " + errno_text(errno));
    return Status::ok();
  }

 private:
  int fd_;
  std::string uri_;
};

class LocalFileSystem : public FileSystem {
 public:
  Result<FileInfo> stat(const std::string& uri) override {
    struct stat st {};
    if (::stat(uri.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return not_found(uri + ": no such file");
      return io_error(uri + ": stat failed: " + errno_text(errno));
    }
    SY_RETURN_IF_ERROR(check_file_type(uri, st.st_mode));
    FileInfo info;
    info.uri = uri;
    info.is_directory = S_ISDIR(st.st_mode);
    info.size = static_cast<uint64_t>(st.st_size);
    info.mtime_ns = mtime_ns_of(st);
    info.ctime_ns = ctime_ns_of(st);
    info.inode = static_cast<uint64_t>(st.st_ino);
    return info;
  }

  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    // O_NONBLOCK: opening a FIFO without a writer would wait forever; the type check after
    // the open refuses it (and a file swapped for one after a stat).
    int fd = ::open(uri.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) return not_found(uri + ": no such file");
      return io_error(uri + ": cannot open: " + errno_text(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return io_error(uri + ": stat failed: " + errno_text(err));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return invalid_argument(uri + ": is a directory, not a file");
    }
    if (Status type = check_file_type(uri, st.st_mode); !type.is_ok()) {
      ::close(fd);
      return type;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<RandomAccessFile>(
        new LocalFile(fd, static_cast<uint64_t>(st.st_size), mtime_ns_of(st), uri));
  }

  Result<std::vector<std::string>> list(const std::string& dir_uri) override {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<std::string> out;
    fs::recursive_directory_iterator it(dir_uri, ec), end;
    if (ec) return io_error(dir_uri + ": cannot list: " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) return io_error(dir_uri + ": cannot list: " + ec.message());
      if (it->is_regular_file(ec)) out.push_back(fs::relative(it->path(), dir_uri, ec).string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri) override {
    int fd = ::open(uri.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("cannot write " + uri + ": " + errno_text(errno));
    return std::unique_ptr<WritableFile>(new LocalWritableFile(fd, uri));
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return io_error("cannot rename " + from + " to " + to + ": " + errno_text(errno));
    return Status::ok();
  }

  Status remove(const std::string& uri) override {
    if (::unlink(uri.c_str()) != 0) {
      if (errno == ENOENT) return not_found(uri + ": no such file");
      return io_error("cannot remove " + uri + ": " + errno_text(errno));
    }
    return Status::ok();
  }

  Status create_dir(const std::string& uri) override {
    if (::mkdir(uri.c_str(), 0755) != 0 && errno != EEXIST)
      return io_error("cannot create directory " + uri + ": " + errno_text(errno));
    return Status::ok();
  }

  Status sync_dir(const std::string& uri) override {
    int dfd = ::open(uri.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return io_error("cannot open directory " + uri + ": " + errno_text(errno));
    int rc = ::fsync(dfd), err = errno;
    ::close(dfd);
    if (rc != 0) return io_error("cannot flush directory " + uri + ": " + errno_text(err));
    return Status::ok();
  }
};

class FileStream : public ByteStream {
 public:
  FileStream(std::shared_ptr<RandomAccessFile> file, size_t window)
      : file_(std::move(file)), window_(std::max<size_t>(window, 512)) {}

  Result<size_t> read(void* dst, size_t n) override {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      if (buf_pos_ < buf_.size()) {
        size_t take = std::min(n - done, buf_.size() - buf_pos_);
        std::memcpy(out + done, buf_.data() + buf_pos_, take);
        buf_pos_ += take;
        pos_ += take;
        done += take;
        continue;
      }
      if (n - done >= window_) {  // large read: straight into the caller's memory
        SY_ASSIGN_OR_RETURN(size_t got, file_->read_at(pos_, out + done, n - done));
        pos_ += got;
        done += got;
        break;
      }
      // Right after a seek (past a large payload) read only a small block: the next header
      // and the small members that usually follow it, not the next large payload.
      const size_t want = after_seek_ ? std::min<size_t>(window_, kAfterSeekBytes) : window_;
      after_seek_ = false;
      buf_.resize(want);
      SY_ASSIGN_OR_RETURN(size_t got, file_->read_at(pos_, buf_.data(), want));
      buf_.resize(got);
      buf_pos_ = 0;
      if (got == 0) break;
    }
    return done;
  }

  Status skip(uint64_t n) override {
    uint64_t in_buf = buf_.size() - buf_pos_;
    if (n <= in_buf) {
      buf_pos_ += n;
    } else {
      // Skipping more than a window past the buffer is a large payload: the next refill is
      // small. A shorter skip is a small member: keep reading whole windows.
      after_seek_ = n - in_buf >= window_;
      buf_.clear();
      buf_pos_ = 0;
    }
    pos_ += n;
    return Status::ok();
  }

  uint64_t position() const override { return pos_; }

 private:
  std::shared_ptr<RandomAccessFile> file_;
  static constexpr size_t kAfterSeekBytes = 4096;
  size_t window_;
  bool after_seek_ = false;
  std::string buf_;
  size_t buf_pos_ = 0;
  uint64_t pos_ = 0;
};

class MemoryStream : public ByteStream {
 public:
  explicit MemoryStream(std::string bytes) : bytes_(std::move(bytes)) {}
  Result<size_t> read(void* dst, size_t n) override {
    size_t take = pos_ >= bytes_.size() ? 0 : std::min<uint64_t>(n, bytes_.size() - pos_);
    if (take > 0) std::memcpy(dst, bytes_.data() + pos_, take);
    pos_ += take;
    return take;
  }
  Status skip(uint64_t n) override {
    pos_ += n;
    return Status::ok();
  }
  uint64_t position() const override { return pos_; }

 private:
  std::string bytes_;
  uint64_t pos_ = 0;
};

}  // namespace

FileSystem& local_file_system() {
  static LocalFileSystem fs;
  return fs;
}

Status write_file_atomic(FileSystem& fs, const std::string& path, std::string_view bytes,
                         bool sync_dir) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  SY_ASSIGN_OR_RETURN(auto file, fs.new_writable_file(tmp));
  Status st = file->append(bytes);
  if (st.is_ok()) st = file->sync();
  if (st.is_ok()) st = file->close();
  file.reset();
  if (st.is_ok()) st = fs.rename(tmp, path);
  if (!st.is_ok()) {
    (void)fs.remove(tmp);  // best effort: a temporary left behind goes with the next commit
    return st;
  }
  if (!sync_dir) return Status::ok();
  auto slash = path.rfind('/');
  return fs.sync_dir(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

Status write_file_atomic(const std::string& path, std::string_view bytes, bool sync_dir) {
  return write_file_atomic(local_file_system(), path, bytes, sync_dir);
}

Result<std::string> read_file(FileSystem& fs, const std::string& uri) {
  SY_ASSIGN_OR_RETURN(auto file, fs.open(uri));
  std::string bytes(static_cast<size_t>(file->size()), '\0');
  SY_RETURN_IF_ERROR(read_exact(*file, 0, bytes.data(), bytes.size()));
  return bytes;
}

Status read_exact(RandomAccessFile& f, uint64_t offset, void* dst, size_t n) {
  SY_ASSIGN_OR_RETURN(size_t got, f.read_at(offset, dst, n));
  if (got != n)
    return corrupt(f.uri() + ": truncated: wanted " + std::to_string(n) + " bytes at byte " +
                   std::to_string(offset) + ", file ends at byte " + std::to_string(offset + got));
  return Status::ok();
}

std::unique_ptr<ByteStream> file_stream(std::shared_ptr<RandomAccessFile> file, size_t window) {
  return std::make_unique<FileStream>(std::move(file), window);
}

std::unique_ptr<ByteStream> memory_stream(std::string bytes) {
  return std::make_unique<MemoryStream>(std::move(bytes));
}

}  // namespace shardyard::io

namespace shardyard {

// The writing half of a file system that only reads (HTTP, S3, a user's store): every call
// names the uri and where checkpoints can go instead.
namespace {
Status read_only(const char* what, const std::string& uri) {
  return invalid_argument("cannot " + std::string(what) + " " + io::redact_url(uri) +
                          ": this file system only reads; write checkpoints to a local or "
                          "mounted directory");
}
}  // namespace

Result<std::unique_ptr<WritableFile>> FileSystem::new_writable_file(const std::string& uri) {
  return read_only("write", uri);
}
Status FileSystem::rename(const std::string& from, const std::string&) {
  return read_only("rename", from);
}
Status FileSystem::remove(const std::string& uri) { return read_only("remove", uri); }
Status FileSystem::create_dir(const std::string& uri) {
  return read_only("create the directory", uri);
}
Status FileSystem::sync_dir(const std::string& uri) { return read_only("flush", uri); }

}  // namespace shardyard
