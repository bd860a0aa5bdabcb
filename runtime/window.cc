#include "runtime/window.h"

#include <algorithm>
#include <limits>

namespace shardyard {

WindowSpec make_window_spec(uint64_t length, uint64_t stride, uint64_t target, bool stitch,
                            uint64_t record_bytes) {
  WindowSpec s;
  s.length = length;
  s.stride = stride;
  s.target = target;
  s.stitch = stitch;
  s.record_bytes = record_bytes;
  return s;
}

namespace {
Result<uint64_t> parse_u64(std::string_view part, std::string_view text, const char* what) {
  if (part.empty())
    return invalid_argument("--windows '" + std::string(text) + "': " + what +
                            " is missing (expected LENGTH:STRIDE[:TARGET], e.g. 24:1:6)");
  uint64_t v = 0;
  for (char c : part) {
    if (c < '0' || c > '9')
      return invalid_argument("--windows '" + std::string(text) + "': " + what + " '" +
                              std::string(part) + "' is not a non-negative integer");
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10)
      return invalid_argument("--windows '" + std::string(text) + "': " + what + " '" +
                              std::string(part) + "' is too large");
    v = v * 10 + digit;
  }
  return v;
}
}  // namespace

Result<WindowSpec> parse_window_spec(std::string_view text, WindowSpec base) {
  std::string_view parts[3];
  size_t n = 0, pos = 0;
  for (;;) {
    auto colon = text.find(':', pos);
    if (n == 3)
      return invalid_argument("--windows '" + std::string(text) +
                              "': too many parts (expected LENGTH:STRIDE[:TARGET])");
    parts[n++] = text.substr(pos, colon == std::string_view::npos ? colon : colon - pos);
    if (colon == std::string_view::npos) break;
    pos = colon + 1;
  }
  if (n < 2)
    return invalid_argument("--windows '" + std::string(text) +
                            "': expected LENGTH:STRIDE[:TARGET], e.g. 24:1 or 24:6:1");
  SY_ASSIGN_OR_RETURN(base.length, parse_u64(parts[0], text, "LENGTH"));
  SY_ASSIGN_OR_RETURN(base.stride, parse_u64(parts[1], text, "STRIDE"));
  base.target = 0;
  if (n == 3) {
    SY_ASSIGN_OR_RETURN(base.target, parse_u64(parts[2], text, "TARGET"));
  }
  return base;
}

Status validate_window_spec(const WindowSpec& spec) {
  if (spec.length == 0) return invalid_argument("--windows: LENGTH must be at least 1 record");
  if (spec.stride == 0) return invalid_argument("--windows: STRIDE must be at least 1 record");
  if (spec.record_bytes == 0) return invalid_argument("--record-bytes must be at least 1");
  if (spec.length > std::numeric_limits<uint64_t>::max() - spec.target)
    return invalid_argument("--windows: LENGTH + TARGET is too large");
  return Status::ok();
}

uint64_t window_count(const WindowSpec& spec, uint64_t records, uint64_t next_records) {
  if (spec.length == 0 || spec.stride == 0 || records == 0) return 0;
  const uint64_t span = spec.span();
  // start + span <= limit, and start < records (implied when limit == records).
  const uint64_t limit = spec.stitch ? records + next_records : records;
  if (limit < span) return 0;
  const uint64_t by_span = (limit - span) / spec.stride;
  const uint64_t by_start = (records - 1) / spec.stride;
  return std::min(by_span, by_start) + 1;
}

RecordRange window_records(const WindowSpec& spec, uint64_t first, uint64_t last) {
  return {window_start(spec, first), window_start(spec, last - 1) + spec.span()};
}

std::string window_key(std::string_view base_name, uint64_t first_record) {
  std::string key;
  key.reserve(base_name.size() + 21);
  key.append(base_name);
  key.push_back('@');
  key.append(std::to_string(first_record));
  return key;
}

std::string_view uri_base_name(std::string_view uri) {
  while (!uri.empty() && uri.back() == '/') uri.remove_suffix(1);
  auto slash = uri.rfind('/');
  return slash == std::string_view::npos ? uri : uri.substr(slash + 1);
}

std::string describe_window_spec(const WindowSpec& spec) {
  if (!spec.enabled()) return {};
  std::string out = std::to_string(spec.length) + ":" + std::to_string(spec.stride);
  if (spec.target > 0) out += ":" + std::to_string(spec.target);
  out += " over " + std::to_string(spec.record_bytes) + "-byte records";
  if (spec.stitch) out += ", stitched";
  return out;
}

}  // namespace shardyard
