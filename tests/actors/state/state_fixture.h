// A small job for the state classes' tests (tests/actors/state/): real tar shards written by
// tests/e2e/make_dataset.py, a manifest scanned from them, and make_job() over the local
// file system, the real clock and the in-process data plane. No actor system.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../testdata.h"
#include "actors/state/dispatcher_state.h"
#include "actors/state/job.h"
#include "io/format/manifest_scan.h"

namespace shardyard::actors::testing {

using shardyard::testing::make_dataset;
using shardyard::testing::TempDir;

struct JobSpec {
  int shards = 4, samples = 25, bytes = 100;
  Topology topology{1, 2};
  uint32_t batch_size = 8;
  PlanSpec plan;
  Spec pipeline;
  bool exact_order = true;
  Dispatch dispatch = Dispatch::kNone;
};

// Writes the dataset into `dir` and makes the job; fails the test on error.
inline std::shared_ptr<const JobData> make_test_job(const std::string& dir, const JobSpec& spec) {
  const std::string pattern = make_dataset(dir, spec.shards, spec.samples, spec.bytes, 1);
  EXPECT_FALSE(pattern.empty());
  auto m = io::build_manifest(io::local_file_system(), {pattern}, io::ScanOptions{}, nullptr);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  if (!m.is_ok()) return nullptr;
  JobOptions o;
  o.manifest = std::make_shared<const Manifest>(std::move(m).value());
  o.plan = spec.plan;
  o.pipeline = spec.pipeline;
  o.topology = spec.topology;
  o.batch_size = spec.batch_size;
  o.exact_order = spec.exact_order;
  o.dispatch = spec.dispatch;
  o.fs = &io::local_file_system();
  o.clock = &real_clock();
  o.data_plane = io::inproc_data_plane();
  auto job = make_job(std::move(o));
  EXPECT_TRUE(job.is_ok()) << job.status().to_string();
  return job.is_ok() ? *job : nullptr;
}

// The rank's units and ticket for an epoch, as its dispatcher cuts them; channel names
// "w0", "w1", ... (one per worker) or "all" (shared).
inline EpochAssignment assign(const std::shared_ptr<const JobData>& job, uint32_t rank,
                              uint32_t epoch, bool shared_channel) {
  DispatcherState d(job, rank);
  EpochStart start{rank, epoch, {}, {}};
  for (uint32_t w = 0; w < (shared_channel ? 1 : job->topology.workers); ++w)
    start.channels.push_back(shared_channel ? "all" : "w" + std::to_string(w));
  auto a = d.start_epoch(start, EpochKey{epoch, epoch_key(job->plan.seed, epoch)});
  EXPECT_TRUE(a.is_ok()) << a.status().to_string();
  return a.is_ok() ? std::move(a).value() : EpochAssignment{};
}

// The ids of logical shard `shard`'s items in its epoch order (pure shard math).
inline std::vector<uint64_t> shard_order(const JobData& job, uint32_t shard, uint64_t key) {
  ShardSequence seq(job.shards, shard, job.plan.chunk_items, job.plan.shuffle,
                    job.manifest->seekable(), key);
  std::vector<uint64_t> ids;
  for (size_t c = 0; c < seq.num_chunks(); ++c)
    for (uint32_t i : seq.chunk_permutation(c)) ids.push_back(seq.chunk_begin(c) + i);
  return ids;
}

}  // namespace shardyard::actors::testing
