// Micro benchmarks of the packed sample tables (runtime/sample_table.h): what every process
// pays to take a manifest's tables as it opens a dataset (the rank its cached manifest, each
// worker process the copy its rank hands over), and what readers pay per lookup. A table of
// 2,000 samples as a tar shard of the end-to-end benchmark's small set holds them (keys
// "s000001_000000" on, each sample 3 members: 6,656 bytes of tar and 4,167 of payload).
// Counters: items_per_second = entries per second.
//
//   BM_SampleTableDecode/0  SampleTable::decode(..., Check::kCanonical): keys rebuilt and
//                           their shared prefixes checked (a manifest file a user names)
//   BM_SampleTableDecode/1  SampleTable::decode(..., Check::kBounds): keys skipped (a cached
//                           manifest, a rank's copy for its worker processes)
//   BM_SampleTableIterate   a walk of every entry, keys rebuilt
//   BM_SampleTableByteRange byte_range() of every chunk of 18 samples (a worker's reads)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "runtime/sample_table.h"

namespace {

using namespace shardyard;

constexpr size_t kSamples = 2000, kChunk = 18;

SampleTable make_table() {
  SampleTable t;
  char key[32];
  for (size_t i = 0; i < kSamples; ++i) {
    std::snprintf(key, sizeof key, "s000001_%06zu", i);
    t.push_back(SampleEntry{key, i * 6656, (i + 1) * 6656, 4167});
  }
  return t;
}

void BM_SampleTableDecode(benchmark::State& state) {
  const SampleTable table = make_table();
  const std::string bytes(table.encoded());
  const auto check =
      state.range(0) == 0 ? SampleTable::Check::kCanonical : SampleTable::Check::kBounds;
  auto keep = std::make_shared<int>(0);  // borrowed, as from a mapped manifest
  for (auto _ : state) {
    SampleTable out;
    if (!SampleTable::decode(bytes, kSamples, keep, &out, check)) state.SkipWithError("refused");
    benchmark::DoNotOptimize(out.totals().range);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kSamples));
}
BENCHMARK(BM_SampleTableDecode)->Arg(0)->Arg(1);

void BM_SampleTableIterate(benchmark::State& state) {
  const SampleTable table = make_table();
  for (auto _ : state) {
    uint64_t sum = 0;
    for (const auto& e : table) sum += e.end + e.key.size();
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kSamples));
}
BENCHMARK(BM_SampleTableIterate);

void BM_SampleTableByteRange(benchmark::State& state) {
  const SampleTable table = make_table();
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t first = 0; first < kSamples; first += kChunk)
      sum += table.byte_range(first, std::min(kSamples, first + kChunk)).end;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kSamples));
}
BENCHMARK(BM_SampleTableByteRange);

}  // namespace

BENCHMARK_MAIN();
