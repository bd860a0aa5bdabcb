#include "io/transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardyard::io {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

uint64_t page_size() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

// What the folder's file system has free for us, and its whole size; false when unknown.
bool folder_space(const std::string& dir, uint64_t* free_bytes, uint64_t* total_bytes) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return false;
  *free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  *total_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  return true;
}

// The message for a folder that cannot hold `bytes` more: what is free, what is needed
// and the ways out.
Status no_room(const SegmentOptions& o, const std::string& dir, uint64_t bytes) {
  uint64_t free_bytes = 0, total = 0;
  std::string have = "too little free space";
  std::string size = "a larger size";
  if (folder_space(dir, &free_bytes, &total)) {
    have = format_bytes(free_bytes) + " free of " + format_bytes(total);
    // Enough for what is used now plus this segment, rounded up to 64 MiB.
    const uint64_t want = total - free_bytes + bytes, step = 64ull << 20;
    size = std::to_string((want + step - 1) / step * 64) + "m";
  }
  const std::string lower = o.size_option.empty() ? "a smaller segment" : o.size_option;
  return io_error(o.what + ": the shared-memory folder " + dir + " has " + have + ", and " +
                  format_bytes(bytes) + " are needed. Give it more room (docker run --shm-size=" +
                  size + ", or mount -o remount,size=" + size + " " + dir +
                  "), point SHARDYARD_SHM_DIR at a larger tmpfs, or lower " + lower);
}

// An unnamed file in `dir`, or a memfd where the folder's file system has no O_TMPFILE.
Result<UniqueFd> open_unnamed(const std::string& dir, const std::string& what,
                              std::string* backing) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) {
    *backing = "O_TMPFILE in " + dir;
    return UniqueFd(fd);
  }
  const int err = errno;
  // EOPNOTSUPP: the file system has no O_TMPFILE; EISDIR or EINVAL: the kernel has none.
  if (err != EOPNOTSUPP && err != EISDIR && err != EINVAL)
    return io_error(what + ": cannot create a file in the shared-memory folder " + dir + ": " +
                    errno_text(err) + " (set SHARDYARD_SHM_DIR to a writable tmpfs folder)");
  fd = ::memfd_create("shardyard", MFD_CLOEXEC);
  if (fd < 0)
    return io_error(what + ": " + dir +
                    " refuses O_TMPFILE and memfd_create failed: " + errno_text(errno));
  *backing = "memfd";
  return UniqueFd(fd);
}

}  // namespace

std::string default_shm_dir() {
  const char* d = std::getenv("SHARDYARD_SHM_DIR");
  return d && *d ? d : "/dev/shm";
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const char* unit[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%.1f %s", v, unit[u]);
  return buf;
}

ShmMapping::~ShmMapping() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

Result<ShmSegment> ShmSegment::create(uint64_t bytes, const SegmentOptions& options) {
  if (bytes == 0) return invalid_argument(options.what + ": a segment of 0 bytes");
  const std::string dir = options.dir.empty() ? default_shm_dir() : options.dir;
  std::string backing;
  SY_ASSIGN_OR_RETURN(UniqueFd fd, open_unnamed(dir, options.what, &backing));
  // Ask before reserving: a reservation that fails half way fills the folder for a moment,
  // which other processes using it would feel.
  uint64_t free_bytes = 0, total = 0;
  if (backing != "memfd" && folder_space(dir, &free_bytes, &total) && free_bytes < bytes)
    return no_room(options, dir, bytes);
  int err;
  do {
    err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  } while (err == EINTR);
  if (err == ENOSPC || err == EFBIG || err == ENOMEM) return no_room(options, dir, bytes);
  if (err != 0)
    return io_error(options.what + ": cannot reserve " + format_bytes(bytes) + " in " + dir + " (" +
                    backing + "): " + errno_text(err));
  return ShmSegment(std::move(fd), bytes, options.what, std::move(backing));
}

Result<ShmSegment> ShmSegment::adopt(UniqueFd fd, std::string what) {
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0)
    return invalid_argument(what + ": not an open descriptor");
  if (!S_ISREG(st.st_mode))
    return invalid_argument(what + ": descriptor " + std::to_string(fd.get()) +
                            " is not a shared-memory file");
  if (st.st_size <= 0) return corrupt(what + ": the segment received is empty");
  return ShmSegment(std::move(fd), static_cast<uint64_t>(st.st_size), std::move(what), "received");
}

Result<UniqueFd> ShmSegment::duplicate() const {
  UniqueFd copy = duplicate_cloexec(fd_.get());
  if (!copy.valid())
    return io_error(what_ + ": cannot duplicate its descriptor: " + errno_text(errno));
  return copy;
}

Result<UniqueFd> ShmSegment::read_only_fd() const {
  // The magic link reopens the very file, unnamed or not, with new access rights.
  const std::string path = "/proc/self/fd/" + std::to_string(fd_.get());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return io_error(what_ + ": cannot reopen it read-only through " + path + ": " +
                    errno_text(errno) + " (is /proc mounted?)");
  return UniqueFd(fd);
}

Result<std::shared_ptr<ShmMapping>> ShmSegment::map(Access access, uint64_t offset,
                                                    uint64_t length) const {
  if (offset % page_size() != 0 || offset >= size_ || length > size_ - offset)
    return invalid_argument(what_ + ": cannot map bytes " + std::to_string(offset) + " + " +
                            std::to_string(length) + " of a segment of " + std::to_string(size_));
  if (length == 0) length = size_ - offset;
  const bool rw = access == Access::kReadWrite;
  void* p = ::mmap(nullptr, length, rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd_.get(),
                   static_cast<off_t>(offset));
  if (p == MAP_FAILED)
    return io_error(what_ + ": cannot map " + format_bytes(length) +
                    (rw ? " read-write: " : " read-only: ") + errno_text(errno));
  return std::shared_ptr<ShmMapping>(new ShmMapping(static_cast<uint8_t*>(p), length, rw));
}

}  // namespace shardyard::io
