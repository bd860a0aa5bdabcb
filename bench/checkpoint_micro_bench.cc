// Micro benchmarks of checkpoint state (runtime/checkpoint.h) and of resuming an epoch,
// at L = 256 logical shards, R = 8 ranks, W = 8 workers, N = 256,000 items.
//
//   BM_RankCursorApply      the loader's per-step cost of being checkpointable: applying
//                           one step's progress (B = 256 items) to the rank's cursor;
//                           items_per_second counts items
//   BM_EncodeRankFile       encoding one rank's file (L / R = 32 shards, 8 worker states)
//   BM_DecodeCheckpoint     decoding and validating a whole cut (CHECKPOINT + 8 rank files)
//   BM_PlanResumedEpoch     what a dispatcher does on resume: plan_epoch from the cursor,
//                           at the same R (layout continued) and at R = 6 (laid out afresh)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/manifest.h"
#include "runtime/shard.h"

namespace {

using namespace shardyard;

constexpr uint32_t kSources = 256, kSamples = 1000, kL = 256, kR = 8, kW = 8, kB = 64;

struct Fixture {
  Manifest manifest;
  ItemIndex index;
  LogicalShards shards;
  PlanSpec spec;
  EpochPlan plan;
  EpochCursor cursor;  // a cut at a third of the epoch
  Fixture() {
    char key[32];
    for (uint32_t s = 0; s < kSources; ++s) {
      SourceEntry src;
      src.uri = "/data/train-" + std::to_string(s) + ".tar";
      for (uint32_t i = 0; i < kSamples; ++i) {
        std::snprintf(key, sizeof key, "s%06u_%06u", s, i);
        src.samples.push_back(SampleEntry{key, uint64_t{i} * 6656, uint64_t{i + 1} * 6656, 4186});
      }
      manifest.sources.push_back(std::move(src));
    }
    index = ItemIndex(manifest);
    shards = LogicalShards(index.num_items(), kL);
    spec.logical_shards = kL;
    spec.chunk_items = 256;
    spec.seed = 7;
    spec.shuffle = true;
    plan = plan_epoch(manifest, index, shards, spec, Topology{kR, kW}, kB, 0).value();
    const uint64_t step = plan.steps / 3;
    cursor.epoch = 0;
    cursor.step = step;
    cursor.take.assign(kL, 0);
    cursor.consumed.assign(kL, 0);
    cursor.ranks = kR;
    cursor.batch_size = kB;
    cursor.steps = plan.steps;
    for (uint32_t r = 0; r < kR; ++r) {
      const auto& rp = plan.ranks[r];
      auto counts = interleave_counts(rp.take, plan.batch_begin(r, step));
      for (size_t k = 0; k < rp.shards.size(); ++k) {
        cursor.take[rp.shards[k]] = rp.take[k];
        cursor.consumed[rp.shards[k]] = counts[k];
      }
      cursor.layout_offset.push_back(0);
      cursor.layout_items.push_back(rp.items);
    }
  }
  RankCheckpoint rank_file(uint32_t r, uint64_t generation) const {
    RankCheckpoint c;
    c.generation = generation;
    c.rank = r;
    c.fingerprint = 42;
    c.step = cursor.step;
    c.layout_items = plan.ranks[r].items;
    for (auto j : plan.ranks[r].shards)
      c.shards.push_back(ShardProgress{j, cursor.take[j], cursor.consumed[j]});
    c.worker_states.assign(kW, std::string());
    return c;
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

void BM_RankCursorApply(benchmark::State& state) {
  // What RankCursor::apply does per step: one counter bump per item of the step.
  std::vector<uint64_t> consumed(kL / kR, 0);
  std::vector<uint32_t> shard_index(256);
  for (size_t i = 0; i < shard_index.size(); ++i) shard_index[i] = i % consumed.size();
  for (auto _ : state) {
    for (auto k : shard_index) ++consumed[k];
    benchmark::DoNotOptimize(consumed.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * shard_index.size()));
}
BENCHMARK(BM_RankCursorApply);

void BM_EncodeRankFile(benchmark::State& state) {
  const auto c = fixture().rank_file(0, 1);
  size_t bytes = 0;
  for (auto _ : state) {
    auto s = encode_rank_checkpoint(c);
    bytes = s.size();
    benchmark::DoNotOptimize(s.data());
  }
  state.counters["file_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_EncodeRankFile);

void BM_DecodeCheckpoint(benchmark::State& state) {
  const auto& f = fixture();
  CheckpointManifest m;
  m.generation = 1;
  m.job.fingerprint = 42;
  m.job.num_items = f.index.num_items();
  m.job.logical_shards = kL;
  m.topology = CheckpointTopology{kR, kW, kB, true};
  m.step = f.cursor.step;
  m.steps = f.plan.steps;
  std::vector<std::string> files;
  for (uint32_t r = 0; r < kR; ++r) {
    files.push_back(encode_rank_checkpoint(f.rank_file(r, 1)));
    m.ranks.push_back(RankFileRef{r, "rank", files.back().size(), file_checksum(files.back())});
  }
  const std::string manifest = encode_checkpoint_manifest(m);
  for (auto _ : state) {
    auto c = decode_checkpoint(manifest, files, "/ckpt");
    if (!c.is_ok()) state.SkipWithError(c.status().to_string().c_str());
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_DecodeCheckpoint);

void BM_PlanResumedEpoch(benchmark::State& state) {
  const auto& f = fixture();
  const auto ranks = static_cast<uint32_t>(state.range(0));
  for (auto _ : state) {
    auto p =
        plan_epoch(f.manifest, f.index, f.shards, f.spec, Topology{ranks, kW}, kB, 0, &f.cursor);
    if (!p.is_ok()) state.SkipWithError(p.status().to_string().c_str());
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_PlanResumedEpoch)->Arg(kR)->Arg(6);

}  // namespace

BENCHMARK_MAIN();
