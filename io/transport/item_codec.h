// The item codec: an Item's non-payload parts as bytes, and where its payload goes in a
// shared region (docs/shared-memory.md, "Item descriptors").
//
// A process that hands items to another one copies their field bytes into shared memory
// (a run of the arena, or a broadcast shard's image) and writes each item's descriptor:
//   item  = u64 id | u32 shard | u64 position | u32 worker | str key | u32 fields |
//           fields x (str name | u64 offset | u64 size) | u8 flags |
//           [str stage_state if flags & 1] | [str dispatch_state if flags & 2]
//   block = u32 version (kItemCodecVersion) | u32 count | count x item
// (runtime/codec.h encodings: little-endian, str = u32 length + bytes). Offsets are
// relative to the payload region the descriptor goes with; the reader checks that every
// field lies inside that region, that names are sorted and unique, and that counts fit the
// bytes left, so a damaged or hostile descriptor is a kCorrupt error, never a crash, an
// out-of-bounds view or a large allocation. Decoded fields are views into the region: the
// caller sets the owner that keeps it alive. A change of the layout is a new version.
//
// plan_payload() lays the field bytes of a run of items out once: fields whose bytes
// overlap or touch in memory (windows cut from one buffer) share one copy, as they share
// one buffer in the producer; each copied extent starts on an `align` boundary.
//
// Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/codec.h"
#include "runtime/item.h"
#include "runtime/status.h"

namespace shardyard::io {

inline constexpr uint32_t kItemCodecVersion = 1;

struct PayloadPlan {
  struct Extent {
    const uint8_t* source;
    uint64_t size;
    uint64_t offset;  // in the region
  };
  std::vector<Extent> extents;
  std::vector<uint64_t> field_offsets;  // one per field of the items, in order
  uint64_t bytes = 0;                   // the region's size
  struct Range {
    uintptr_t start;
    uint64_t size;
    size_t field;
  };
  std::vector<Range> scratch;  // reused between calls
};

// The layout of items[0..n)'s field bytes in a region.
void plan_payload(const Item* items, size_t n, uint64_t align, PayloadPlan* plan);
// Copies the bytes of `plan` into `region` (plan.bytes long).
void copy_payload(const PayloadPlan& plan, uint8_t* region);
// The region size plan_payload() gives at most (no field shares bytes).
uint64_t payload_upper_bound(const Item& item, uint64_t align);

// The exact size of encode_item()'s output for `item`.
uint64_t encoded_item_bytes(const Item& item);
// One item's descriptor; `offsets` holds one offset per field of `item`.
void encode_item(const Item& item, const uint64_t* offsets, ByteWriter* out);
// A block of n items with plan.field_offsets.
void encode_items(const Item* items, size_t n, const PayloadPlan& plan, ByteWriter* out);

// Decodes the item at bytes[*pos..], moving *pos past it; its fields view
// region[0..region_bytes). False on damage (`error` says what).
bool decode_item(std::string_view bytes, size_t* pos, const uint8_t* region, uint64_t region_bytes,
                 Item* out, std::string* error);
// Decodes a block, appending its items to `out`; `what` names the block in messages.
Status decode_items(std::string_view block, const uint8_t* region, uint64_t region_bytes,
                    std::vector<Item>* out, const std::string& what);

}  // namespace shardyard::io
