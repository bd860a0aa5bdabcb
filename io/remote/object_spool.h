// ObjectSpool: a remote object read once, in order, for a server that ignores Range.
//
// A server that answers a ranged GET with the whole object (200) would move the object
// again for every read: gigabytes for one shard read in small ranges. The remote file
// system notices the first such answer (HttpClient::get_range) and reads that object
// through a spool instead: one GET from its first byte to its last, on a thread of its own,
// into a temporary file (unlinked at once, in SpoolOptions::dir); read_at() serves a range
// as soon as the download has passed it. A broken download resumes where it broke.
//
// A reader waits at most `deadline_s` for the download to move on; the wait starts again
// whenever the download moved at least low_speed_bytes_per_s x low_speed_time_s bytes, so a
// long download at a healthy speed is waited for and a trickle or a stall is not.
//
// SpoolCache keeps spools by object (URL, size, version), so that the manifest scan's
// download also serves the workers: a spool lives while a file reads from it, and the most
// recently used ones are kept after that up to SpoolOptions::keep_bytes of temporary files.
// An object larger than that may be downloaded again by a later reader.
//
// Thread-safe. The download stops when the spool is destroyed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io/remote/http_client.h"

namespace shardyard::io {

// Documented in docs/remote-sources.md.
struct SpoolOptions {
  uint64_t keep_bytes = uint64_t{1} << 30;  // SHARDYARD_HTTP_SPOOL_BYTES
  std::string dir;                          // SHARDYARD_HTTP_SPOOL_DIR, else $TMPDIR, else /tmp

  static Result<SpoolOptions> from_env();
};

class ObjectSpool {
 public:
  // Streams the object to the sink, from its first byte, until `stop` is set
  // (HttpClient::get_stream).
  using Download = std::function<Status(const std::atomic<bool>& stop, const BodySink& sink)>;
  static Result<std::shared_ptr<ObjectSpool>> start(std::string uri, uint64_t size,
                                                    Download download, const HttpOptions& http,
                                                    const std::string& dir);
  ~ObjectSpool();
  ObjectSpool(const ObjectSpool&) = delete;
  ObjectSpool& operator=(const ObjectSpool&) = delete;

  // Reads up to n bytes at `offset` (fewer only at the end of the object) once the download
  // has them.
  Result<size_t> read_at(uint64_t offset, void* dst, size_t n);
  uint64_t size() const { return size_; }

 private:
  ObjectSpool(std::string uri, uint64_t size, int fd, const HttpOptions& http);
  void run(const Download& download);

  const std::string uri_;
  const uint64_t size_;
  const int fd_;
  const uint32_t deadline_s_;
  const uint64_t progress_bytes_;  // moved within the deadline: the wait goes on
  std::mutex mu_;
  std::condition_variable moved_;
  uint64_t done_ = 0;      // guarded by mu_: bytes in the file
  bool finished_ = false;  // guarded by mu_
  Status error_;           // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class SpoolCache {
 public:
  explicit SpoolCache(SpoolOptions options) : o_(std::move(options)) {}
  // The spool of the object `key`, started with `start` when there is none.
  Result<std::shared_ptr<ObjectSpool>> get(
      const std::string& key,
      const std::function<Result<std::shared_ptr<ObjectSpool>>(const std::string& dir)>& start);
  // The spool of the object `key` when there is one (no download starts).
  std::shared_ptr<ObjectSpool> find(const std::string& key);
  // Servers (scheme://host:port) found to ignore Range: their other objects go to a spool
  // at their first read, without a ranged GET that would move the whole object first.
  void mark_server(const std::string& server);
  bool server_ignores_range(const std::string& server);

 private:
  const SpoolOptions o_;
  std::mutex mu_;
  std::set<std::string> servers_;                                          // guarded by mu_
  std::map<std::string, std::weak_ptr<ObjectSpool>> live_;                 // guarded by mu_
  std::deque<std::pair<std::string, std::shared_ptr<ObjectSpool>>> kept_;  // guarded; oldest first
  uint64_t kept_bytes_ = 0;                                                // guarded by mu_
};

}  // namespace shardyard::io
