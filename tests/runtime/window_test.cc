// Tests of runtime/window.h and of windows datasets in runtime/manifest.h and shard.h: the
// window math against a brute-force enumeration, keys, the parser, implicit items, the
// fingerprint and the one-shard-per-source default.
#include "runtime/window.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "runtime/manifest.h"
#include "runtime/shard.h"

namespace shardyard {
namespace {

WindowSpec spec_of(uint64_t length, uint64_t stride, uint64_t target, bool stitch,
                   uint64_t record_bytes = 4) {
  return make_window_spec(length, stride, target, stitch, record_bytes);
}

// The contract, written as plainly as possible: every start k * stride below `records`,
// kept when its span fits in this source (or, with stitch, in this source plus the next).
std::vector<uint64_t> brute_force_starts(const WindowSpec& s, uint64_t records, uint64_t next) {
  std::vector<uint64_t> out;
  const uint64_t limit = s.stitch ? records + next : records;
  for (uint64_t start = 0; start < records; start += s.stride)
    if (start + s.length + s.target <= limit) out.push_back(start);
  return out;
}

TEST(WindowMath, CountAndStartsMatchBruteForceEnumeration) {
  size_t cases = 0;
  for (uint64_t records = 0; records <= 23; ++records)
    for (uint64_t next : {0u, 1u, 2u, 5u, 17u})
      for (uint64_t length = 1; length <= 9; ++length)
        for (uint64_t stride = 1; stride <= 7; ++stride)
          for (uint64_t target : {0u, 1u, 3u})
            for (bool stitch : {false, true}) {
              const auto s = spec_of(length, stride, target, stitch);
              const auto want = brute_force_starts(s, records, next);
              const uint64_t n = window_count(s, records, next);
              ASSERT_EQ(n, want.size())
                  << "records " << records << " next " << next << " " << length << ":" << stride
                  << ":" << target << (stitch ? " stitch" : "");
              for (uint64_t k = 0; k < n; ++k) ASSERT_EQ(window_start(s, k), want[k]);
              if (n > 0) {
                // The records a run of windows covers: from the first start to the last
                // window's end, past the source only when stitched.
                const auto r = window_records(s, 0, n);
                EXPECT_EQ(r.begin, 0u);
                EXPECT_EQ(r.end, want.back() + length + target);
                EXPECT_LE(r.end, stitch ? records + next : records);
                for (uint64_t a = 0; a < n; ++a)
                  for (uint64_t b = a + 1; b <= n; ++b) {
                    const auto sub = window_records(s, a, b);
                    EXPECT_EQ(sub.begin, want[a]);
                    EXPECT_EQ(sub.end, want[b - 1] + length + target);
                  }
              }
              ++cases;
            }
  EXPECT_GT(cases, 40000u);
}

TEST(WindowMath, StitchEdgeCases) {
  // 10 records, 4:2:1 (span 5): alone, starts 0 2 4; stitched with 7 more, also 6 and 8.
  EXPECT_EQ(window_count(spec_of(4, 2, 1, false), 10, 7), 3u);
  EXPECT_EQ(window_count(spec_of(4, 2, 1, true), 10, 7), 5u);
  // Stitch never starts a window in the next source: start < records.
  EXPECT_EQ(window_count(spec_of(1, 1, 0, true), 3, 100), 3u);
  // A next source too short to complete the tail: only what fits.
  EXPECT_EQ(window_count(spec_of(4, 1, 0, true), 6, 1), 4u);  // starts 0..3
  // The last source has no next (next = 0): stitch changes nothing.
  EXPECT_EQ(window_count(spec_of(4, 1, 0, true), 6, 0),
            window_count(spec_of(4, 1, 0, false), 6, 0));
  // A source shorter than the span yields windows only by stitching.
  EXPECT_EQ(window_count(spec_of(8, 1, 0, false), 5, 10), 0u);
  EXPECT_EQ(window_count(spec_of(8, 1, 0, true), 5, 10), 5u);
  EXPECT_EQ(window_count(spec_of(8, 1, 0, true), 5, 2), 0u);
  // An empty source yields nothing, even stitched.
  EXPECT_EQ(window_count(spec_of(1, 1, 0, true), 0, 10), 0u);
  // Exactly one window when the span equals the records.
  EXPECT_EQ(window_count(spec_of(6, 100, 0, false), 6, 0), 1u);
  // The target is the record TARGET steps after the window's last one.
  EXPECT_EQ(window_target_offset(spec_of(4, 1, 1, false)), 4u);
  EXPECT_EQ(window_target_offset(spec_of(24, 1, 6, false)), 29u);
}

TEST(WindowMath, KeyIsBaseNameAtFirstRecord) {
  EXPECT_EQ(window_key("1979-01.bin", 120), "1979-01.bin@120");
  EXPECT_EQ(window_key(uri_base_name("/data/era5/1979-01.bin"), 0), "1979-01.bin@0");
  EXPECT_EQ(uri_base_name("s3://bucket/p/1979-02.f32"), "1979-02.f32");
  EXPECT_EQ(uri_base_name("plain.bin"), "plain.bin");
}

TEST(WindowSpecParser, ParsesLengthStrideAndOptionalTarget) {
  WindowSpec base;
  base.record_bytes = 64;
  base.stitch = true;
  auto a = parse_window_spec("24:1", base);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->length, 24u);
  EXPECT_EQ(a->stride, 1u);
  EXPECT_EQ(a->target, 0u);
  EXPECT_EQ(a->record_bytes, 64u);
  EXPECT_TRUE(a->stitch);
  EXPECT_EQ(a->span(), 24u);
  auto b = parse_window_spec("168:24:6");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->length, 168u);
  EXPECT_EQ(b->stride, 24u);
  EXPECT_EQ(b->target, 6u);
  EXPECT_EQ(b->span(), 174u);
  EXPECT_TRUE(b->enabled());
  EXPECT_FALSE(WindowSpec{}.enabled());
}

TEST(WindowSpecParser, RejectsMalformedTextWithClearErrors) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {{"", "expected LENGTH:STRIDE"},
                        {"24", "expected LENGTH:STRIDE"},
                        {"24:", "STRIDE is missing"},
                        {":1", "LENGTH is missing"},
                        {"24:1:", "TARGET is missing"},
                        {"24:1:2:3", "too many parts"},
                        {"x:1", "LENGTH 'x' is not a non-negative integer"},
                        {"24:-1", "STRIDE '-1' is not"},
                        {"24:1:1.5", "TARGET '1.5' is not"},
                        {"99999999999999999999:1", "too large"}};
  for (const auto& c : cases) {
    auto r = parse_window_spec(c.text);
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.text << ": " << r.status().message();
  }
}

TEST(WindowSpecParser, ValidationRefusesZeros) {
  auto ok = spec_of(2, 1, 0, false);
  EXPECT_TRUE(validate_window_spec(ok).is_ok());
  auto zero_length = parse_window_spec("0:1");  // syntax is fine, the value is not
  ASSERT_TRUE(zero_length.is_ok());
  zero_length->record_bytes = 4;
  EXPECT_NE(validate_window_spec(*zero_length).message().find("LENGTH must be at least 1"),
            std::string::npos);
  EXPECT_NE(validate_window_spec(spec_of(2, 0, 0, false)).message().find("STRIDE"),
            std::string::npos);
  EXPECT_NE(validate_window_spec(spec_of(2, 1, 0, false, 0)).message().find("--record-bytes"),
            std::string::npos);
}

// A records manifest as io/format/record_scan.h builds it, without I/O.
Manifest records_manifest(const std::vector<uint64_t>& records, const WindowSpec& spec) {
  Manifest m;
  m.windows = spec;
  for (size_t i = 0; i < records.size(); ++i) {
    SourceEntry s;
    s.uri = "/data/1979-" + std::to_string(10 + i) + ".bin";
    s.kind = SourceKind::kRecords;
    s.records = records[i];
    s.size_bytes = records[i] * spec.record_bytes;
    m.sources.push_back(s);
  }
  for (size_t i = 0; i < records.size(); ++i)
    m.sources[i].windows =
        window_count(spec, records[i], i + 1 < records.size() ? records[i + 1] : 0);
  m.fingerprint = compute_fingerprint(m);
  return m;
}

TEST(WindowsManifest, ItemsAreImplicitAndCountedBySourceItems) {
  const auto spec = spec_of(4, 2, 1, true, 8);
  const auto m = records_manifest({10, 7, 9}, spec);
  for (const auto& s : m.sources) EXPECT_TRUE(s.samples.empty());
  EXPECT_EQ(m.source_items(0), 5u);  // 0 2 4 6 8 (6 and 8 stitched)
  EXPECT_EQ(m.source_items(1), 4u);  // 0 2 4 6 (4 and 6 stitched)
  EXPECT_EQ(m.source_items(2), 3u);  // last source: 0 2 4
  EXPECT_EQ(m.num_samples(), 12u);
  EXPECT_EQ(m.window_payload_bytes(), 5u * 8);  // x = 4 records, y = 1 record
  EXPECT_EQ(m.payload_bytes(), 12u * 40);
  EXPECT_EQ(m.item_key(0, 3), "1979-10.bin@6");
  EXPECT_EQ(m.item_key(2, 0), "1979-12.bin@0");

  ItemIndex index(m);
  EXPECT_EQ(index.num_items(), 12u);
  auto loc = index.locate(7);
  EXPECT_EQ(loc.source, 1u);
  EXPECT_EQ(loc.sample, 2u);
}

TEST(WindowsManifest, FingerprintCoversTheWindowSpecAndTheFiles) {
  const auto base = records_manifest({10, 7}, spec_of(4, 2, 1, true, 8));
  std::set<uint64_t> seen{base.fingerprint};
  for (const auto& other :
       {spec_of(4, 2, 1, false, 8), spec_of(5, 2, 1, true, 8), spec_of(4, 3, 1, true, 8),
        spec_of(4, 2, 0, true, 8), spec_of(4, 2, 1, true, 4)}) {
    auto m = base;
    m.windows = other;
    EXPECT_TRUE(seen.insert(compute_fingerprint(m)).second);
  }
  auto bigger = base;
  bigger.sources[1].size_bytes += 8;
  bigger.sources[1].records += 1;
  EXPECT_TRUE(seen.insert(compute_fingerprint(bigger)).second);
  auto moved = base;  // another folder, same files: same dataset
  moved.sources[0].uri = "https://host/x/1979-10.bin";
  moved.sources[1].uri = "s3://b/1979-11.bin";
  EXPECT_EQ(compute_fingerprint(moved), base.fingerprint);
}

TEST(WindowsManifest, DefaultIsOneLogicalShardPerSourceOwningExactlyItsWindows) {
  const auto m = records_manifest({31, 28, 31, 30}, spec_of(3, 1, 0, false));
  ItemIndex index(m);
  ASSERT_EQ(default_logical_shards(m), 4u);
  auto shards = make_logical_shards(m, index, 4);
  ASSERT_EQ(shards.count(), 4u);
  for (uint32_t j = 0; j < 4; ++j) {
    EXPECT_EQ(shards.begin(j), index.source_begin(j));
    EXPECT_EQ(shards.end(j), index.source_end(j));
  }
  // Another L: balanced ranges, as for tar datasets.
  auto other = make_logical_shards(m, index, 8);
  EXPECT_EQ(other.count(), 8u);
  EXPECT_EQ(other.begin(1), index.num_items() / 8);

  // The plan names each shard's month and first window.
  PlanSpec spec;
  auto plan = plan_epoch(m, index, shards, spec, Topology{2, 1}, 4, 0);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->ranks[0].shards, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(plan->ranks[0].items, 29u + 29u);
  EXPECT_EQ(plan->ranks[1].items, 26u + 28u);
}

TEST(WindowsManifest, EveryWindowExactlyOncePerEpochForManyShapes) {
  for (bool stitch : {false, true})
    for (uint64_t stride : {1u, 3u}) {
      const auto m = records_manifest({13, 9, 11}, spec_of(4, stride, 1, stitch));
      ItemIndex index(m);
      const auto shards = make_logical_shards(m, index, default_logical_shards(m));
      for (uint32_t ranks : {1u, 2u, 3u})
        for (bool shuffle : {false, true}) {
          PlanSpec spec;
          spec.shuffle = shuffle;
          spec.seed = 5;
          auto plan = plan_epoch(m, index, shards, spec, Topology{ranks, 2}, 3, 0);
          ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
          std::multiset<std::string> keys;
          for (const auto& rp : plan->ranks)
            for (uint32_t j : rp.shards)
              for (uint64_t g = shards.begin(j); g < shards.end(j); ++g) {
                auto loc = index.locate(g);
                keys.insert(m.item_key(loc.source, loc.sample));
              }
          std::multiset<std::string> want;
          for (size_t s = 0; s < m.sources.size(); ++s) {
            const uint64_t next = s + 1 < m.sources.size() ? m.sources[s + 1].records : 0;
            for (auto start : brute_force_starts(m.windows, m.sources[s].records, next))
              want.insert(window_key(uri_base_name(m.sources[s].uri), start));
          }
          EXPECT_EQ(keys, want);
        }
    }
}

}  // namespace
}  // namespace shardyard
