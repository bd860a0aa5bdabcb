// ShardStreams: the items of a unit's logical shards in their epoch order, read chunk by
// chunk (one read per chunk, io/format/sample_reader.h; a chunk here is JobData::read_items
// items, fewer than the plan's where the order does not depend on them), each chunk's items
// emitted in the epoch's permuted order, every shard starting at its consumed position (a
// resumed shard reads the chunk it was in again and skips what was consumed). After reading
// a chunk it names the shard's next chunk to the reader (will_need), so a remote file
// fetches it while this chunk's items are used. Where the file wants larger hints
// (RandomAccessFile::hint_bytes(): a remote tar shard, one request per hint), the chunks
// that follow that one in the file are named with it, and each chunk is named once.
// load_shard() reads what is left of one shard at once (broadcast dispatch: the
// dispatcher loads a whole logical shard).
//
// Single-owner: used by one thread (the worker's or the dispatcher's).
#pragma once

#include <vector>

#include "actors/state/job.h"
#include "actors/state/role_stats.h"
#include "io/format/sample_reader.h"

namespace shardyard::actors {

class ShardStreams {
 public:
  // What the hints of all the unit's shards name together at most (beyond one chunk each):
  // a shard holds up to about two hints' bytes in fetched blocks.
  static constexpr uint64_t kUnitHintBytes = 16u << 20;
  // The unit's shards (in its order) from their consumed positions. Reads count as waits
  // for input of `stats` (may be null). `unit_hint_bytes`: the bound on the hints of all
  // its shards together (kUnitHintBytes; another value for tests).
  ShardStreams(const JobData& job, const WorkUnit& unit, io::SampleReader& reader,
               RoleStats* stats = nullptr, uint64_t unit_hint_bytes = kUnitHintBytes);
  // The next item of the unit's k-th shard (logical shard and id set).
  Result<Item> next(uint32_t k);

 private:
  struct Cursor {
    ShardSequence seq;
    size_t next_chunk = 0;
    std::vector<Item> items;     // the current chunk, in item-id order
    std::vector<uint32_t> perm;  // emission order
    size_t pos = 0;
    uint64_t skip = 0;  // items of the next chunk consumed before a resume
    size_t named = 0;   // chunks before this one have been named to the reader
  };
  // Names the cursor's next chunk to the reader unless it was named already, with the
  // chunks after it that follow it in the file where the file wants larger hints.
  void name_ahead(Cursor& c);
  const JobData& job_;
  const WorkUnit& unit_;
  io::SampleReader& reader_;
  RoleStats* stats_;
  const uint64_t unit_hint_bytes_;
  std::vector<Cursor> cursors_;
  struct Run {
    uint32_t source;
    uint64_t first, last;
  };
  std::vector<Run> runs_;  // name_ahead()'s scratch
};

// Loads logical shard `shard`'s items [consumed, take) of its epoch order (epoch key `key`)
// into `out->items`, reading each chunk once, and counts the bytes read into out->bytes.
Status load_shard(const JobData& job, io::SampleReader& reader, uint32_t shard, uint64_t consumed,
                  uint64_t take, uint64_t key, io::SharedShard* out);

}  // namespace shardyard::actors
