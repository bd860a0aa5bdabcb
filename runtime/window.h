// WindowSpec: time-series windows over raw record files, and their pure math.
//
// A record file is a sequence of fixed-size records (e.g. float32 x channels per hour),
// `record_bytes` each. The items of a windows dataset are windows: `length` consecutive
// records, one starting every `stride` records, with an optional `target` record that many
// steps after the window's last record. Windows of a source with `records` records start at
// record k * stride (k = 0, 1, ...) with start < records. Without stitch a window is kept
// iff start + span <= records (span = length + target). With stitch a window that runs past
// the end is kept iff the head of the next source (in manifest order) completes it:
// start + span <= records + next_records. The last source has no next. See docs/windows.md.
//
// Building a windows manifest needs I/O (stat calls) and lives in io/format/record_scan.h; reading
// windows is io::SampleReader. This header has no I/O.
//
// Thread-compatible: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace shardyard {

struct WindowSpec {
  uint64_t record_bytes = 0;  // bytes per record
  uint64_t length = 0;        // records per window; 0 = windows are off
  uint64_t stride = 1;        // records between the starts of two windows
  uint64_t target = 0;        // 0 = no target; else the target record is this many steps
                              // after the window's last record (field "y")
  bool stitch = false;        // complete a source's last windows with the next source's head

  bool enabled() const { return length > 0; }
  uint64_t span() const { return length + target; }  // records a window touches
  bool operator==(const WindowSpec& o) const {
    return record_bytes == o.record_bytes && length == o.length && stride == o.stride &&
           target == o.target && stitch == o.stitch;
  }
  bool operator!=(const WindowSpec& o) const { return !(*this == o); }
};

// A spec from its values (not validated: see validate_window_spec()).
WindowSpec make_window_spec(uint64_t length, uint64_t stride, uint64_t target, bool stitch,
                            uint64_t record_bytes);

// Parses "LENGTH:STRIDE[:TARGET]" (two or three decimal integers) into length, stride and
// target of a copy of `base`, which supplies record_bytes and stitch. Checks the syntax
// only (a missing or non-numeric part, too many parts, overflow); the values are checked by
// validate_window_spec(), which a loader runs at start.
Result<WindowSpec> parse_window_spec(std::string_view text, WindowSpec base = {});

// OK when length, stride and record_bytes are at least 1 and the span fits in 64 bits.
Status validate_window_spec(const WindowSpec& spec);
// "LENGTH:STRIDE[:TARGET] over N-byte records[, stitched]", the form --windows takes plus
// the record size; empty when windows are off.
std::string describe_window_spec(const WindowSpec& spec);

// How many windows a source of `records` records yields; `next_records` is the record count
// of the next source (0 when there is none) and counts only with stitch.
uint64_t window_count(const WindowSpec& spec, uint64_t records, uint64_t next_records);

// First record (inside its source) of window `k`.
inline uint64_t window_start(const WindowSpec& spec, uint64_t k) { return k * spec.stride; }

// Records [first record, end record) that windows [first, last) of a source touch, both in
// the source's record numbering: the end may pass the source's record count when the last
// of them is stitched. Requires first < last.
struct RecordRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
RecordRange window_records(const WindowSpec& spec, uint64_t first, uint64_t last);

// Record (relative to the window's first record) of the target, i.e. length - 1 + target.
inline uint64_t window_target_offset(const WindowSpec& spec) {
  return spec.length - 1 + spec.target;
}

// "<base name>@<first record index>", e.g. "1979-01.bin@120". `base_name` is the source's
// file name without directories, extension kept.
std::string window_key(std::string_view base_name, uint64_t first_record);

// The file name of a uri: what follows its last '/' (trailing slashes ignored).
std::string_view uri_base_name(std::string_view uri);

}  // namespace shardyard
