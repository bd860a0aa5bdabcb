// WorkerCore: what a worker does with a work unit, without CAF.
//
// Given its logical shards of an epoch (in interleave order, with how many items to take
// from each), a worker walks the round-robin interleave of its shards, reads each shard
// chunk by chunk (one read per chunk, io/sample_reader.h), emits each chunk's items in the
// epoch's permuted order, runs the replicable stages on each item with a per-item random
// stream, and pushes packets of items into its data-plane channel. The order it produces is
// exactly the rank order restricted to its shards, which is what lets the loader merge.
// A resumed unit starts each shard at its consumed position and restores stateful stages;
// every item of a stateful pipeline carries the stages' state right after it.
//
// Single-owner: one WorkerCore per worker thread. run() blocks (reads, backpressure).
#pragma once

#include <memory>
#include <vector>

#include "actors/job.h"
#include "io/sample_reader.h"

namespace shardyard::actors {

struct UnitStats {
  uint64_t items = 0;
  uint64_t bytes = 0;
};

class WorkerCore {
 public:
  WorkerCore(std::shared_ptr<const JobData> job, uint32_t rank, uint32_t worker);
  // Produces the unit into `channel` and finishes the channel (with the error, if any).
  Result<UnitStats> run(const WorkUnit& unit, io::Channel& channel);

 private:
  Status produce(const WorkUnit& unit, io::Channel& channel, UnitStats* stats);
  Status restore_stages(const WorkUnit& unit, const std::vector<Stage*>& stateful);

  std::shared_ptr<const JobData> job_;
  WorkerInfo identity_;
  io::SampleReader reader_;
};

}  // namespace shardyard::actors
