// Tests of runtime/sample_table.h: the packed table holds exactly what was pushed, whatever
// the keys and ranges, and tiny consecutive samples cost a few bytes each.
#include "runtime/sample_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace shardyard {
namespace {

void expect_same(const SampleEntry& a, const SampleEntry& b, size_t i) {
  EXPECT_EQ(a.key, b.key) << i;
  EXPECT_EQ(a.begin, b.begin) << i;
  EXPECT_EQ(a.end, b.end) << i;
  EXPECT_EQ(a.payload_bytes, b.payload_bytes) << i;
}

void expect_holds(const SampleTable& t, const std::vector<SampleEntry>& want) {
  ASSERT_EQ(t.size(), want.size());
  EXPECT_EQ(t.empty(), want.empty());
  size_t i = 0;
  for (const auto& e : t) {
    ASSERT_LT(i, want.size());
    expect_same(e, want[i], i);
    ++i;
  }
  EXPECT_EQ(i, want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    expect_same(t[k], want[k], k);
    auto it = t.iterator_at(k);
    EXPECT_EQ(it.index(), k);
    for (size_t j = k; j < std::min(want.size(), k + 2 * SampleTable::kBlock); ++j, ++it)
      expect_same(*it, want[j], j);
  }
  EXPECT_TRUE(t.iterator_at(want.size()) == t.end());
  // Runs' byte ranges: within a block, across one or two boundaries, and to the end.
  for (size_t first = 0; first < want.size(); ++first)
    for (size_t last = first + 1; last <= want.size(); ++last) {
      if (last > first + 3 * SampleTable::kBlock && last != want.size()) continue;
      const auto r = t.byte_range(first, last);
      EXPECT_EQ(r.begin, want[first].begin) << first << ".." << last;
      EXPECT_EQ(r.end, want[last - 1].end) << first << ".." << last;
    }
  // An empty run, or one past the end, is an empty range, not a read out of bounds.
  for (size_t first : {size_t{0}, want.size(), want.size() + 1}) {
    const auto r = t.byte_range(first, first);
    EXPECT_EQ(r.begin, 0u);
    EXPECT_EQ(r.end, 0u);
  }
  EXPECT_EQ(t.byte_range(0, want.size() + 1).end, 0u);
  // The totals kept as entries come are those of a walk over them.
  SampleTable::Totals sums;
  for (const auto& e : want) {
    const uint64_t r = e.end - e.begin;
    sums.payload_bytes += e.payload_bytes;
    sums.range += r;
    sums.held += std::max(r, e.payload_bytes);
    sums.max_range = std::max(sums.max_range, r);
    sums.max_payload = std::max(sums.max_payload, e.payload_bytes);
  }
  EXPECT_EQ(t.totals().payload_bytes, sums.payload_bytes);
  EXPECT_EQ(t.totals().range, sums.range);
  EXPECT_EQ(t.totals().held, sums.held);
  EXPECT_EQ(t.totals().max_range, sums.max_range);
  EXPECT_EQ(t.totals().max_payload, sums.max_payload);
  // And a table decoded from the stream holds the same entries and totals.
  SampleTable back;
  ASSERT_TRUE(SampleTable::decode(t.encoded(), t.size(), nullptr, &back));
  EXPECT_EQ(back.encoded(), t.encoded());
  EXPECT_EQ(back.totals().held, sums.held);
  EXPECT_EQ(back.totals().max_range, sums.max_range);
  EXPECT_EQ(back.totals().max_payload, sums.max_payload);
}

std::vector<SampleEntry> tar_like(size_t n) {
  std::vector<SampleEntry> out;
  uint64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "s0003_%08zu", i);
    out.push_back({key, at, at + 1024, 8});
    at += 1024;
  }
  return out;
}

TEST(SampleTable, HoldsConsecutiveTarSamples) {
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 33u, 1000u})
    expect_holds(SampleTable(tar_like(n)), tar_like(n));
}

// Keys of any length and content (shared prefixes, none, empty, longer and shorter than the
// one before) and ranges anywhere in u64, backwards and overlapping ones included: the
// table stores what it is given, it does not judge it.
TEST(SampleTable, RoundTripsArbitraryEntries) {
  std::mt19937_64 rng(7);
  const uint64_t specials[] = {0, 1, 127, 128, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63};
  for (int round = 0; round < 20; ++round) {
    std::vector<SampleEntry> want;
    const size_t n = rng() % 200;
    for (size_t i = 0; i < n; ++i) {
      SampleEntry e;
      const size_t len = rng() % 40;
      if (!want.empty() && rng() % 2)
        e.key = want.back().key.substr(0, rng() % (want.back().key.size() + 1));
      while (e.key.size() < len) e.key.push_back(static_cast<char>(rng() % 256));
      auto value = [&] { return rng() % 3 ? rng() >> (rng() % 64) : specials[rng() % 7]; };
      e.begin = value();
      e.end = value();
      e.payload_bytes = value();
      want.push_back(e);
    }
    SampleTable t;
    for (const auto& e : want) t.push_back(e);
    expect_holds(t, want);
  }
}

TEST(SampleTable, PopBackUndoesPushBack) {
  auto want = tar_like(40);
  SampleTable t(want);
  while (!want.empty()) {
    t.pop_back();
    want.pop_back();
    expect_holds(t, want);
  }
  // Pushing after pops codes against the right neighbour.
  auto again = tar_like(20);
  for (const auto& e : again) t.push_back(e);
  t.pop_back();
  t.pop_back();
  t.push_back(again[18]);
  t.push_back(again[19]);
  expect_holds(t, again);
}

TEST(SampleTable, AssignsFromListsAndVectors) {
  SampleTable t = {{"a", 0, 2048, 900}, {"b", 2048, 4096, 1200}};
  expect_holds(t, {{"a", 0, 2048, 900}, {"b", 2048, 4096, 1200}});
  t = {{"x", 5, 6, 7}};
  expect_holds(t, {{"x", 5, 6, 7}});
  EXPECT_EQ(t.back().key, "x");
  t.clear();
  expect_holds(t, {});
  auto v = tar_like(50);
  EXPECT_EQ(SampleTable(v).to_vector().size(), 50u);
}

// Check::kBounds, for bytes something vouches for: keys are skipped on the walk, yet the
// table reads, sums and grows exactly as one decoded with every check.
TEST(SampleTable, ABoundsOnlyDecodeReadsTheSame) {
  std::mt19937_64 rng(11);
  std::vector<std::vector<SampleEntry>> tables;
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 33u}) tables.push_back(tar_like(n));
  for (int round = 0; round < 5; ++round) {
    std::vector<SampleEntry> want;
    for (size_t i = 0, n = rng() % 60; i < n; ++i) {
      SampleEntry e;
      if (!want.empty() && rng() % 2) e.key = want.back().key.substr(0, rng() % 8);
      while (e.key.size() < rng() % 20) e.key.push_back(static_cast<char>('a' + rng() % 3));
      e.begin = rng() >> (rng() % 64);
      e.end = rng() >> (rng() % 64);
      e.payload_bytes = rng() % 5000;
      want.push_back(e);
    }
    tables.push_back(want);
  }
  for (const auto& want : tables) {
    const SampleTable t(want);
    SampleTable back;
    ASSERT_TRUE(
        SampleTable::decode(t.encoded(), t.size(), nullptr, &back, SampleTable::Check::kBounds));
    expect_holds(back, want);
    EXPECT_EQ(back.encoded(), t.encoded());
    // The next entry is coded against the last key, which the walk did not rebuild.
    SampleTable grown(want);
    for (const auto& e : tar_like(3)) {
      back.push_back(e);
      grown.push_back(e);
    }
    EXPECT_EQ(back.encoded(), grown.encoded()) << want.size() << " entries";
  }
}

// Two entries "ab" then "ac" (ranges of 10 bytes, payload 5), the second coded with no
// shared prefix: a walk of bounds only takes it, the canonical one refuses it, and an entry
// cut short or a key running past the end is refused by both.
TEST(SampleTable, OnlyTheCanonicalDecodeRefusesAnotherCodingOfTheSameEntries) {
  const std::string canonical{0, 2, 'a', 'b', 0, 20, 5, 1, 1, 'c', 0, 20, 5};
  const std::string other{0, 2, 'a', 'b', 0, 20, 5, 0, 2, 'a', 'c', 0, 20, 5};
  const auto canon = SampleTable::Check::kCanonical, bounds = SampleTable::Check::kBounds;
  SampleTable t;
  ASSERT_TRUE(SampleTable::decode(canonical, 2, nullptr, &t, canon));
  expect_holds(t, {{"ab", 0, 10, 5}, {"ac", 10, 20, 5}});
  EXPECT_FALSE(SampleTable::decode(other, 2, nullptr, &t, canon));
  EXPECT_TRUE(t.empty());
  ASSERT_TRUE(SampleTable::decode(other, 2, nullptr, &t, bounds));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].key, "ac");
  EXPECT_EQ(t[1].begin, 10u);
  EXPECT_EQ(t.byte_range(0, 2).end, 20u);
  EXPECT_EQ(t.totals().payload_bytes, 10u);
  for (auto check : {canon, bounds}) {
    EXPECT_FALSE(SampleTable::decode(canonical.substr(0, 12), 2, nullptr, &t, check));
    std::string long_key = canonical;
    long_key[8] = 9;  // the second key's rest: 9 bytes, where 5 are left
    EXPECT_FALSE(SampleTable::decode(long_key, 2, nullptr, &t, check));
    EXPECT_FALSE(SampleTable::decode(canonical, 3, nullptr, &t, check)) << "a third entry";
    EXPECT_FALSE(SampleTable::decode(canonical + '\0', 2, nullptr, &t, check)) << "a byte after";
  }
}

// The point of the table: a million tiny samples of a tar shard cost a few MB, not 56 MB.
TEST(SampleTable, TinySamplesCostFewBytes) {
  SampleTable t;
  uint64_t at = 0;
  char key[32];
  for (size_t i = 0; i < 1000000; ++i) {
    std::snprintf(key, sizeof key, "s0003_%08zu", i);
    t.push_back({key, at, at + 1024, 8});
    at += 1024;
  }
  t.shrink_to_fit();
  EXPECT_LE(t.memory_bytes(), 10u * 1000000) << "bytes per sample: " << t.memory_bytes() / 1e6;
  EXPECT_EQ(t[999999].begin, 999999u * 1024);
  EXPECT_EQ(t[999999].key, "s0003_00999999");
}

}  // namespace
}  // namespace shardyard
