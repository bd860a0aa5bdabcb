// Reading S3 ListObjectsV2 responses (and S3 error bodies) without an XML library.
//
// The responses are flat and machine-made: a ListBucketResult with <Contents> elements
// holding Key, Size, LastModified and ETag, plus IsTruncated and NextContinuationToken.
// The parser finds elements by name, decodes the five predefined entities and numeric
// character references, and rejects what it cannot read (fuzzed: tests/fuzz/http_fuzz.cc).
//
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace shardyard::io {

struct S3Object {
  std::string key;
  uint64_t size = 0;
  int64_t last_modified_ns = 0;
  std::string etag;  // without the quotes
};

struct S3Listing {
  std::vector<S3Object> objects;
  bool truncated = false;
  std::string next_token;  // continuation token when truncated
};

Result<S3Listing> parse_list_objects_v2(const std::string& xml);

// The <Code> of an S3 <Error> body ("NoSuchKey", "SlowDown", ...); empty when there is none.
std::string s3_error_code(const std::string& body);

// Decodes &amp; &lt; &gt; &quot; &apos; &#N; &#xN; (UTF-8 out); false on a bad reference.
bool xml_unescape(const std::string& in, std::string* out);

}  // namespace shardyard::io
