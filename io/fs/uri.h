// URIs: which are remote, their parts, their redacted form for messages, percent-encoding;
// and the two text helpers the URL and HTTP parsers share.
//
// Pure functions: nothing here does I/O, so the source readers (io/format) can ask whether a
// uri is remote without linking the HTTP client. Unit-tested in tests/io/remote/http_util_test.cc
// and fuzzed by tests/fuzz/http_fuzz.cc. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardyard::io {

// True for "http://", "https://" and "s3://" uris (case-insensitive scheme).
bool is_remote_uri(const std::string& uri);

struct Url {
  std::string scheme;  // lower case: "http", "https", "s3"
  std::string host;    // without the port; for s3:// the bucket
  int port = 0;        // 0 = the scheme's default
  std::string path;    // starts with '/' ("/" when empty); for s3:// the key after '/'
  std::string query;   // without the '?'
};
// Parses scheme://[user@]host[:port][/path][?query]; rejects what it cannot read.
std::optional<Url> parse_url(const std::string& text);

// The uri fit for messages and logs: no user info, no query string (presigned URLs carry
// their signature there), no fragment.
std::string redact_url(const std::string& uri);

// RFC 3986 percent-encoding of everything but unreserved characters (A-Z a-z 0-9 - _ . ~),
// and also of '/' unless keep_slash (S3 object keys in a path keep their slashes).
std::string uri_encode(const std::string& text, bool keep_slash);

// ASCII lower case (locale-independent).
std::string ascii_lower(std::string s);
// Parses the decimal digits s[pos, end) with no sign; false on anything else, on an empty
// range or on overflow.
bool parse_decimal_u64(const std::string& s, size_t pos, size_t end, uint64_t* out);

}  // namespace shardyard::io
