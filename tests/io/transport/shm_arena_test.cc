// Tests of io/transport/shm_arena.h: the producer's ring and the consumer's releases, alone
// and together against a model of which bytes are in use; and the shared header.
#include "io/transport/shm_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "io/transport/item_codec.h"
#include "process_util.h"

namespace shardyard::io {
namespace {

constexpr uint64_t kCap = 4096;

ArenaRing::Span place(ArenaRing& ring, uint64_t bytes, uint64_t released) {
  ArenaRing::Span s;
  auto r = ring.allocate(bytes, released, &s);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r.is_ok() && *r) << "a run of " << bytes << " should fit";
  return s;
}

TEST(ArenaRing, PlacesRunsInRingOrderAlignedAndWaitsWhenFull) {
  ArenaRing ring(kCap);
  auto a = place(ring, 1000, 0);
  EXPECT_EQ(a.start, 0u);
  EXPECT_EQ(a.bytes, 1024u) << "64-byte aligned";
  auto b = place(ring, 2000, 0);
  EXPECT_EQ(b.start, 1024u);
  ArenaRing::Span s;
  EXPECT_FALSE(*ring.allocate(1500, 0, &s)) << "only 1024 bytes are left";
  EXPECT_EQ(ring.head(), 3072u) << "a refused run takes nothing";
  EXPECT_FALSE(*ring.allocate(1500, 1024, &s))
      << "1024 bytes are freed, but a run may not cross the ring's end, and from the start "
         "1536 bytes would reach the held run";
  auto c = place(ring, 1000, 1024);
  EXPECT_EQ(c.start, 3072u) << "the end of the ring is free";
  auto d = place(ring, 64, 1024);
  EXPECT_EQ(d.offset, 0u) << "and so is its start, freed by the first run";
  EXPECT_FALSE(*ring.allocate(1000, 1024, &s)) << "the second run is still held";
}

TEST(ArenaRing, ARunThatWouldCrossTheEndStartsAtTheRingsStart) {
  ArenaRing ring(kCap);
  place(ring, 3008, 0);
  place(ring, 64, 0);  // 3008..3072, held
  auto s = place(ring, 2000, 3008);
  EXPECT_EQ(s.start, 4096u) << "1024 bytes at the end are skipped";
  EXPECT_EQ(s.offset, 0u);
  EXPECT_EQ(ring.head(), 6144u);
}

TEST(ArenaRing, AnEmptyRingTakesAnyRunUpToItsCapacity) {
  ArenaRing ring(kCap);
  place(ring, 3008, 0);                // head at 3008
  auto big = place(ring, 4096, 3008);  // all freed: the whole ring is free
  EXPECT_EQ(big.start, 4096u);
  EXPECT_EQ(big.offset, 0u);
  ArenaRing::Span s;
  EXPECT_EQ(ring.allocate(4097, 8192, &s).status().code(), StatusCode::kInternal);
}

TEST(ArenaRing, RefusesAReleasedPositionItCannotHaveReached) {
  ArenaRing ring(kCap);
  place(ring, 1024, 0);
  ArenaRing::Span s;
  EXPECT_EQ(ring.allocate(64, 2048, &s).status().code(), StatusCode::kCorrupt) << "past head";
  ASSERT_TRUE(ring.allocate(64, 1024, &s).is_ok());
  Status back = ring.allocate(64, 0, &s).status();
  EXPECT_EQ(back.code(), StatusCode::kCorrupt) << "going back";
  EXPECT_NE(back.message().find("saw 1024 before"), std::string::npos) << back.message();
  EXPECT_EQ(ring.allocate(64, 1000, &s).status().code(), StatusCode::kCorrupt) << "unaligned";
}

TEST(ArenaReleases, FreesInAnyOrderAndReleasesInRingOrder) {
  ArenaReleases r(kCap);
  ASSERT_TRUE(r.add(0, 1024).is_ok());
  ASSERT_TRUE(r.add(1024, 1024).is_ok());
  ASSERT_TRUE(r.add(2048, 1024).is_ok());
  EXPECT_EQ(r.held_bytes(), 3072u);
  EXPECT_EQ(r.release(2048), 0u) << "the first run still holds the ring";
  EXPECT_EQ(r.release(1024), 0u);
  EXPECT_EQ(r.held_runs(), 3u);
  EXPECT_EQ(r.release(0), 3072u) << "now everything up to the last run's end";
  EXPECT_EQ(r.held_runs(), 0u);
  EXPECT_EQ(r.held_bytes(), 0u);
  EXPECT_EQ(r.release(0), 3072u) << "a second release of a run changes nothing";
  // The next run skips the ring's end.
  ASSERT_TRUE(r.add(4096, 2048).is_ok());
  EXPECT_EQ(r.released(), 4096u);
}

TEST(ArenaReleases, RefusesRunsOutOfOrderOutOfTheRingOrOverHeldBytes) {
  ArenaReleases r(kCap);
  ASSERT_TRUE(r.add(0, 2048).is_ok());
  EXPECT_NE(r.add(3072, 64).message().find("out of ring order"), std::string::npos)
      << "a gap that is not a skip of the ring's end";
  EXPECT_NE(r.add(4096, 64).message().find("still in use"), std::string::npos)
      << "a skip of the ring's end onto the held run";
  EXPECT_NE(r.add(2048 + 64, 64).message().find("out of ring order"), std::string::npos);
  EXPECT_NE(r.add(2048, 100).message().find("is not a run"), std::string::npos);
  EXPECT_NE(r.add(2048, 8192).message().find("is not a run"), std::string::npos);
  ASSERT_TRUE(r.add(2048, 2048).is_ok());
  EXPECT_NE(r.add(4096, 64).message().find("still in use"), std::string::npos);
  r.release(0);
  EXPECT_TRUE(r.add(4096, 2048).is_ok());
  ArenaReleases cross(kCap);
  ASSERT_TRUE(cross.add(0, 3072).is_ok());
  EXPECT_NE(cross.add(3072, 2048).message().find("crosses the end"), std::string::npos);
}

// The producer's ring and the consumer's releases together, with releases in random order
// and a model of every byte in use: no run is ever placed over a byte still held, and the
// consumer accepts every run the producer places.
TEST(ArenaRingAndReleases, NeverOverwriteAHeldByteWhateverTheReleaseOrder) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const uint64_t cap = 64 * (16 + rng() % 200);
    ArenaRing ring(cap);
    ArenaReleases rel(cap);
    std::vector<int> owner(cap, -1);  // which run holds each byte
    std::vector<ArenaRing::Span> held;
    uint64_t released = 0, placed = 0;
    for (int step = 0; step < 3000; ++step) {
      if (!held.empty() && (rng() % 2 == 0 || held.size() > 40)) {
        const size_t i = rng() % held.size();
        for (uint64_t b = 0; b < held[i].bytes; ++b) owner[held[i].offset + b] = -1;
        released = rel.release(held[i].start);
        held.erase(held.begin() + i);
        continue;
      }
      const uint64_t want = 1 + rng() % (cap / (1 + rng() % 4));
      ArenaRing::Span s;
      auto ok = ring.allocate(want, released, &s);
      ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
      if (!*ok) continue;
      ASSERT_TRUE(rel.add(s.start, s.bytes).is_ok()) << "seed " << seed << " step " << step;
      for (uint64_t b = 0; b < s.bytes; ++b) {
        ASSERT_EQ(owner[s.offset + b], -1) << "byte " << s.offset + b << " is still held";
        owner[s.offset + b] = step;
      }
      held.push_back(s);
      ++placed;
    }
    EXPECT_GT(placed, 500u);
    EXPECT_GT(ring.head(), 10 * cap) << "the ring went round many times";
  }
}

TEST(ShmArena, TheConsumerCreatesItAndTheProducerAttachesItsDescriptor) {
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  auto consumer = ShmArena::create(100000, o);
  ASSERT_TRUE(consumer.is_ok()) << consumer.status().to_string();
  EXPECT_EQ((*consumer)->capacity(), 102400u) << "whole pages";
  EXPECT_EQ((*consumer)->writable_ring(), nullptr) << "the consumer reads the ring only";
  auto producer = ShmArena::attach((*consumer)->segment().duplicate().value(), 102400, "arena");
  ASSERT_TRUE(producer.is_ok()) << producer.status().to_string();
  (*producer)->writable_ring()[5] = 9;
  EXPECT_EQ((*consumer)->ring()[5], 9);
  (*consumer)->header().released.store(4096);
  EXPECT_EQ((*producer)->header().released.load(), 4096u);
  EXPECT_EQ(
      ShmArena::attach((*consumer)->segment().duplicate().value(), 4096, "arena").status().code(),
      StatusCode::kCorrupt)
      << "another capacity";
  auto plain = ShmSegment::create(8192, o);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_NE(ShmArena::attach(plain->duplicate().value(), 4096, "arena")
                .status()
                .message()
                .find("not an arena"),
            std::string::npos);
}

// Bytes of the mapping that starts at `at` present in this process's page tables (the
// Rss line of /proc/self/smaps), or -1 when no mapping starts there.
int64_t mapped_bytes(const void* at) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long start = 0;
    if (line.find('-') != std::string::npos && std::sscanf(line.c_str(), "%lx-", &start) == 1 &&
        line.find(' ') > line.find('-')) {
      in = start == reinterpret_cast<uintptr_t>(at);
      continue;
    }
    if (in && line.rfind("Rss:", 0) == 0) {
      std::istringstream kb(line.substr(4));
      int64_t n = 0;
      kb >> n;
      return n * 1024;
    }
  }
  return -1;
}

TEST(ShmArena, TheProducerMapsTheRingAheadAMebibyteAtATimeOnItsFirstRound) {
  {
    // A kernel before 5.14 has no MADV_POPULATE_WRITE: map_ahead() leaves the pages to fault.
    void* probe = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const int rc = ::madvise(probe, 4096, MADV_POPULATE_WRITE);
    const int err = errno;
    ::munmap(probe, 4096);
    if (rc != 0 && err == EINVAL) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE";
  }
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  const uint64_t cap = (3u << 20) + 8192;
  auto consumer = ShmArena::create(cap, o);
  ASSERT_TRUE(consumer.is_ok()) << consumer.status().to_string();
  auto producer = ShmArena::attach((*consumer)->segment().duplicate().value(), cap, "arena");
  ASSERT_TRUE(producer.is_ok()) << producer.status().to_string();
  ShmArena& p = **producer;
  const uint8_t* ring = p.writable_ring();
  ASSERT_EQ(mapped_bytes(ring), 0) << "nothing is mapped before the first run";
  p.map_ahead(100);
  EXPECT_EQ(mapped_bytes(ring), 1 << 20) << "the first MiB";
  p.map_ahead(1 << 20);
  EXPECT_EQ(mapped_bytes(ring), 1 << 20) << "a run that ends inside it maps nothing more";
  p.map_ahead((1 << 20) + 1);
  EXPECT_EQ(mapped_bytes(ring), 2 << 20);
  p.map_ahead(cap);
  EXPECT_EQ(mapped_bytes(ring), static_cast<int64_t>(cap)) << "the ring's end, not the next MiB";
  p.map_ahead(100);  // the next round: already mapped
  EXPECT_EQ(mapped_bytes(ring), static_cast<int64_t>(cap));
  // Mapped pages are the segment's: what the producer writes there, the consumer reads.
  p.writable_ring()[cap - 1] = 7;
  EXPECT_EQ((*consumer)->ring()[cap - 1], 7);
  // The consumer maps nothing for writing.
  (*consumer)->map_ahead(cap);
  EXPECT_EQ((*consumer)->writable_ring(), nullptr);
}

TEST(ArenaPool, TakesAnIdleArenaOfTheSameCapacityWithItsCountersReset) {
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  ArenaPool pool(2);
  auto first = pool.take(100000, o);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ShmArena* const kept = first->get();
  ArenaHeader& h = (*first)->header();
  h.released.store(8192);
  h.popped.store(3);
  h.cancelled.store(1);
  h.sent.store(5);
  h.producer_waiting.store(1);
  pool.give_back(std::move(*first));
  EXPECT_EQ(pool.idle(), 1u);
  auto other = pool.take(200000, o);
  ASSERT_TRUE(other.is_ok());
  EXPECT_NE(other->get(), kept) << "another capacity is a new arena";
  EXPECT_EQ(pool.idle(), 1u);
  auto again = pool.take(102000, o);  // rounds to the same whole pages
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->get(), kept);
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_EQ(pool.reused(), 1u);
  ArenaHeader& r = (*again)->header();
  EXPECT_EQ(r.released.load(), 0u);
  EXPECT_EQ(r.popped.load(), 0u);
  EXPECT_EQ(r.cancelled.load(), 0u);
  EXPECT_EQ(r.sent.load(), 0u);
  EXPECT_EQ(r.producer_waiting.load(), 0u);
}

TEST(ArenaPool, KeepsAtMostItsNumberOfArenas) {
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  ArenaPool pool(2);
  std::vector<std::shared_ptr<ShmArena>> taken;
  for (int i = 0; i < 3; ++i) taken.push_back(pool.take(8192, o).value());
  for (auto& a : taken) pool.give_back(std::move(a));
  EXPECT_EQ(pool.idle(), 2u) << "the third is freed";
}

TEST(AttachedArenas, TheSameSegmentAttachesOnceAnotherOneAnewAndTheLeastRecentlyUsedLeaves) {
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  std::vector<std::shared_ptr<ShmArena>> made;
  for (int i = 0; i < 3; ++i) made.push_back(ShmArena::create(8192, o).value());
  AttachedArenas attached(2);
  auto attach = [&](int i) {
    auto a = attached.attach(made[i]->segment().duplicate().value(), 8192, "arena");
    EXPECT_TRUE(a.is_ok()) << a.status().to_string();
    return a.is_ok() ? *a : nullptr;
  };
  auto a0 = attach(0);
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ(attach(0), a0) << "the same segment sent again";
  a0->writable_ring()[7] = 42;
  EXPECT_EQ(made[0]->ring()[7], 42) << "and it is that segment's mapping";
  auto a1 = attach(1);
  EXPECT_NE(a1, a0);
  EXPECT_EQ(attach(0), a0) << "arena 0 is now the one used last";
  attach(2);  // pushes out the one used least recently: arena 1
  EXPECT_EQ(attach(0), a0);
  EXPECT_NE(attach(1), a1) << "attached anew once pushed out";
  EXPECT_EQ(attached.attach(made[1]->segment().duplicate().value(), 4096, "arena").status().code(),
            StatusCode::kCorrupt)
      << "another capacity is no hit, and attach() refuses it";
}

// The producer's data arena: chunks in ring order, each free once the producer dropped it
// and the consumer counted every run naming it as dropped; no room is nullptr, never a wait.
TEST(ArenaChunks, ASpanIsFreeOnceBothSidesDroppedItAndAFullRingRefuses) {
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  auto consumer = ShmArena::create(64 << 10, o).value();
  auto chunks = ArenaChunks::create(
      ShmArena::attach(consumer->segment().duplicate().value(), 64 << 10, "data").value());
  ArenaHeader& h = consumer->header();
  std::shared_ptr<const void> a, b, c;
  uint8_t* pa = chunks->allocate(10000, &a);
  ASSERT_NE(pa, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pa) % kArenaAlign, 0u);
  const ArenaBytes* at = arena_bytes_of(a);
  ASSERT_NE(at, nullptr) << "the owner says where the chunk lies";
  EXPECT_EQ(at->arena, chunks->id());
  EXPECT_EQ(at->data, pa);
  EXPECT_EQ(at->size, 10000u);
  std::memset(pa, 7, 10000);
  EXPECT_EQ(consumer->ring()[at->offset + 9999], 7) << "the consumer sees the bytes in place";
  EXPECT_EQ(chunks->allocate(16385, &c), nullptr) << "over a quarter of the ring";
  EXPECT_EQ(c, nullptr);
  ASSERT_NE(chunks->allocate(16000, &b), nullptr);
  EXPECT_EQ(h.producer_spans.load(), 2u);
  const uint32_t slot_a = at->slot;
  chunks->named({slot_a});
  chunks->named({slot_a});  // two runs name chunk a
  a.reset();
  EXPECT_EQ(h.producer_spans.load(), 1u);
  EXPECT_EQ(chunks->spans(), 2u) << "the consumer still holds both runs naming a";
  // Fill the ring: 10240 + 16000 used; two chunks of 16000 fit, the third waits for a.
  std::shared_ptr<const void> d, e, f;
  ASSERT_NE(chunks->allocate(16000, &d), nullptr);
  ASSERT_NE(chunks->allocate(16000, &e), nullptr);
  EXPECT_EQ(chunks->allocate(16000, &f), nullptr) << "a is still held by the consumer";
  h.span_drops[slot_a].fetch_add(1);
  EXPECT_EQ(chunks->allocate(16000, &f), nullptr) << "one run naming a is still held";
  h.span_drops[slot_a].fetch_add(1);
  EXPECT_NE(chunks->allocate(8000, &f), nullptr) << "a is free: its room comes round again";
  EXPECT_EQ(chunks->spans(), 4u);
  b.reset();
  d.reset();
  e.reset();
  f.reset();
  EXPECT_EQ(chunks->spans(), 0u) << "chunks no run named are free once dropped";
  EXPECT_EQ(h.producer_spans.load(), 0u);
}

TEST(ArenaChunks, EverySlotInUseRefusesTheNextChunk) {
  SegmentOptions o;
  o.dir = testing::test_shm_dir();
  auto consumer = ShmArena::create(4 << 20, o).value();
  auto chunks = ArenaChunks::create(
      ShmArena::attach(consumer->segment().duplicate().value(), 4 << 20, "data").value());
  std::vector<std::shared_ptr<const void>> held(kArenaSpanSlots);
  for (auto& owner : held) ASSERT_NE(chunks->allocate(64, &owner), nullptr);
  std::shared_ptr<const void> more;
  EXPECT_EQ(chunks->allocate(64, &more), nullptr) << "no slot left for its count";
  held.front().reset();
  EXPECT_NE(chunks->allocate(64, &more), nullptr) << "the first slot is free again";
}

}  // namespace
}  // namespace shardyard::io
