// libFuzzer target for what the HTTP and S3 clients parse from a server: response header
// lines, response heads, Content-Range, HTTP dates, URLs, ListObjectsV2 bodies, S3 error bodies
// and XML entities (io/remote/http_util.h, io/remote/s3_listing.h). Beyond "no crash, no
// sanitizer report":
//   - a complete response head is no longer than the input, has a 3-digit status and a
//     Content-Length that is -1 or more;
//   - a parsed Content-Range has first <= last < total (when the total is known);
//   - a redacted URL holds no '?' and is no longer than the input;
//   - a listing's objects have non-empty keys, and a truncated listing has a token.
// The first input byte picks the parser; the rest is its input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/remote/http_util.h"
#include "io/remote/s3_listing.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "http_fuzz: property broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardyard::io;
  if (size == 0) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 7) {
    case 6: {
      ResponseHead h;
      if (parse_response_head(in.data(), in.size(), &h) == 1)
        check(h.size <= in.size() && h.size >= 16 && h.status >= 0 && h.status <= 999 &&
                  h.fields.content_length >= -1,
              "response head out of bounds");
      break;
    }
    case 0: {
      auto r = parse_content_range(in);
      if (r)
        check(r->first <= r->last && (r->total < 0 || r->last < uint64_t(r->total)),
              "content range out of order");
      break;
    }
    case 1:
      (void)parse_http_time(in);
      break;
    case 2: {
      std::string name, value;
      if (split_header_line(in, &name, &value)) check(!name.empty(), "empty header name");
      break;
    }
    case 3: {
      auto u = parse_url(in);
      if (u) check(!u->host.empty() && !u->path.empty() && u->path[0] == '/', "bad url parts");
      auto red = redact_url(in);
      check(red.size() <= in.size() && red.find('?') == std::string::npos, "redaction leaks");
      break;
    }
    case 4: {
      auto r = parse_list_objects_v2(in);
      if (r.is_ok()) {
        for (const auto& o : r->objects) check(!o.key.empty(), "object without a key");
        check(!r->truncated || !r->next_token.empty(), "truncated without a token");
      }
      break;
    }
    default: {
      (void)s3_error_code(in);
      std::string out;
      (void)xml_unescape(in, &out);
      break;
    }
  }
  return 0;
}
