// The shared arena: a ring of bytes in one segment, written by one producer process and
// read in place by one consumer process (docs/shared-memory.md, "Arena").
//
// The segment is a header page (ArenaHeader) and `capacity` bytes of ring. Positions are
// 64-bit byte counts that only grow; position p lies at byte p % capacity of the ring. The
// producer (ArenaRing) hands out runs in ring order, each 64-byte aligned and never split at
// the ring's end (a run that does not fit before the end starts at the next multiple of
// capacity; the bytes skipped count as free). The consumer (ArenaReleases) learns each run
// from its descriptor frame, in that order, and frees runs in any order; it publishes
// `released`, the position below which every run is free, and the producer reuses space up
// to it. So reuse follows ring order while release does not.
//
// The header holds only counters that one side writes and the other reads (atomics,
// lock-free across processes); each side checks what the other wrote, so a damaged value
// is an error, never an overwrite of a run still in use.
//
// ArenaRing and ArenaReleases are plain state: thread-compatible (their owners lock).
// ShmArena is immutable once made; the header's atomics may be used from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "io/transport/recent_segments.h"
#include "io/transport/shm_segment.h"
#include "runtime/buffer.h"
#include "runtime/mutex.h"
#include "runtime/status.h"

namespace shardyard::io {

inline constexpr uint64_t kArenaHeaderBytes = 4096;
inline constexpr uint64_t kArenaAlign = 64;
inline constexpr uint64_t kArenaMagic = 0x31414e4552415953;  // "SYARENA1"
inline constexpr uint32_t kArenaVersion = 2;
// Spans of a data arena (ArenaChunks) that may be in use at once: each has a slot of the
// header where the consumer counts the runs naming it that it dropped.
inline constexpr uint32_t kArenaSpanSlots = 256;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters must be lock-free");

struct ArenaHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t capacity;
  // Written by the consumer.
  alignas(64) std::atomic<uint64_t> released;  // every run below this position is free
  std::atomic<uint64_t> popped;                // packets popped
  std::atomic<uint32_t> cancelled;             // 1 once the consumer cancelled
  // Written by the producer.
  alignas(64) std::atomic<uint64_t> sent;  // packets sent whole
  std::atomic<uint32_t> producer_waiting;  // 1 while it waits for released or popped
  // A data arena's: spans the producer still holds (its items not all dropped there).
  std::atomic<uint64_t> producer_spans;
  // A data arena's, written by the consumer: per slot, runs naming the slot's span that
  // it dropped (only grows).
  alignas(64) std::atomic<uint64_t> span_drops[kArenaSpanSlots];
};
static_assert(sizeof(ArenaHeader) <= kArenaHeaderBytes);

// The producer's allocator.
class ArenaRing {
 public:
  explicit ArenaRing(uint64_t capacity) : capacity_(capacity) {}
  struct Span {
    uint64_t start = 0;   // ring position
    uint64_t offset = 0;  // byte offset in the ring
    uint64_t bytes = 0;   // aligned size
  };
  // Places a run of `bytes` (> 0, at most capacity) if it fits with the consumer at
  // `released`: true and *out set, false when it must wait, kCorrupt when `released` is
  // not a position this ring can have reached.
  Result<bool> allocate(uint64_t bytes, uint64_t released, Span* out);
  uint64_t head() const { return head_; }
  uint64_t capacity() const { return capacity_; }

 private:
  uint64_t capacity_;
  uint64_t head_ = 0;
  uint64_t released_ = 0;  // the last value seen, which may only grow
};

// The consumer's record of the runs it holds.
class ArenaReleases {
 public:
  explicit ArenaReleases(uint64_t capacity) : capacity_(capacity) {}
  // A run the producer announced, in ring order: kCorrupt when it is out of order, out of
  // the ring or over a run still held.
  Status add(uint64_t start, uint64_t bytes);
  // Frees the held run that starts at `start`; returns the new released position.
  uint64_t release(uint64_t start);
  uint64_t released() const { return runs_.empty() ? end_ : runs_.front().start; }
  size_t held_runs() const { return runs_.size(); }
  uint64_t held_bytes() const { return held_; }

 private:
  struct Run {
    uint64_t start, end;
    bool free;
  };
  uint64_t capacity_;
  std::deque<Run> runs_;  // in ring order; the front one is held
  uint64_t end_ = 0;      // end of the last run added
  uint64_t held_ = 0;     // bytes of runs not freed
};

// One arena's segment, mapped. The consumer creates it (create); the producer maps the
// descriptor it receives (attach).
class ShmArena {
 public:
  static Result<std::shared_ptr<ShmArena>> create(uint64_t capacity, const SegmentOptions& options);
  static Result<std::shared_ptr<ShmArena>> attach(UniqueFd fd, uint64_t capacity,
                                                  const std::string& what);
  ArenaHeader& header() const { return *header_; }
  const uint8_t* ring() const { return ring_->data(); }
  uint8_t* writable_ring() const { return ring_->writable_data(); }  // null for the consumer
  uint64_t capacity() const { return capacity_; }
  // The producer's: maps the pages of the ring up to `end` (a byte offset), and on to the
  // next MiB, for writing in one call (MADV_POPULATE_WRITE) the first time the ring gets
  // there, instead of one write fault per page. The segment's pages are reserved already,
  // so this maps them and allocates nothing. A no-op once the whole ring is mapped, for
  // the consumer, and on kernels without it (before 5.14), where the pages fault in.
  void map_ahead(uint64_t end);
  const ShmSegment& segment() const { return segment_; }

 private:
  ShmArena(ShmSegment segment, uint64_t capacity)
      : segment_(std::move(segment)), capacity_(capacity) {}
  ShmSegment segment_;
  uint64_t capacity_;
  std::shared_ptr<ShmMapping> header_map_, ring_;
  ArenaHeader* header_ = nullptr;
  std::atomic<uint64_t> mapped_{0};  // map_ahead(): ring bytes mapped for writing so far
};

// Arenas kept for the next channels of one producer slot (a worker's channel per work
// unit): making an arena reserves, zeroes and maps all its pages, which every epoch of a
// worker paid again. A channel gives its arena back once the channel is gone, every
// item of it was dropped and its producer finished (sent its finish frame, so it writes no
// more); an arena whose producer closed without finishing (died) is never reused. take()
// resets the counters of the header; positions start again at 0, so nothing refers to the
// old bytes.
//
// Thread-safe: items (and with them arenas) are dropped on any thread.
class ArenaPool {
 public:
  explicit ArenaPool(size_t keep = 2) : keep_(keep) {}
  // An idle arena of `capacity` (rounded as create() rounds it), or a new one.
  Result<std::shared_ptr<ShmArena>> take(uint64_t capacity, const SegmentOptions& options);
  // Keeps `arena` for a later take(), unless `keep` arenas are kept already.
  void give_back(std::shared_ptr<ShmArena> arena);
  // Arenas kept now; takes served by one of them so far.
  size_t idle() const;
  uint64_t reused() const;

 private:
  const size_t keep_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<ShmArena>> idle_ SY_GUARDED_BY(mu_);
  uint64_t reused_ SY_GUARDED_BY(mu_) = 0;
};

// The producer's side of ArenaPool: the arenas a worker process attached last
// (RecentSegments, keyed by the segment's file). A loader that reuses an arena sends the
// same segment for the next channel, and mapping every page of it for writing again would
// cost what the pool saves.
//
// Thread-safe.
class AttachedArenas {
 public:
  explicit AttachedArenas(size_t keep = 2) : recent_(keep) {}
  // ShmArena::attach(), or the arena attached before from the same segment.
  Result<std::shared_ptr<ShmArena>> attach(UniqueFd fd, uint64_t capacity, const std::string& what);

 private:
  RecentSegments<ShmArena> recent_;
};

// The producer's side of a data arena: memory a worker process reads chunks of its shards
// into (runtime/buffer.h ChunkAllocator), so that the items made of them cross to the
// loader without a copy: their fields are named by their place in the arena
// (io/transport/item_codec.h, "Arena bytes"). Each chunk is a span of the ring, owned by an
// ArenaBytes owner and given a slot of the header. A span is free once the producer dropped
// it (every item of it pushed or dropped) and the consumer dropped every run that named it:
// the producer counts the runs it sends naming each slot (named()), the consumer counts in
// the header those it dropped. Space is reused in ring order, as in the run arena.
// allocate() never waits: with no room or no slot it returns nullptr and the reader uses
// its pool (the item's bytes are then copied into a run, as before), so a chunk held long
// (by a shuffle buffer or by the loader) costs a copy, never a stall.
//
// Thread-safe: chunks are dropped on any thread.
class ArenaChunks : public ChunkAllocator, public std::enable_shared_from_this<ArenaChunks> {
 public:
  static std::shared_ptr<ArenaChunks> create(std::shared_ptr<ShmArena> arena);
  uint8_t* allocate(size_t bytes, std::shared_ptr<const void>* owner) override;
  // A run naming `slots` is about to be sent: each span counts one more run to be dropped.
  void named(const std::vector<uint32_t>& slots);
  // What the ArenaBytes owners of this arena name (item_codec.h ArenaBytes::arena).
  const void* id() const { return this; }
  const ShmArena& arena() const { return *arena_; }
  // Spans held now (by the producer, or named by runs the consumer has not dropped).
  size_t spans();

 private:
  explicit ArenaChunks(std::shared_ptr<ShmArena> arena);
  void retire(uint64_t start);
  void reclaim() SY_REQUIRES(mu_);

  struct Span {
    uint64_t start = 0, bytes = 0;
    uint32_t slot = 0;
    bool retired = false;  // the producer dropped it
  };
  const std::shared_ptr<ShmArena> arena_;
  mutable Mutex mu_;
  ArenaRing ring_ SY_GUARDED_BY(mu_);
  std::deque<Span> spans_ SY_GUARDED_BY(mu_);  // in ring order
  std::vector<uint32_t> free_slots_ SY_GUARDED_BY(mu_);
  // Per slot: the header's drop count when the span took it, and runs sent naming it.
  std::vector<uint64_t> base_ SY_GUARDED_BY(mu_), named_ SY_GUARDED_BY(mu_);
};

uint64_t align_arena(uint64_t bytes);

}  // namespace shardyard::io
