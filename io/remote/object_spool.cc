#include "io/remote/object_spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace shardyard::io {

namespace {

// An anonymous file in `dir`: O_TMPFILE where the file system has it, else a named one
// unlinked at once. Either way it is gone when the descriptor is closed.
Result<int> temporary_file(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string path = dir + "/shardyard-spool-XXXXXX";
  fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0)
    return io_error("cannot make a temporary file in " + dir +
                    " (SHARDYARD_HTTP_SPOOL_DIR): " + std::strerror(errno));
  ::unlink(path.c_str());
  return fd;
}

Status write_all(int fd, const char* data, size_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error(std::strerror(w < 0 ? errno : ENOSPC));
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::ok();
}

}  // namespace

Result<SpoolOptions> SpoolOptions::from_env() {
  SpoolOptions o;
  uint32_t keep = static_cast<uint32_t>(o.keep_bytes);
  SY_RETURN_IF_ERROR(env_u32("SHARDYARD_HTTP_SPOOL_BYTES", &keep));
  o.keep_bytes = keep;
  for (const char* name : {"SHARDYARD_HTTP_SPOOL_DIR", "TMPDIR"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') {
      o.dir = v;
      break;
    }
  }
  if (o.dir.empty()) o.dir = "/tmp";
  return o;
}

ObjectSpool::ObjectSpool(std::string uri, uint64_t size, int fd, const HttpOptions& http)
    : uri_(std::move(uri)),
      size_(size),
      fd_(fd),
      deadline_s_(http.deadline_s),
      progress_bytes_(uint64_t{http.low_speed_bytes_per_s} * http.low_speed_time_s) {}

Result<std::shared_ptr<ObjectSpool>> ObjectSpool::start(std::string uri, uint64_t size,
                                                        Download download, const HttpOptions& http,
                                                        const std::string& dir) {
  SY_ASSIGN_OR_RETURN(int fd, temporary_file(dir));
  std::shared_ptr<ObjectSpool> spool(new ObjectSpool(std::move(uri), size, fd, http));
  ObjectSpool* self = spool.get();
  spool->thread_ = std::thread([self, download = std::move(download)] { self->run(download); });
  return spool;
}

ObjectSpool::~ObjectSpool() {
  stop_ = true;  // the transfer ends within a second (HttpClient::get_stream)
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

void ObjectSpool::run(const Download& download) {
  Status write_error;
  uint64_t at = 0;  // only this thread writes; readers see done_
  Status st = download(stop_, [&](const char* data, size_t n) {
    if (stop_) return false;
    write_error = write_all(fd_, data, n, at);
    if (!write_error.is_ok()) return false;
    at += n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = at;
    }
    moved_.notify_all();
    return true;
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    if (!write_error.is_ok()) {
      error_ = io_error("cannot keep " + uri_ +
                        " in a temporary file (its server ignores Range, "
                        "so it is read once, whole): " +
                        write_error.message());
    } else if (!st.is_ok()) {
      error_ = st;
    }
  }
  moved_.notify_all();
}

Result<size_t> ObjectSpool::read_at(uint64_t offset, void* dst, size_t n) {
  if (offset >= size_ || n == 0) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  const uint64_t need = offset + n;
  {
    using clock = std::chrono::steady_clock;
    std::unique_lock<std::mutex> lock(mu_);
    auto since = clock::now();
    uint64_t mark = done_;
    while (done_ < need && !finished_) {
      moved_.wait_for(lock, std::chrono::milliseconds(100));
      if (done_ >= mark + progress_bytes_) {
        mark = done_;
        since = clock::now();
      } else if (clock::now() - since >= std::chrono::seconds(deadline_s_)) {
        return unavailable(uri_ +
                           ": its server ignores Range, so it is read once, whole, and "
                           "that download moved less than " +
                           std::to_string(progress_bytes_) + " bytes in " +
                           std::to_string(deadline_s_) + " s (SHARDYARD_HTTP_DEADLINE_S; " +
                           std::to_string(done_) + " of " + std::to_string(size_) +
                           " bytes arrived): the server is too slow "
                           "or stalls");
      }
    }
    if (done_ < need) {
      if (!error_.is_ok()) return error_;
      return corrupt(uri_ + ": the object ended at byte " + std::to_string(done_) + ", expected " +
                     std::to_string(size_) + " bytes (it changed since it was opened)");
    }
  }
  auto* out = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd_, out + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return io_error("cannot read back the temporary copy of " + uri_ + ": " +
                      std::strerror(r < 0 ? errno : EIO));
    got += static_cast<size_t>(r);
  }
  return n;
}

Result<std::shared_ptr<ObjectSpool>> SpoolCache::get(
    const std::string& key,
    const std::function<Result<std::shared_ptr<ObjectSpool>>(const std::string& dir)>& start) {
  // Declared before the lock: a dropped spool stops its download after the lock is gone.
  std::vector<std::shared_ptr<ObjectSpool>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<ObjectSpool> spool;
  if (auto it = live_.find(key); it != live_.end()) spool = it->second.lock();
  if (!spool) {
    SY_ASSIGN_OR_RETURN(spool, start(o_.dir));
    live_[key] = spool;
  }
  // Most recently used last; the oldest kept spools go first (a file still reading from
  // one keeps it alive).
  auto same = [&](const auto& e) { return e.first == key; };
  if (auto it = std::find_if(kept_.begin(), kept_.end(), same); it != kept_.end()) {
    kept_bytes_ -= it->second->size();
    kept_.erase(it);
  }
  kept_.emplace_back(key, spool);
  kept_bytes_ += spool->size();
  while (!kept_.empty() && kept_bytes_ > o_.keep_bytes) {
    kept_bytes_ -= kept_.front().second->size();
    dropped.push_back(std::move(kept_.front().second));
    kept_.pop_front();
  }
  for (auto it = live_.begin(); it != live_.end();)  // forget spools nobody holds
    it = it->second.expired() ? live_.erase(it) : std::next(it);
  return spool;
}

std::shared_ptr<ObjectSpool> SpoolCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(key);
  return it == live_.end() ? nullptr : it->second.lock();
}

void SpoolCache::mark_server(const std::string& server) {
  std::lock_guard<std::mutex> lock(mu_);
  servers_.insert(server);
}

bool SpoolCache::server_ignores_range(const std::string& server) {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_.count(server) > 0;
}

}  // namespace shardyard::io
