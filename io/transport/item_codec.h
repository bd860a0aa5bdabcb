// The item codec: an Item's non-payload parts as bytes, and where its payload goes in a
// shared region (docs/shared-memory.md, "Item descriptors").
//
// A process that hands items to another one copies their field bytes into shared memory
// (a run of the arena, or a broadcast shard's image) and writes each item's descriptor:
//   item  = u64 id | u32 shard | u64 position | u32 worker | str key | u32 fields |
//           fields x (str name | u8 place | u64 offset | u64 size) | u8 flags |
//           [u32 source if flags & 4] | [str stage_state if flags & 1] |
//           [str dispatch_state if flags & 2]
//   block = u32 version (kItemCodecVersion) | u32 count | count x item
// (runtime/codec.h encodings: little-endian, str = u32 length + bytes). A field of place 0
// lies in the payload region the descriptor goes with, at `offset`; the reader checks that it
// lies inside that region, that names are sorted and unique, and that counts fit the bytes
// left, so a damaged or hostile descriptor is a kCorrupt error, never a crash, an
// out-of-bounds view or a large allocation. Decoded fields are views into the region: the
// caller sets the owner that keeps it alive. A change of the layout is a new version.
//
// File ranges: a field of place 1 was not copied; it is bytes [offset, offset + size) of
// the item's source file (`source`, an index into the manifest both processes hold), which
// the reader maps itself through a FileRanges callback, once per item for all its fields in
// the file. A producer names a field so when its item's owner is a FileBytes
// (runtime/item.h: a mapping of a local shard) holding it, and the field is at least
// `file_field_bytes` long, and always for an unread field (whatever its size): large samples
// then cross as a descriptor, and the loader reads the page cache as it does with workers
// in its own process (a FileRanges that gives a reader instead of a mapping keeps the
// fields unread, for build_batch to read). A reader without the callback refuses such a
// field.
//
// Arena bytes: a field of place 2 was not copied either; it is bytes [offset, offset + size)
// of the producer's data arena, where the producer read it before it made the item (a
// chunk of a tar shard read into the arena, io/transport/shm_arena.h ArenaChunks). A
// producer names a field so when its item's owner is an ArenaBytes of that arena holding
// it; the reader views its own mapping of the arena. A reader without one refuses such a
// field.
//
// plan_payload() lays the field bytes of a run of items out once: fields whose bytes
// overlap or touch in memory (windows cut from one buffer) share one copy, as they share
// one buffer in the producer; each copied extent starts on an `align` boundary.
//
// Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/codec.h"
#include "runtime/item.h"
#include "runtime/status.h"

namespace shardyard::io {

inline constexpr uint32_t kItemCodecVersion = 3;
inline constexpr uint8_t kPlaceRegion = 0, kPlaceFile = 1, kPlaceArena = 2;
inline constexpr uint32_t kNoSource = 0xffffffffu;

// What a reader maps for a file range: bytes [offset, offset + size) of source `source` at
// `data`, kept alive by `keep`; or, with `data` null, a reader of that source: the fields
// are then left unread (runtime/item.h Field::unread()) and read into the batch.
struct FileView {
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> keep;
  std::shared_ptr<const FileReader> reader;
};
using FileRanges = std::function<Result<FileView>(uint32_t source, uint64_t offset, uint64_t size)>;

// Bytes a producer placed in its data arena before it made items of them: fields of an
// item whose owner is one of these are named by their place in that arena (place 2).
struct ArenaBytes {
  const void* arena = nullptr;  // which arena: the producer's ArenaChunks
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t offset = 0;  // data[0] is byte `offset` of the arena's ring
  uint32_t slot = 0;    // the span's slot in the arena's header (shm_arena.h)
};
// An owner for Item::owner recognised by arena_bytes_of(); `done` runs once, when the last
// holder drops it (on that holder's thread).
std::shared_ptr<const void> arena_bytes_owner(ArenaBytes bytes, std::function<void()> done);
// The ArenaBytes that `owner` is, or nullptr when it is something else.
const ArenaBytes* arena_bytes_of(const std::shared_ptr<const void>& owner);
// Where the reader of a block finds fields of place 2: its mapping of the data arena.
struct ArenaView {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

struct PayloadPlan {
  struct Extent {
    const uint8_t* source;
    uint64_t size;
    uint64_t offset;  // in the region
  };
  std::vector<Extent> extents;
  std::vector<uint64_t> field_offsets;  // one per field of the items, in order
  std::vector<uint8_t> field_places;    // one per field: kPlaceRegion or kPlaceFile
  std::vector<uint32_t> item_sources;   // one per item: its source, or kNoSource
  std::vector<uint32_t> arena_slots;    // the data arena's spans the fields name, once each
  uint64_t bytes = 0;                   // the region's size
  struct Range {
    uintptr_t start;
    uint64_t size;
    size_t field;
  };
  std::vector<Range> scratch;  // reused between calls
};

// The layout of items[0..n)'s field bytes in a region; with file_field_bytes > 0, fields at
// least that long that lie in their item's FileBytes owner are named by file range instead;
// with `arena`, fields that lie in their item's ArenaBytes owner of that arena are named by
// their place in it.
void plan_payload(const Item* items, size_t n, uint64_t align, PayloadPlan* plan,
                  uint64_t file_field_bytes = 0, const void* arena = nullptr);
// Copies the bytes of `plan` into `region` (plan.bytes long).
void copy_payload(const PayloadPlan& plan, uint8_t* region);
// The region size plan_payload() gives at most (no field shares bytes).
uint64_t payload_upper_bound(const Item& item, uint64_t align, uint64_t file_field_bytes = 0,
                             const void* arena = nullptr);

// The exact size of encode_item()'s output for `item`, with or without a source.
uint64_t encoded_item_bytes(const Item& item, bool source = false);
// One item's descriptor; `offsets` holds one offset per field of `item`, `places` one place
// per field (nullptr: all in the region), and `source` the item's source for file ranges.
void encode_item(const Item& item, const uint64_t* offsets, ByteWriter* out,
                 const uint8_t* places = nullptr, uint32_t source = kNoSource);
// A block of n items with plan.field_offsets (and field_places and item_sources, where set).
void encode_items(const Item* items, size_t n, const PayloadPlan& plan, ByteWriter* out);
// encode_items() without the string: its exact size, and the block written at `out`, which
// has room for that many bytes (a producer writes it straight into shared memory); returns
// the end of what was written.
uint64_t encoded_items_bytes(const Item* items, size_t n, const PayloadPlan& plan);
char* write_items(const Item* items, size_t n, const PayloadPlan& plan, char* out);

// Decodes the item at bytes[*pos..], moving *pos past it; its fields view
// region[0..region_bytes), what `files` maps for file ranges, or `arena` for arena bytes
// (nullptr or empty: refused). False on damage or a range `files` cannot map (`error` says
// what). An item whose fields all lie in its file gets the mapping as `owner`; with fields
// in the region or the arena too it is in `owners`. Fields in the region or the arena are
// kept alive by the owner the caller sets.
bool decode_item(std::string_view bytes, size_t* pos, const uint8_t* region, uint64_t region_bytes,
                 Item* out, std::string* error, const FileRanges* files = nullptr,
                 const ArenaView* arena = nullptr);
// Decodes a block, appending its items to `out`; `what` names the block in messages.
Status decode_items(std::string_view block, const uint8_t* region, uint64_t region_bytes,
                    std::vector<Item>* out, const std::string& what,
                    const FileRanges* files = nullptr, const ArenaView* arena = nullptr);

}  // namespace shardyard::io
