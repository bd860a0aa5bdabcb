#include "io/remote/http_util.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <string_view>

#include "runtime/hash.h"

namespace shardyard::io {

namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r' || s[b - 1] == '\n'))
    --b;
  return s.substr(a, b - a);
}

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {  // H. Hinnant's algorithm
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

std::optional<int64_t> to_ns(int64_t y, int mon, int d, int h, int mi, int s) {
  // Nanoseconds since 1970 in an int64_t end in 2262.
  if (y < 1970 || y > 2200 || mon < 1 || mon > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
      s > 60 || h < 0 || mi < 0 || s < 0)
    return std::nullopt;
  int64_t days = days_from_civil(y, static_cast<unsigned>(mon), static_cast<unsigned>(d));
  return ((days * 24 + h) * 60 + mi) * 60 * int64_t{1000000000} + s * int64_t{1000000000};
}

}  // namespace

std::optional<ContentRange> parse_content_range(const std::string& value) {
  std::string v = trim(value);
  if (v.size() < 6 || ascii_lower(v.substr(0, 6)) != "bytes ") return std::nullopt;
  size_t pos = 6;
  while (pos < v.size() && v[pos] == ' ') ++pos;
  auto dash = v.find('-', pos), slash = v.find('/', pos);
  if (dash == std::string::npos || slash == std::string::npos || dash > slash) return std::nullopt;
  ContentRange r;
  if (!parse_decimal_u64(v, pos, dash, &r.first) ||
      !parse_decimal_u64(v, dash + 1, slash, &r.last) || r.last < r.first)
    return std::nullopt;
  if (v.compare(slash + 1, std::string::npos, "*") == 0) return r;
  uint64_t total = 0;
  if (!parse_decimal_u64(v, slash + 1, v.size(), &total) || total <= r.last ||
      total > static_cast<uint64_t>(INT64_MAX))
    return std::nullopt;
  r.total = static_cast<int64_t>(total);
  return r;
}

std::optional<int64_t> parse_http_time(const std::string& value) {
  std::string v = trim(value);
  int y = 0, mon = 0, d = 0, h = 0, mi = 0, s = 0, used = 0;
  // ISO 8601: 2009-10-12T17:50:30.000Z (fraction optional).
  if (std::sscanf(v.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mon, &d, &h, &mi, &s, &used) == 6 &&
      used == 19) {
    size_t p = 19;
    if (p < v.size() && v[p] == '.') {
      ++p;
      while (p < v.size() && std::isdigit(static_cast<unsigned char>(v[p]))) ++p;
    }
    if (p + 1 != v.size() || v[p] != 'Z') return std::nullopt;
    return to_ns(y, mon, d, h, mi, s);
  }
  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT.
  char wday[4] = {}, month[4] = {}, zone[4] = {};
  if (std::sscanf(v.c_str(), "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d %3[A-Z]%n", wday, &d,
                  month, &y, &h, &mi, &s, zone, &used) != 8 ||
      static_cast<size_t>(used) != v.size() || std::string(zone) != "GMT")
    return std::nullopt;
  static const char* names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (int i = 0; i < 12; ++i)
    if (std::string(month) == names[i]) return to_ns(y, i + 1, d, h, mi, s);
  return std::nullopt;
}

bool split_header_line(const std::string& line, std::string* name, std::string* value) {
  auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i)
    if (line[i] == ' ' || line[i] == '\t') return false;  // a status line or a folded line
  *name = ascii_lower(line.substr(0, colon));
  *value = trim(line.substr(colon + 1));
  return true;
}

void note_response_field(const std::string& name, const std::string& value, ResponseFields* f) {
  if (name == "content-range") {
    f->content_range = parse_content_range(value);
  } else if (name == "content-length") {
    if (f->bad_length) return;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    const bool number =
        !value.empty() && value[0] >= '0' && value[0] <= '9' && errno == 0 && *end == '\0';
    if (!number || (f->content_length >= 0 && f->content_length != v)) {
      f->bad_length = true;
      f->content_length = -1;
    } else {
      f->content_length = v;
    }
  } else if (name == "etag") {
    f->etag = value;
    if (f->etag.rfind("W/", 0) == 0) f->etag = f->etag.substr(2);
    if (f->etag.size() >= 2 && f->etag.front() == '"' && f->etag.back() == '"')
      f->etag = f->etag.substr(1, f->etag.size() - 2);
  } else if (name == "last-modified") {
    f->last_modified_ns = parse_http_time(value).value_or(0);
  } else if (name == "transfer-encoding") {
    f->transfer_encoding = true;
  } else if (name == "connection") {
    const std::string v = ascii_lower(value);
    f->close = f->close || v.find("close") != std::string::npos;
    f->keep_alive = f->keep_alive || v.find("keep-alive") != std::string::npos;
  }
}

int parse_response_head(const char* data, size_t n, ResponseHead* out) {
  const std::string_view in(data, n);
  const size_t end = in.find("\r\n\r\n");
  // Its first bytes tell whether this is a response at all.
  const size_t k = std::min<size_t>(n, 7);
  if (in.substr(0, k) != std::string_view("HTTP/1.", k)) return -1;
  if (end == std::string_view::npos) {
    // A head whose lines end in a bare LF (HTTP allows a reader to accept it) is not read
    // here; a head of CRLF lines never holds two LFs in a row.
    return in.find("\n\n") != std::string_view::npos ? -1 : 0;
  }
  ResponseHead head;
  head.size = end + 4;
  const std::string_view status_line = in.substr(0, in.find("\r\n"));
  // "HTTP/1.x NNN[ reason]"
  if (status_line.size() < 12 || status_line[7] < '0' || status_line[7] > '9' ||
      status_line[8] != ' ')
    return -1;
  head.minor_version = status_line[7] - '0';
  long status = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (status_line[i] < '0' || status_line[i] > '9') return -1;
    status = status * 10 + (status_line[i] - '0');
  }
  if (status_line.size() > 12 && status_line[12] != ' ') return -1;
  head.status = status;
  for (size_t at = status_line.size() + 2; at < end;) {
    size_t eol = in.find("\r\n", at);
    std::string name, value;
    if (split_header_line(std::string(in.substr(at, eol - at)), &name, &value))
      note_response_field(name, value, &head.fields);
    at = eol + 2;
  }
  *out = std::move(head);
  return 1;
}

int64_t remote_version_stamp(int64_t last_modified_ns, const std::string& etag) {
  const int64_t second = 1000000000;
  int64_t whole = last_modified_ns - last_modified_ns % second;
  if (etag.empty()) return whole;
  Hasher h;
  h.add(etag);
  return whole + static_cast<int64_t>(h.digest() % static_cast<uint64_t>(second - 1)) + 1;
}

Verdict classify(Transport transport, long http_status, const std::string& s3_error_code) {
  switch (transport) {
    case Transport::kConnect:
    case Transport::kTimeout:
    case Transport::kBrokenBody:
      return Verdict::kRetry;
    case Transport::kOther:
      return Verdict::kFail;
    case Transport::kOk:
      break;
  }
  if (s3_error_code == "SlowDown" || s3_error_code == "RequestTimeout" ||
      s3_error_code == "InternalError" || s3_error_code == "ServiceUnavailable")
    return Verdict::kRetry;
  if (http_status >= 200 && http_status < 300) return Verdict::kDone;
  switch (http_status) {
    case 408:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
      return Verdict::kRetry;
    default:
      return Verdict::kFail;
  }
}

uint32_t backoff_ms(const RetryPolicy& policy, uint32_t attempt, uint64_t random) {
  if (attempt == 0) return 0;
  uint64_t cap = policy.backoff_base_ms;
  for (uint32_t i = 1; i < attempt && cap < policy.backoff_max_ms; ++i) cap *= 2;
  cap = std::min<uint64_t>(cap, policy.backoff_max_ms);
  uint64_t half = cap / 2;
  return static_cast<uint32_t>(half + (cap - half == 0 ? 0 : mix64(random) % (cap - half + 1)));
}

Status env_u32(const char* name, uint32_t* value) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return Status::ok();
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0' || errno != 0 || x > 0xffffffffULL || v[0] == '-')
    return invalid_argument(std::string(name) + "=" + v + " is not a non-negative integer");
  *value = static_cast<uint32_t>(x);
  return Status::ok();
}

}  // namespace shardyard::io
