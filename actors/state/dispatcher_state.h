// DispatcherState: a rank's dispatcher logic without CAF.
//
// At the start of an epoch it plans the epoch (runtime/shard.h) with the key the
// coordinator handed out, checks that the key is the one the plan expects, and cuts the
// rank's share into one work unit per worker: the worker's logical shards in interleave
// order with how many items to take from each. It then tracks which units are out, done or
// failed. After a resume grant (the coordinator's answer to a restored checkpoint), the
// granted epoch is planned from the checkpoint's cursor: every shard starts where the
// trainer stopped consuming, on this rank's share of the new topology. When the epoch start
// names a route (a dispatch mode), the dispatcher feeds the route from the rank's shards
// and the workers take their items from it.
//
// Single-owner (the dispatcher actor).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "actors/state/job.h"

namespace shardyard::actors {

struct EpochAssignment {
  EpochTicket ticket;
  std::vector<WorkUnit> units;  // one per worker (a worker with no shard gets an empty unit)
  // Dispatch modes: what the dispatcher itself feeds into the route (the rank's pending
  // shards in rank order, with its stages' saved states); the workers' units then name the
  // route and no shard.
  std::optional<WorkUnit> feed;
};

class DispatcherState {
 public:
  DispatcherState(std::shared_ptr<const JobData> job, uint32_t rank)
      : job_(std::move(job)), rank_(rank) {}
  Result<EpochAssignment> start_epoch(const EpochStart& start, const EpochKey& key);
  // The next start of the granted epoch resumes at its cursor (once).
  void set_resume(ResumeGrant grant) { resume_ = std::move(grant); }
  void unit_done(const WorkerDone& done);
  ActorSnapshot snapshot() const;

 private:
  std::shared_ptr<const JobData> job_;
  uint32_t rank_;
  uint32_t epoch_ = 0;
  uint32_t outstanding_ = 0;
  uint64_t items_done_ = 0, bytes_done_ = 0;
  std::string failure_;
  std::optional<ResumeGrant> resume_;
};

}  // namespace shardyard::actors
