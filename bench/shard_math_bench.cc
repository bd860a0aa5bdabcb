// Micro benchmarks of the shard math (runtime/shard.h) at L = 256 logical shards, R = 8
// ranks, W = 8 workers per rank, over a manifest of 256 sources x 1000 samples (N = 256,000
// items). Counters: items_per_second = positions (item slots of the epoch order) per second.
//
//   BM_PlanEpoch           plan_epoch (shard order, ShardInfos, strategies, take counts);
//                          positions = all N items of the epoch
//   BM_InterleaveCursor    one rank's full round-robin walk (the merger does this for
//                          every item it hands out): N / R positions
//   BM_PlanAndWalkAllRanks plan + every rank's walk: N positions
//   BM_WorkerWalk          one worker's walk over its shards (what WorkerCore does)
//   BM_ChunkPermutation    the per-chunk item permutation (shuffle), per item
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/manifest.h"
#include "runtime/shard.h"

namespace {

using namespace shardyard;

constexpr uint32_t kSources = 256, kSamples = 1000, kL = 256, kR = 8, kW = 8;

struct Fixture {
  Manifest manifest;
  ItemIndex index;
  LogicalShards shards;
  PlanSpec spec;
  Fixture() {
    char key[32];
    for (uint32_t s = 0; s < kSources; ++s) {
      SourceEntry src;
      src.uri = "/data/train-" + std::to_string(s) + ".tar";
      for (uint32_t i = 0; i < kSamples; ++i) {
        std::snprintf(key, sizeof key, "s%06u_%06u", s, i);
        SampleEntry e;
        e.key = key;
        e.begin = uint64_t{i} * 6656;
        e.end = e.begin + 6656;
        e.payload_bytes = 4096 + 90;
        src.samples.push_back(std::move(e));
      }
      manifest.sources.push_back(std::move(src));
    }
    index = ItemIndex(manifest);
    shards = LogicalShards(index.num_items(), kL);
    spec.logical_shards = kL;
    spec.chunk_items = 256;
    spec.seed = 7;
    spec.shuffle = true;
  }
  EpochPlan plan(uint32_t epoch) const {
    auto p = plan_epoch(manifest, index, shards, spec, Topology{kR, kW}, 64, epoch);
    if (!p.is_ok()) std::abort();
    return std::move(p).value();
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

void BM_PlanEpoch(benchmark::State& state) {
  const auto& f = fixture();
  uint32_t epoch = 0;
  for (auto _ : state) {
    auto p = f.plan(epoch++);
    benchmark::DoNotOptimize(p.steps);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * f.index.num_items()));
}
BENCHMARK(BM_PlanEpoch);

void BM_InterleaveCursor(benchmark::State& state) {
  const auto& f = fixture();
  const EpochPlan p = f.plan(0);
  const auto& rank = p.ranks[0];
  for (auto _ : state) {
    InterleaveCursor c(rank.take);
    uint64_t sum = 0;
    while (!c.done()) sum += c.next();
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * rank.items));
}
BENCHMARK(BM_InterleaveCursor);

void BM_PlanAndWalkAllRanks(benchmark::State& state) {
  const auto& f = fixture();
  uint32_t epoch = 0;
  for (auto _ : state) {
    const EpochPlan p = f.plan(epoch++);
    uint64_t sum = 0;
    for (const auto& rank : p.ranks) {
      InterleaveCursor c(rank.take);
      while (!c.done()) sum += c.next();
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * f.index.num_items()));
}
BENCHMARK(BM_PlanAndWalkAllRanks);

void BM_WorkerWalk(benchmark::State& state) {
  const auto& f = fixture();
  const EpochPlan p = f.plan(0);
  const auto& rank = p.ranks[0];
  std::vector<uint64_t> take;  // worker 0's shards, in interleave order
  uint64_t items = 0;
  for (size_t i = 0; i < rank.shards.size(); ++i)
    if (rank.worker_of[i] == 0) {
      take.push_back(rank.take[i]);
      items += rank.take[i];
    }
  for (auto _ : state) {
    InterleaveCursor c(take);
    uint64_t sum = 0;
    while (!c.done()) sum += c.next();
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * items));
  state.counters["shards"] = static_cast<double>(take.size());
}
BENCHMARK(BM_WorkerWalk);

void BM_ChunkPermutation(benchmark::State& state) {
  const auto& f = fixture();
  const uint32_t chunk = static_cast<uint32_t>(state.range(0));
  ShardSequence seq(f.shards, 3, chunk, /*shuffle=*/true, /*permute_chunks=*/true, epoch_key(7, 0));
  size_t i = 0;
  uint64_t items = 0;
  for (auto _ : state) {
    auto perm = seq.chunk_permutation(i);
    items += perm.size();
    benchmark::DoNotOptimize(perm.data());
    if (++i == seq.num_chunks()) i = 0;
  }
  state.SetItemsProcessed(static_cast<int64_t>(items));
}
BENCHMARK(BM_ChunkPermutation)->Arg(256)->Arg(1000);

}  // namespace

BENCHMARK_MAIN();
