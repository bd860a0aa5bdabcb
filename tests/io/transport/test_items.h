// Deterministic packets for the shared-memory channel tests: a producer (a forked child, or
// the shm_peer helper after exec) makes packet i of a stream from (seed, i) alone, and the
// consumer makes the same packet again to compare what it popped, byte for byte.
//
// Packets hold 1 to max_items items; each item has fields of random sizes (0 to
// max_field_bytes, most small), numbers and, for some, stage and dispatch states; every
// fifth packet also has windows: fields that view one buffer and overlap.
#pragma once

#include <cstdint>
#include <string>

#include "io/transport/data_plane.h"

namespace shardyard::io::testing {

struct StreamSpec {
  uint64_t seed = 1;
  uint32_t max_items = 24;
  uint32_t max_field_bytes = 64 << 10;
};

Packet make_packet(const StreamSpec& spec, uint64_t index);
// "" when `got` equals make_packet(spec, index), else the first difference.
std::string diff_packet(const Packet& got, const StreamSpec& spec, uint64_t index);

}  // namespace shardyard::io::testing
