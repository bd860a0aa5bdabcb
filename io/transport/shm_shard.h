// Broadcast shards in shared memory: a loaded logical shard copied once into a segment and
// mapped read-only by every worker process of the rank, so W processes hold one copy, not W
// (docs/shared-memory.md, "Broadcast shards").
//
// The image is self-describing; the only thing a worker needs is its descriptor:
//   page 0   header: magic "SYSHARD1" | u32 version | u32 item codec version | u32 shard |
//            u32 0 | u64 first_position | u64 bytes | u64 items | u64 payload_offset |
//            u64 payload_bytes | u64 index_offset | u64 table_offset | u64 table_bytes
//   payload  the items' field bytes, each distinct byte once (overlapping windows share)
//   index    items x u64: where each item's descriptor starts in the table
//   table    the items' descriptors (io/transport/item_codec.h), offsets into the payload
// The view checks the header against the segment's size and each item as it decodes it, so
// a damaged image is a kCorrupt error, never a read outside the mapping.
//
// ShmShardImage (the loader or dispatcher side) is single-owner; it may be dropped once
// every worker holds a descriptor. ShmShardView is immutable and thread-safe; items from it
// keep the mapping alive through their owner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/transport/data_plane.h"
#include "io/transport/shm_segment.h"

namespace shardyard::io {

inline constexpr uint32_t kShardImageVersion = 1;

class ShmShardImage {
 public:
  // Copies `shard` (its field bytes and its item table) into a new segment.
  static Result<ShmShardImage> create(const SharedShard& shard, const SegmentOptions& options);
  // A read-only descriptor of the image for one worker (send it with a frame).
  Result<UniqueFd> share() const { return segment_.read_only_fd(); }
  const ShmSegment& segment() const { return segment_; }
  uint64_t payload_bytes() const { return payload_bytes_; }  // field bytes copied

 private:
  ShmShardImage(ShmSegment segment, uint64_t payload)
      : segment_(std::move(segment)), payload_bytes_(payload) {}
  ShmSegment segment_;
  uint64_t payload_bytes_ = 0;
};

class ShmShardView : public ShardItems, public std::enable_shared_from_this<ShmShardView> {
 public:
  // Maps the image behind `fd` read-only; `what` names it in messages.
  static Result<std::shared_ptr<const ShmShardView>> open(UniqueFd fd, const std::string& what);
  uint32_t shard() const { return shard_; }
  uint64_t first_position() const { return first_position_; }
  uint64_t size() const override { return items_; }  // items
  uint64_t bytes() const { return bytes_; }          // SharedShard::bytes
  // Item `index` (0-based), decoded from the table; its fields view the mapping.
  Result<Item> item(uint64_t index) const override;
  // Every item, as the SharedShard a Route delivers.
  Result<std::shared_ptr<const SharedShard>> materialize() const;
  // The same with the items decoded on demand (SharedShard::lazy): a worker that takes a
  // part of the indices decodes that part only.
  std::shared_ptr<const SharedShard> lazy_shard() const;

 private:
  ShmShardView() = default;
  std::string what_;
  std::shared_ptr<ShmMapping> map_;
  uint32_t shard_ = 0;
  uint64_t first_position_ = 0, bytes_ = 0, items_ = 0;
  uint64_t payload_offset_ = 0, payload_bytes_ = 0, index_offset_ = 0;
  uint64_t table_offset_ = 0, table_bytes_ = 0;
};

}  // namespace shardyard::io
