// libFuzzer target for the window spec parser and the window math (runtime/window.h).
// Input: "LENGTH:STRIDE[:TARGET]", optionally a newline and "RECORDS NEXT_RECORDS". Beyond
// "no crash, no sanitizer report", an accepted spec must count exactly the windows that
// fit (each counted window starts inside the source and ends within it, or within the next
// source when stitching; the first uncounted one does not), and window_records() must
// cover exactly the counted windows' records.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/window.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "window_fuzz: property broken: %s\n", what);
  std::abort();
}

bool fits(const shardyard::WindowSpec& s, uint64_t k, uint64_t records, uint64_t next) {
  const unsigned __int128 start = static_cast<unsigned __int128>(k) * s.stride;
  if (start >= records) return false;
  const uint64_t room = s.stitch ? records + next : records;
  return start + s.span() <= room;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)shardyard::uri_base_name(in);
  const auto nl = in.find('\n');
  shardyard::WindowSpec base;
  base.record_bytes = 4;
  base.stitch = size > 0 && (data[size - 1] & 1);
  auto spec = shardyard::parse_window_spec(in.substr(0, nl), base);
  if (!spec.is_ok() || !shardyard::validate_window_spec(*spec).is_ok()) return 0;
  uint64_t records = 1000, next = 0;
  if (nl != std::string_view::npos) {
    const std::string rest(in.substr(nl + 1));
    unsigned long long a = 0, b = 0;
    if (std::sscanf(rest.c_str(), "%llu %llu", &a, &b) >= 1) {
      records = a % 100000;
      next = b % 100000;
    }
  }
  const uint64_t n = shardyard::window_count(*spec, records, next);
  check(n <= records, "more windows than records");
  if (n > 0) {
    check(fits(*spec, 0, records, next) && fits(*spec, n - 1, records, next),
          "a counted window does not fit");
    const auto r = shardyard::window_records(*spec, 0, n);
    check(r.begin == 0, "the records of the windows start elsewhere");
    check(r.end == shardyard::window_start(*spec, n - 1) + spec->span(),
          "the records of the windows end elsewhere");
  }
  check(!fits(*spec, n, records, next), "a window that fits was not counted");
  const auto key = shardyard::window_key("m.bin", n);
  check(key == "m.bin@" + std::to_string(n), "window key");
  return 0;
}
