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
#include <vector>

#include "io/transport/data_plane.h"
#include "io/transport/recent_segments.h"
#include "io/transport/shm_segment.h"

namespace shardyard::io {

inline constexpr uint32_t kShardImageVersion = 1;

// The room of an image no worker process reads any more: its segment and the writer's
// mapping of it, kept for the image of a later shard. Writing over the pages of a segment
// saves reserving and zeroing new ones, the writer's faults on them and freeing them
// afterwards, and a worker process that kept its mapping of the segment (MappedImages)
// does not map its pages again.
struct ShmImageRoom {
  ShmSegment segment;
  std::shared_ptr<ShmMapping> map;  // read-write
};

class ShmShardImage {
 public:
  // Copies `shard` (its field bytes and its item table) into a segment: one of `rooms`
  // that holds the image and is at most a quarter larger (taken out of *rooms; the last
  // such one, as the one given back last), else a new one.
  static Result<ShmShardImage> create(const SharedShard& shard, const SegmentOptions& options,
                                      std::vector<ShmImageRoom>* rooms = nullptr);
  // A read-only descriptor of the image for one worker (send it with a frame).
  Result<UniqueFd> share() const { return room_.segment.read_only_fd(); }
  const ShmSegment& segment() const { return room_.segment; }
  uint64_t payload_bytes() const { return payload_bytes_; }  // field bytes copied
  // The image's room, for a later image: only once no process reads this one any more.
  ShmImageRoom take_room() && { return std::move(room_); }

 private:
  ShmShardImage(ShmImageRoom room, uint64_t payload)
      : room_(std::move(room)), payload_bytes_(payload) {}
  ShmImageRoom room_;
  uint64_t payload_bytes_ = 0;
};

class ShmShardView : public ShardItems, public std::enable_shared_from_this<ShmShardView> {
 public:
  // Maps the image behind `fd` read-only; `what` names it in messages.
  static Result<std::shared_ptr<const ShmShardView>> open(UniqueFd fd, const std::string& what);
  // The image in `map`, a read-only mapping of a whole segment.
  static Result<std::shared_ptr<const ShmShardView>> open(std::shared_ptr<ShmMapping> map,
                                                          const std::string& what);
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

// A worker process's read-only mappings of the images it was sent last, by their file's
// identity (device and inode): the rank writes a later shard's image into the segment of one
// no worker reads any more (WorkerLaunch), and mapping the same pages again, a fault per
// 16 pages and their unmapping at the end, cost a worker more than copying its part's
// windows into its arena (docs/performance.md, "Worker processes"). An
// entry keeps its segment open, so no other file can take its identity meanwhile; it also
// keeps the pages until `keep` other images were opened after it.
//
// Thread-compatible.
class MappedImages {
 public:
  explicit MappedImages(size_t keep) : recent_(keep) {}
  // ShmShardView::open(), over the mapping of the same segment when it is kept here.
  Result<std::shared_ptr<const ShmShardView>> open(UniqueFd fd, const std::string& what);
  uint64_t reused() const { return recent_.reused(); }

 private:
  struct Mapping {
    ShmSegment segment;
    std::shared_ptr<ShmMapping> map;  // read-only
  };
  RecentSegments<Mapping> recent_;
};

}  // namespace shardyard::io
