// What one request of the HTTP client is made of, shared by its two ways of making it:
// through libcurl (http_client.cc) and, for ranged GETs of http:// URLs, without it
// (http_direct.h). Internal to io/remote.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "io/remote/http_client.h"
#include "io/remote/http_util.h"

namespace shardyard::io::detail {

// Set by cancel_transfers(): every transfer ends, and none starts, for the rest of the process.
inline std::atomic<bool> g_cancelled{false};

// All attempts of one request and the waits between them end by this time.
class Deadline {
 public:
  using clock = std::chrono::steady_clock;
  explicit Deadline(uint32_t seconds)
      : seconds_(seconds), end_(clock::now() + std::chrono::seconds(seconds)) {}
  static Deadline none() { return Deadline(0, clock::time_point::max()); }
  long remaining_ms() const {
    if (end_ == clock::time_point::max()) return 0;  // 0: no limit, for curl
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - clock::now()).count();
    return std::max<long>(1, static_cast<long>(ms));
  }
  bool expired() const { return clock::now() >= end_; }
  uint32_t seconds() const { return seconds_; }

 private:
  Deadline(uint32_t s, clock::time_point end) : seconds_(s), end_(end) {}
  uint32_t seconds_;
  clock::time_point end_;
};

// One attempt: where the body goes and what the response said.
struct Transfer {
  // Sink: a fixed buffer (dst, cap) or a growing string (body, body_max).
  char* dst = nullptr;
  size_t cap = 0;
  std::string* body = nullptr;
  size_t body_max = 0;
  size_t got = 0;
  bool ranged = false;
  uint64_t range_at = 0;  // the first byte asked for
  uint64_t skip = 0;      // bytes still to drop (a 200 answer to a ranged request)
  bool checked = false;   // the first body byte has been seen
  bool full = false;      // we ended the transfer: the buffer is full
  bool bad_range = false;
  bool too_big = false;
  // A 200 to a range that is not the whole object ends the transfer (the caller reads such
  // an object another way) instead of skipping to the range.
  bool refuse_whole = false;
  bool range_ignored = false;
  const BodySink* sink = nullptr;           // streamed: the body goes here, not to dst
  const std::atomic<bool>* stop = nullptr;  // set by the stream's owner: abort
  bool sink_stopped = false;
  // Response.
  long status = 0;
  std::string error_body;
  ResponseFields fields;
  std::string transport_error;  // why a transfer made without libcurl failed
};

struct Call {
  const char* method;
  const std::string& url;
  const RequestSigner* signer;
  std::string range;  // header value, or empty
};

}  // namespace shardyard::io::detail
