// Pure helpers of the HTTP(S) and S3 clients: response headers, dates, retry policy (URLs
// are io/fs/uri.h, which this header includes).
//
// Nothing here does I/O or links curl, so every function is unit-tested and fuzzed alone
// (tests/io/remote/http_util_test.cc, tests/fuzz/http_fuzz.cc). Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/fs/uri.h"
#include "runtime/status.h"

namespace shardyard::io {

// "bytes 100-199/5000" -> {100, 199, 5000}; total is -1 for "*".
struct ContentRange {
  uint64_t first = 0, last = 0;
  int64_t total = -1;
};
std::optional<ContentRange> parse_content_range(const std::string& value);

// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", as HTTP and S3 send Last-Modified) or
// an ISO 8601 UTC time ("2009-10-12T17:50:30.000Z", as S3 listings send it), as
// nanoseconds since the epoch.
std::optional<int64_t> parse_http_time(const std::string& value);

// Splits a raw header line "Name: value\r\n" into lower-cased name and trimmed value;
// false for a status line or a blank line.
bool split_header_line(const std::string& line, std::string* name, std::string* value);

// What the clients keep of a response's header fields.
struct ResponseFields {
  std::optional<ContentRange> content_range;
  int64_t content_length = -1;  // -1: not sent, or not usable (bad_length)
  bool bad_length = false;      // a Content-Length that is not a number, or two that differ
  std::string etag;             // without quotes and without a weak "W/"
  int64_t last_modified_ns = 0;
  bool transfer_encoding = false;  // any Transfer-Encoding (the body is not Content-Length bytes)
  bool close = false;              // "Connection: close"
  bool keep_alive = false;         // "Connection: keep-alive" (an HTTP/1.0 server's promise)
};
// Notes one header field (name lower-cased, value trimmed: split_header_line's output).
void note_response_field(const std::string& name, const std::string& value, ResponseFields* f);

// The head of an HTTP/1.x response: the status line and the fields up to the blank line.
struct ResponseHead {
  int minor_version = 1;  // HTTP/1.<minor>
  long status = 0;
  ResponseFields fields;
  size_t size = 0;  // bytes of the head, its blank line included
  // Whether the connection may carry another request after this response's body.
  bool reusable() const { return !fields.close && (minor_version >= 1 || fields.keep_alive); }
};
// Parses a response head at the start of data[0, n): 1 when it is complete (*out filled),
// 0 when more bytes are needed, -1 when the bytes are not an HTTP/1.x response head.
int parse_response_head(const char* data, size_t n, ResponseHead* out);

// A version stamp of a remote object for the manifest cache (kept in SourceEntry::mtime_ns,
// so the manifest format does not change): Last-Modified in whole seconds plus, in the
// sub-second digits that HTTP dates never carry, a hash of the ETag.
int64_t remote_version_stamp(int64_t last_modified_ns, const std::string& etag);

// Retry policy. A transfer ends with a transport outcome (curl's, mapped by the client)
// and, when a response arrived, an HTTP status and maybe an S3 error code.
enum class Transport { kOk, kConnect, kTimeout, kBrokenBody, kOther };
enum class Verdict { kDone, kRetry, kFail };
Verdict classify(Transport transport, long http_status, const std::string& s3_error_code);

struct RetryPolicy {
  uint32_t max_retries = 6;         // attempts after the first; 0 = never retry
  uint32_t backoff_base_ms = 100;   // the first wait is about this long
  uint32_t backoff_max_ms = 10000;  // no wait is longer
};
// The wait before retry `attempt` (1 = first retry): exponential with "equal jitter"
// (uniform in [base*2^(attempt-1)/2, base*2^(attempt-1)], capped); `random` is any
// 64-bit value, so tests are deterministic.
uint32_t backoff_ms(const RetryPolicy& policy, uint32_t attempt, uint64_t random);

// Overrides *value with the unsigned integer environment variable `name` when it is set;
// kInvalidArgument naming the variable when it is not a number that fits.
Status env_u32(const char* name, uint32_t* value);

}  // namespace shardyard::io
