// Shard math: logical shards, the two sharding levels, the global order of an epoch and
// the per-rank step schedule. Pure free functions and value types, no I/O.
//
// Items are numbered canonically: item id g in [0, N) walks the manifest's sources in
// order and each source's samples in order. L logical shards own balanced contiguous
// ranges of item ids, fixed for the life of a job. Every epoch:
//   1. the logical shards are put in an epoch order (a seeded permutation with shuffle);
//   2. the DISTRIBUTED strategy assigns them to ranks, the WORKER strategy splits each
//      rank's list among its workers (contiguous, strided, by key, or user-registered);
//   3. each logical shard's items are emitted chunk by chunk (a chunk is a shuffle block:
//      up to `chunk_items` consecutive item ids, read once), chunks and the items inside
//      each chunk in a seeded permuted order;
//   4. a rank's order interleaves its logical shards item by item, round robin in the
//      epoch order (a shard that runs out drops out of the round). A worker's order is the
//      same interleave restricted to its shards, so the loader can merge worker output
//      back into the exact rank order. With PlanSpec::sequential (broadcast dispatch) the
//      rank order takes its shards one after another instead.
// With strided DISTRIBUTED assignment, R dividing L and L dividing N (equal logical shards),
// rank r's order is the global order's positions r, r+R, r+2R, ..., so the global batch at
// each step is the same set of items for every R with the same R x B. When L does not
// divide N the ranks' shares differ by a few items and the last steps can differ. See
// docs/sharding.md for worked examples.
//
// Thread-safety: functions are pure; StrategyRegistry is internally synchronised.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/manifest.h"
#include "runtime/status.h"

namespace shardyard {

// Where item id g lives: manifest source index and sample index in that source.
struct ItemLocation {
  uint32_t source = 0;
  uint64_t sample = 0;
};

// Maps canonical item ids to (source, sample). Immutable after construction.
class ItemIndex {
 public:
  ItemIndex() = default;
  explicit ItemIndex(const Manifest& m);
  uint64_t num_items() const { return starts_.empty() ? 0 : starts_.back(); }
  size_t num_sources() const { return starts_.empty() ? 0 : starts_.size() - 1; }
  uint64_t source_begin(uint32_t s) const { return starts_[s]; }
  uint64_t source_end(uint32_t s) const { return starts_[s + 1]; }
  ItemLocation locate(uint64_t item) const;

 private:
  std::vector<uint64_t> starts_;  // starts_[s] = first item id of source s; back() = N
};

// L contiguous ranges of [0, N). Balanced by default: shard j owns [j*N/L, (j+1)*N/L).
// from_bounds() takes explicit boundaries instead (bounds[0] = 0, bounds[L] = N,
// non-decreasing): one shard per source of a windows dataset (make_logical_shards()).
class LogicalShards {
 public:
  LogicalShards() = default;
  LogicalShards(uint64_t num_items, uint32_t count) : n_(num_items), l_(count) {}
  static LogicalShards from_bounds(std::vector<uint64_t> bounds) {
    LogicalShards s(bounds.empty() ? 0 : bounds.back(),
                    static_cast<uint32_t>(bounds.empty() ? 1 : bounds.size() - 1));
    s.bounds_ = std::move(bounds);
    return s;
  }
  uint32_t count() const { return l_; }
  uint64_t num_items() const { return n_; }
  uint64_t begin(uint32_t j) const {
    if (!bounds_.empty()) return bounds_[j];
    return static_cast<uint64_t>(static_cast<unsigned __int128>(j) * n_ / l_);
  }
  uint64_t end(uint32_t j) const { return begin(j + 1); }
  uint64_t size(uint32_t j) const { return end(j) - begin(j); }

 private:
  uint64_t n_ = 0;
  uint32_t l_ = 1;
  std::vector<uint64_t> bounds_;  // empty: balanced
};

// Default L: one logical shard per source when there are 64 to 256 sources; more sources
// are grouped into 256 shards, fewer are cut into pieces so that L >= 64 (never more than
// the number of items). Depends on the manifest only, never on the topology.
uint32_t default_logical_shards(uint64_t num_items, size_t num_sources);
// Default L of a manifest: one per source for a windows dataset (a source, e.g. a month, is
// the unit the DISTRIBUTED level assigns), default_logical_shards(N, S) otherwise.
uint32_t default_logical_shards(const Manifest& m);
// The L logical shards of a manifest: for a windows dataset with L equal to its number of
// sources, shard j owns exactly source j's windows; otherwise L balanced ranges. A pure
// function of (manifest, L), so a resumed job gets the same shards.
LogicalShards make_logical_shards(const Manifest& m, const ItemIndex& index, uint32_t count);

// What an open chunk holds per item besides its bytes: the decoded Item (key, fields,
// owners), about 160 bytes with one field, plus the allocator's share.
inline constexpr uint64_t kItemCostBytes = 256;
// The bytes a worker holds for the manifest's items while their chunks are open: each tar
// sample's byte range (its members with their headers and padding), each other sample's
// payload, each window's payload.
uint64_t held_bytes(const Manifest& m);
// Default shuffle-block size: about max(64 KiB, 8 MiB / L) of what items cost per chunk
// (held_bytes() / N + kItemCostBytes each; at least one item, at most 8192). A worker holds
// one open chunk per logical shard it serves, so a rank holds about 8 MiB / R of open chunks
// (at least one item per shard) whatever the dataset's size and however small its samples.
// Small chunks also keep the copies in cache; mixing comes from interleaving the logical
// shards item by item (docs/sharding.md).
uint32_t default_chunk_items(const Manifest& m, uint32_t logical_shards);
// How many items a worker reads at once from a logical shard whose order does not depend on
// its chunks (no shuffle): about max(32 KiB, 2 MiB / L) of what items cost, so the open
// pieces of a rank's shards stay within a core's share of the cache while they are copied
// into batches (docs/performance.md, "Smaller reads where the order allows them"). The
// order and the checkpoints still name the plan's chunk_items.
uint32_t default_read_items(const Manifest& m, uint32_t logical_shards);

// What a sharding strategy sees of one logical shard.
struct ShardInfo {
  uint32_t shard = 0;        // logical shard index
  uint64_t items = 0;        // items it owns
  std::string first_source;  // uri of the source holding its first item
  std::string first_key;     // key of its first item
};

// A strategy assigns the listed shards (in epoch order) to `parts` parts (ranks or
// workers): result[i] is the part of shards[i], each < parts.
using ShardingStrategy =
    std::function<std::vector<uint32_t>(const std::vector<ShardInfo>& shards, uint32_t parts)>;

std::vector<uint32_t> assign_contiguous(const std::vector<ShardInfo>& shards, uint32_t parts);
std::vector<uint32_t> assign_strided(const std::vector<ShardInfo>& shards, uint32_t parts);
// Groups shards by a user key (e.g. the month in the source name); distinct keys, sorted,
// go to parts round robin, so all shards of a key land on one part.
ShardingStrategy by_key(std::function<std::string(const ShardInfo&)> key_of);

// Process-wide registry of named strategies; "contiguous" and "strided" are built in.
// Register user strategies before opening a loader (in every process that runs one).
class StrategyRegistry {
 public:
  static StrategyRegistry& global();
  Status add(const std::string& name, ShardingStrategy strategy);
  Result<ShardingStrategy> get(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  StrategyRegistry();
  mutable std::mutex mu_;
  std::map<std::string, ShardingStrategy> strategies_;  // guarded by mu_
};

// How an epoch is planned. Part of a job's identity (with the manifest fingerprint).
struct PlanSpec {
  uint32_t logical_shards = 0;  // L; 0 = default_logical_shards()
  uint32_t chunk_items = 0;     // shuffle block in items; 0 = default_chunk_items()
  uint64_t seed = 0;
  bool shuffle = false;    // permute shard order, chunk order and items inside chunks
  bool drop_last = false;  // every batch full; the epoch's tail beyond is not delivered
  std::string distributed_strategy = "strided";
  std::string worker_strategy = "strided";
  // A rank's order takes its logical shards one after another (each shard's items in its
  // epoch order) instead of interleaving them item by item: the order of broadcast
  // dispatch, which holds one loaded shard at a time. Not part of a job's identity: a
  // checkpoint's cursor is per logical shard, whatever the order that consumed it.
  bool sequential = false;
};

struct Topology {
  uint32_t ranks = 1;
  uint32_t workers = 1;  // per rank
};

// Round-robin interleave counts: how many items of each sequence (sizes[i]) lie among the
// first `positions` positions of the interleave. O(n log n).
std::vector<uint64_t> interleave_counts(const std::vector<uint64_t>& sizes, uint64_t positions);

// The same counts for a sequential order: the first shards whole, in list order.
std::vector<uint64_t> sequential_counts(const std::vector<uint64_t>& sizes, uint64_t positions);

// Walks a round-robin interleave of sequences with the given sizes: next() returns the
// index of the sequence that owns the next position. Round r takes item r of every
// sequence that has one, in list order, so the interleave is the list of pairs
// (item r, sequence i) in lexicographic order. Amortised O(1) per position.
//
// Started with `consumed` (items already taken from each sequence) it walks the pairs not
// consumed yet in the same lexicographic order. After a prefix of the interleave (counts as
// interleave_counts() gives them) that is exactly the rest of the interleave; after any
// other counts (a rescaled resume) the sequences that lag behind catch up first. Either way
// the walk restricted to a subset of the sequences is the walk of that subset alone, which
// is what lets a worker produce its part of a rank's order without seeing the rest.
class InterleaveCursor {
 public:
  explicit InterleaveCursor(const std::vector<uint64_t>& sizes);
  InterleaveCursor(const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& consumed);
  bool done() const { return active_.empty(); }
  uint32_t next();

 private:
  void enter_level(uint64_t level);

  std::vector<uint64_t> size_, next_;  // next_[i]: the item of sequence i to emit next
  std::vector<uint32_t> joining_;      // sequences not yet active, by (next_, index)
  size_t joined_ = 0;                  // joining_[0, joined_) are active or done
  std::vector<uint32_t> active_;       // sequences in the current round, in list order
  size_t at_ = 0;                      // position in active_ of the next sequence
  uint64_t level_ = 0;                 // the current round
};

// First position of `step` in a rank order of `items` items cut into `steps` batches of at
// most `batch_size` (step == steps gives `items`): full batches first, the shortfall spread
// over the last batches so that none is empty while items >= steps.
uint64_t batch_begin(uint64_t items, uint64_t steps, uint32_t batch_size, uint64_t step);

// Where an interrupted epoch stands: what a checkpoint restores (runtime/checkpoint.h).
// Topology-free except for the batch layout, which lets a resume at the same R and batch
// size continue the very same batches.
struct EpochCursor {
  uint32_t epoch = 0;
  uint64_t step = 0;               // steps consumed: the number of the next batch
  std::vector<uint64_t> take;      // by logical shard: items the epoch delivers from it
  std::vector<uint64_t> consumed;  // by logical shard: items consumed, a prefix of its order
  // The batch layout in force when the cursor was taken (see EpochPlan).
  uint32_t ranks = 0;
  uint32_t batch_size = 0;
  uint64_t steps = 0;
  uint64_t layout_step0 = 0;
  std::vector<uint64_t> layout_offset;  // by rank
  std::vector<uint64_t> layout_items;   // by rank
  bool complete() const;                // every shard consumed to its take
};

// One rank's share of an epoch.
struct RankPlan {
  std::vector<uint32_t> shards;    // logical shards, in interleave order
  std::vector<uint64_t> take;      // items delivered from each shard (all, or fewer with drop_last)
  std::vector<uint64_t> consumed;  // items of each already consumed (resumed epochs)
  std::vector<uint32_t> worker_of;  // worker of each shard
  uint64_t items = 0;               // sum of take
  uint64_t start = 0;               // sum of consumed: the position of the first step
  uint64_t layout_offset = 0;       // position of the layout's step 0
  uint64_t layout_items = 0;        // items laid out into steps from layout_step0
};

// Batches: steps [first_step, steps) of the epoch are delivered. Their sizes follow a
// layout: from step layout_step0 on, each rank's layout_items items (from its
// layout_offset) are cut by batch_begin(). A fresh epoch lays out everything from step 0;
// a resumed one continues the checkpoint's layout at the same R and batch size, and
// otherwise lays out what is left from the resumed step.
struct EpochPlan {
  uint32_t epoch = 0;
  uint64_t epoch_key = 0;             // hash of (seed, epoch): keys every shuffle of the epoch
  std::vector<uint32_t> shard_order;  // the epoch order of logical shards
  std::vector<RankPlan> ranks;
  uint64_t steps = 0;  // same for every rank: one past the last step number
  uint64_t first_step = 0;
  uint64_t layout_step0 = 0;
  uint32_t batch_size = 1;
  // First rank-order position of `step` on `rank` (step == steps gives the end).
  uint64_t batch_begin(uint32_t rank, uint64_t step) const {
    const auto& r = ranks[rank];
    return r.layout_offset + shardyard::batch_begin(r.layout_items, steps - layout_step0,
                                                    batch_size, step - layout_step0);
  }
  uint64_t batch_items(uint32_t rank, uint64_t step) const {
    return batch_begin(rank, step + 1) - batch_begin(rank, step);
  }
};

// The key of every shuffle of an epoch: a pure function of (seed, epoch). The coordinator
// hands it to every dispatcher, so all ranks see the same order.
uint64_t epoch_key(uint64_t seed, uint32_t epoch);

// Plans epoch `epoch`. Fails on an unknown strategy, a strategy that returns a bad
// assignment, or fewer items than ranks. With `resume` (a cursor of this epoch that is not
// complete) the plan delivers only what the cursor has not consumed, on this topology:
// the shards go to ranks and workers as in a fresh plan, each starts at its consumed
// position, and step numbers continue at the cursor's step.
Result<EpochPlan> plan_epoch(const Manifest& manifest, const ItemIndex& index,
                             const LogicalShards& shards, const PlanSpec& spec,
                             const Topology& topology, uint32_t batch_size, uint32_t epoch,
                             const EpochCursor* resume = nullptr);

// The epoch order of one logical shard's items, chunk by chunk.
class ShardSequence {
 public:
  // `key` is the epoch key; chunks are permuted only when `permute_chunks` (seekable data).
  ShardSequence(const LogicalShards& shards, uint32_t shard, uint32_t chunk_items, bool shuffle,
                bool permute_chunks, uint64_t key);
  size_t num_chunks() const { return order_.size(); }
  // The i-th chunk in epoch order covers item ids [chunk_begin(i), chunk_end(i)).
  uint64_t chunk_begin(size_t i) const;
  uint64_t chunk_end(size_t i) const;
  // Emission order of the items of the i-th chunk: a permutation of [0, size).
  std::vector<uint32_t> chunk_permutation(size_t i) const;
  // The chunk (in epoch order) holding the shard's `position`-th emitted item, and how many
  // of that chunk's items come before it. position == size gives (num_chunks(), 0).
  struct Seek {
    size_t chunk = 0;
    uint64_t offset = 0;
  };
  Seek seek(uint64_t position) const;

 private:
  uint64_t begin_ = 0, end_ = 0;
  uint32_t chunk_items_ = 1;
  bool shuffle_ = false;
  uint64_t key_ = 0;
  std::vector<uint32_t> order_;  // canonical chunk index of the i-th chunk in epoch order
};

// A seeded Fisher-Yates permutation of [0, n).
std::vector<uint32_t> seeded_permutation(uint32_t n, uint64_t key);
// 0, 1, ..., n-1.
std::vector<uint32_t> identity_permutation(uint32_t n);

}  // namespace shardyard
