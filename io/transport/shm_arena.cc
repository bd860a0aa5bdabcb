#include "io/transport/shm_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

#include "io/transport/item_codec.h"

namespace shardyard::io {

uint64_t align_arena(uint64_t bytes) {
  return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

Result<bool> ArenaRing::allocate(uint64_t bytes, uint64_t released, Span* out) {
  if (released > head_ || released < released_ || released % kArenaAlign != 0)
    return corrupt("the consumer reports the arena free up to position " +
                   std::to_string(released) + ", but the producer is at " + std::to_string(head_) +
                   " and saw " + std::to_string(released_) + " before");
  released_ = released;
  bytes = align_arena(bytes);
  if (bytes == 0 || bytes > capacity_)
    return internal_error("a run of " + std::to_string(bytes) + " bytes in an arena of " +
                          std::to_string(capacity_));
  const uint64_t offset = head_ % capacity_;
  const uint64_t start = offset + bytes <= capacity_ ? head_ : head_ - offset + capacity_;
  // Nothing held: the whole ring is free wherever the run starts. Otherwise the run must
  // end before the oldest held byte comes round again.
  if (released != head_ && start + bytes > released + capacity_) return false;
  *out = Span{start, start % capacity_, bytes};
  head_ = start + bytes;
  return true;
}

Status ArenaReleases::add(uint64_t start, uint64_t bytes) {
  const std::string run = "run at " + std::to_string(start) + " + " + std::to_string(bytes);
  if (start % kArenaAlign != 0 || bytes % kArenaAlign != 0 || bytes == 0 || bytes > capacity_)
    return corrupt(run + " is not a run of an arena of " + std::to_string(capacity_) + " bytes");
  const uint64_t offset = start % capacity_;
  const bool in_order = start == end_ || (offset == 0 && start > end_ && start - end_ < capacity_);
  if (!in_order)
    return corrupt(run + " is out of ring order (the last run ended at " + std::to_string(end_) +
                   ")");
  if (offset + bytes > capacity_) return corrupt(run + " crosses the end of the ring");
  if (!runs_.empty() && start + bytes > runs_.front().start + capacity_)
    return corrupt(run + " overwrites the run at " + std::to_string(runs_.front().start) +
                   ", which is still in use");
  runs_.push_back(Run{start, start + bytes, false});
  end_ = start + bytes;
  held_ += bytes;
  return Status::ok();
}

uint64_t ArenaReleases::release(uint64_t start) {
  auto it = std::lower_bound(runs_.begin(), runs_.end(), start,
                             [](const Run& r, uint64_t s) { return r.start < s; });
  if (it != runs_.end() && it->start == start && !it->free) {
    it->free = true;
    held_ -= it->end - it->start;
  }
  while (!runs_.empty() && runs_.front().free) runs_.pop_front();
  return released();
}

namespace {
uint64_t round_capacity(uint64_t capacity) {
  return (capacity + kArenaHeaderBytes - 1) / kArenaHeaderBytes * kArenaHeaderBytes;
}
}  // namespace

Result<std::shared_ptr<ShmArena>> ShmArena::create(uint64_t capacity,
                                                   const SegmentOptions& options) {
  if (capacity < kArenaHeaderBytes)
    return invalid_argument(options.what + ": an arena of " + std::to_string(capacity) +
                            " bytes is too small (at least 4 KiB)");
  capacity = round_capacity(capacity);
  SY_ASSIGN_OR_RETURN(ShmSegment segment,
                      ShmSegment::create(kArenaHeaderBytes + capacity, options));
  std::shared_ptr<ShmArena> a(new ShmArena(std::move(segment), capacity));
  SY_ASSIGN_OR_RETURN(a->header_map_,
                      a->segment_.map(ShmSegment::Access::kReadWrite, 0, kArenaHeaderBytes));
  // The ring's pages are mapped at their first touch, on both sides: the producer's first
  // write to a page maps it there, a read fault here maps the pages around it that the
  // producer wrote (fault-around). Mapping them all up front (MAP_POPULATE) cost a run of
  // two workers some 60 ms of the loader's CPU before its first item, most of it for pages
  // a short run never fills.
  SY_ASSIGN_OR_RETURN(a->ring_,
                      a->segment_.map(ShmSegment::Access::kReadOnly, kArenaHeaderBytes, 0));
  a->header_ = new (a->header_map_->writable_data()) ArenaHeader{};
  a->header_->magic = kArenaMagic;
  a->header_->version = kArenaVersion;
  a->header_->capacity = capacity;
  return a;
}

Result<std::shared_ptr<ShmArena>> ShmArena::attach(UniqueFd fd, uint64_t capacity,
                                                   const std::string& what) {
  SY_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::adopt(std::move(fd), what));
  if (capacity == 0 || capacity % kArenaHeaderBytes != 0 ||
      segment.size() != kArenaHeaderBytes + capacity)
    return corrupt(what + ": a segment of " + std::to_string(segment.size()) +
                   " bytes cannot hold an arena of " + std::to_string(capacity));
  std::shared_ptr<ShmArena> a(new ShmArena(std::move(segment), capacity));
  SY_ASSIGN_OR_RETURN(a->header_map_,
                      a->segment_.map(ShmSegment::Access::kReadWrite, 0, kArenaHeaderBytes));
  SY_ASSIGN_OR_RETURN(a->ring_,
                      a->segment_.map(ShmSegment::Access::kReadWrite, kArenaHeaderBytes, 0));
  a->header_ = std::launder(reinterpret_cast<ArenaHeader*>(a->header_map_->writable_data()));
  if (a->header_->magic != kArenaMagic || a->header_->version != kArenaVersion ||
      a->header_->capacity != capacity)
    return corrupt(what +
                   ": the segment received is not an arena of this build (magic, "
                   "version or capacity differ)");
  return a;
}

void ShmArena::map_ahead(uint64_t end) {
  uint64_t mapped = mapped_.load(std::memory_order_relaxed);
  if (end <= mapped || ring_->writable_data() == nullptr) return;
  constexpr uint64_t kStep = 1 << 20;
  const uint64_t to = std::min(capacity_, (end + kStep - 1) / kStep * kStep);
  // One caller maps a stretch; another one that gets here meanwhile faults its own pages.
  if (!mapped_.compare_exchange_strong(mapped, to, std::memory_order_relaxed)) return;
#ifdef MADV_POPULATE_WRITE
  (void)::madvise(ring_->writable_data() + mapped, to - mapped, MADV_POPULATE_WRITE);
#endif
}

Result<std::shared_ptr<ShmArena>> ArenaPool::take(uint64_t capacity,
                                                  const SegmentOptions& options) {
  {
    MutexLock lock(&mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->capacity() != round_capacity(capacity)) continue;
      std::shared_ptr<ShmArena> arena = std::move(*it);
      idle_.erase(it);
      ++reused_;
      ArenaHeader& h = arena->header();
      h.released.store(0);
      h.popped.store(0);
      h.cancelled.store(0);
      h.sent.store(0);
      h.producer_waiting.store(0);
      h.producer_spans.store(0);
      for (auto& d : h.span_drops) d.store(0);
      return arena;
    }
  }
  return ShmArena::create(capacity, options);
}

void ArenaPool::give_back(std::shared_ptr<ShmArena> arena) {
  MutexLock lock(&mu_);
  if (idle_.size() < keep_) idle_.push_back(std::move(arena));
}

size_t ArenaPool::idle() const {
  MutexLock lock(&mu_);
  return idle_.size();
}

uint64_t ArenaPool::reused() const {
  MutexLock lock(&mu_);
  return reused_;
}

Result<std::shared_ptr<ShmArena>> AttachedArenas::attach(UniqueFd fd, uint64_t capacity,
                                                         const std::string& what) {
  return recent_.get(
      std::move(fd), [capacity](const ShmArena& a, uint64_t) { return a.capacity() == capacity; },
      [&](UniqueFd f) { return ShmArena::attach(std::move(f), capacity, what); });
}

std::shared_ptr<ArenaChunks> ArenaChunks::create(std::shared_ptr<ShmArena> arena) {
  return std::shared_ptr<ArenaChunks>(new ArenaChunks(std::move(arena)));
}

ArenaChunks::ArenaChunks(std::shared_ptr<ShmArena> arena)
    : arena_(std::move(arena)),
      ring_(arena_->capacity()),
      base_(kArenaSpanSlots, 0),
      named_(kArenaSpanSlots, 0) {
  free_slots_.reserve(kArenaSpanSlots);
  for (uint32_t slot = kArenaSpanSlots; slot > 0; --slot) free_slots_.push_back(slot - 1);
}

uint8_t* ArenaChunks::allocate(size_t bytes, std::shared_ptr<const void>* owner) {
  uint8_t* ring = arena_->writable_ring();
  // A chunk over a quarter of the ring would keep too much of it from the next ones.
  if (ring == nullptr || bytes == 0 || bytes > arena_->capacity() / 4) return nullptr;
  ArenaRing::Span span;
  uint32_t slot;
  {
    MutexLock lock(&mu_);
    reclaim();
    if (free_slots_.empty()) return nullptr;
    const uint64_t released = spans_.empty() ? ring_.head() : spans_.front().start;
    auto placed = ring_.allocate(bytes, released, &span);
    if (!placed.is_ok() || !*placed) return nullptr;
    slot = free_slots_.back();
    free_slots_.pop_back();
    base_[slot] = arena_->header().span_drops[slot].load(std::memory_order_acquire);
    named_[slot] = 0;
    spans_.push_back(Span{span.start, span.bytes, slot, false});
  }
  arena_->header().producer_spans.fetch_add(1);
  arena_->map_ahead(span.offset + span.bytes);
  uint8_t* data = ring + span.offset;
  *owner =
      arena_bytes_owner(ArenaBytes{id(), data, bytes, span.offset, slot},
                        [self = shared_from_this(), start = span.start] { self->retire(start); });
  return data;
}

void ArenaChunks::named(const std::vector<uint32_t>& slots) {
  MutexLock lock(&mu_);
  for (uint32_t slot : slots)
    if (slot < kArenaSpanSlots) ++named_[slot];
}

size_t ArenaChunks::spans() {
  MutexLock lock(&mu_);
  reclaim();
  return spans_.size();
}

void ArenaChunks::retire(uint64_t start) {
  {
    MutexLock lock(&mu_);
    auto it = std::lower_bound(spans_.begin(), spans_.end(), start,
                               [](const Span& s, uint64_t v) { return s.start < v; });
    if (it == spans_.end() || it->start != start || it->retired) return;
    it->retired = true;
    reclaim();
  }
  arena_->header().producer_spans.fetch_sub(1);
}

void ArenaChunks::reclaim() {
  const ArenaHeader& h = arena_->header();
  while (!spans_.empty()) {
    const Span& front = spans_.front();
    if (!front.retired) return;
    // The consumer's count only grows; it has dropped every run naming the span once it
    // counted as many as were sent.
    const uint64_t dropped = h.span_drops[front.slot].load(std::memory_order_acquire);
    if (dropped - base_[front.slot] < named_[front.slot]) return;
    free_slots_.push_back(front.slot);
    spans_.pop_front();
  }
}

}  // namespace shardyard::io
