// HttpClient: the libcurl transfers of the HTTP(S) and S3 file systems.
//
// Four calls: HEAD (size and version of an object), a ranged GET into the caller's memory,
// a ranged GET streamed to a callback (a whole object, in order), and a GET of a small
// body (S3 listings). Every call retries what is worth retrying (http_util.h: classify)
// with exponential backoff and jitter, and a ranged GET whose body breaks resumes at the
// byte where it broke, so nothing is lost or read twice. An attempt slower than
// `low_speed_bytes_per_s` for `low_speed_time_s` (a trickle or a stall) is aborted and
// retried, and every call but the streamed GET ends within `deadline_s`, all attempts and
// waits included: a server that sends 1 byte per second, or half a body and then nothing,
// cannot keep a read alive. Errors name the method, the URL without its query string and
// the HTTP status; request headers (credentials, signatures) are never put in a message.
//
// Connections are reused: each thread owns one curl easy handle (thread_local), which keeps
// its connections alive between requests. A ranged GET of an http:// URL into the caller's
// memory is made without libcurl, on a connection of the calling thread, its body received
// straight into that memory (http_direct.h); an answer it cannot take goes to libcurl.
// curl appears only in http_client.cc.
//
// Thread-safe: the client is immutable; calls may run on any number of threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/remote/http_util.h"
#include "runtime/status.h"

namespace shardyard::io {

// Documented in docs/remote-sources.md; every field has a SHARDYARD_HTTP_* variable.
struct HttpOptions {
  uint32_t connect_timeout_ms = 10000;    // SHARDYARD_HTTP_CONNECT_TIMEOUT_MS
  uint32_t low_speed_bytes_per_s = 1024;  // SHARDYARD_HTTP_LOW_SPEED_BYTES: speed floor
  uint32_t low_speed_time_s = 30;         // SHARDYARD_HTTP_TIMEOUT_S: over this window
  uint32_t deadline_s = 90;               // SHARDYARD_HTTP_DEADLINE_S: per request, all tries
  RetryPolicy retry;       // SHARDYARD_HTTP_RETRIES, SHARDYARD_HTTP_BACKOFF_MS, _BACKOFF_MAX_MS
  bool verify_tls = true;  // SHARDYARD_HTTP_INSECURE=1 turns certificate checks off

  // Defaults overridden by the environment; fails on a value that is not a number.
  static Result<HttpOptions> from_env();
};

// Adds per-attempt headers (signatures carry the time, so they are made afresh for every
// attempt). `range` is the Range header's value or empty.
class RequestSigner {
 public:
  virtual ~RequestSigner() = default;
  virtual std::vector<std::string> headers(const std::string& method, const Url& url,
                                           const std::string& range) const = 0;
};

struct ObjectInfo {
  uint64_t size = 0;
  int64_t last_modified_ns = 0;
  std::string etag;
};

// Ends every transfer in progress and refuses new ones (kCancelled), for the rest of the
// process: for a command stopping on a signal, so that no worker waits on a slow server.
void cancel_transfers();

// Receives a streamed body piece by piece, in order; false stops the transfer (kCancelled).
using BodySink = std::function<bool(const char* data, size_t n)>;

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options) : options_(std::move(options)) {}
  const HttpOptions& options() const { return options_; }

  // kNotFound for 404 (and 410), kIoError for other refusals, kUnavailable when the
  // retries ran out.
  Result<ObjectInfo> head(const std::string& url, const RequestSigner* signer) const;
  // Reads bytes [offset, offset + n) into dst; fewer only where the object ends. When
  // `expected_size` >= 0 the response must describe an object of that size (else kCorrupt:
  // the object changed since it was opened).
  // With `range_ignored`: a server that answers a range that is not the whole object with
  // the whole object (200) gets its transfer dropped at once, *range_ignored is set and
  // the bytes read so far are returned; without, the leading bytes are skipped.
  // With `version`: set to the version stamp (remote_version_stamp) of the answer's ETag
  // and Last-Modified, or left as it is where the server sent neither; answers that name
  // two versions (a read resumed across a change of the object) are kCorrupt.
  Result<size_t> get_range(const std::string& url, const RequestSigner* signer, uint64_t offset,
                           void* dst, size_t n, int64_t expected_size,
                           bool* range_ignored = nullptr, int64_t* version = nullptr) const;
  // Streams bytes [offset, offset + n) of an object of `expected_size` bytes to `sink`,
  // in order, each byte once: a broken transfer resumes where it broke (from a server that
  // ignores Range, by skipping what was passed on already). No deadline: the speed floor
  // ends a stalled attempt, and setting `stop` ends the transfer within about a second
  // (kCancelled), as does a sink that answers false.
  Status get_stream(const std::string& url, const RequestSigner* signer, uint64_t offset,
                    uint64_t n, int64_t expected_size, const std::atomic<bool>& stop,
                    const BodySink& sink) const;
  // A whole (small) body, at most max_bytes.
  Result<std::string> get_body(const std::string& url, const RequestSigner* signer,
                               size_t max_bytes = 64u << 20) const;

 private:
  HttpOptions options_;
};

// Retries of HTTP(S) and S3 requests in this process so far, by every HttpClient (a
// relaxed counter, for the monitor's shardyard_remote_read_retries_total).
uint64_t remote_read_retries();

}  // namespace shardyard::io
