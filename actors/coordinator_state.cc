#include "actors/coordinator_state.h"

#include "runtime/shard.h"

namespace shardyard::actors {

Result<JobInfo> CoordinatorState::join(const JoinRequest& req) {
  if (req.fingerprint != job_.fingerprint)
    return invalid_argument("rank " + std::to_string(req.rank) +
                            " has a manifest of another dataset (fingerprint mismatch)");
  if (req.rank >= job_.world_size)
    return invalid_argument("rank " + std::to_string(req.rank) + " is outside a world of " +
                            std::to_string(job_.world_size));
  if (req.workers != job_.workers)
    return invalid_argument("rank " + std::to_string(req.rank) + " asks for " +
                            std::to_string(req.workers) + " workers; the job has " +
                            std::to_string(job_.workers));
  joined_.insert(req.rank);
  return job_;
}

EpochKey CoordinatorState::epoch_key(uint32_t epoch) const {
  // The same derivation as plan_epoch(): a pure function of (seed, epoch), handed out by
  // the coordinator so that no rank ever computes it from a seed of its own.
  return EpochKey{epoch, shardyard::epoch_key(job_.seed, epoch)};
}

void CoordinatorState::rank_done(const RankEpochDone& done) { done_[done.epoch].insert(done.rank); }

bool CoordinatorState::epoch_complete(uint32_t epoch) const {
  auto it = done_.find(epoch);
  return it != done_.end() && it->second.size() == job_.world_size;
}

ActorSnapshot CoordinatorState::snapshot() const {
  ActorSnapshot s;
  s.role = "coordinator";
  s.state = "running";
  s.detail = std::to_string(joined_.size()) + "/" + std::to_string(job_.world_size) +
             " ranks joined, L=" + std::to_string(job_.logical_shards);
  if (!done_.empty()) s.epoch = done_.rbegin()->first;
  return s;
}

}  // namespace shardyard::actors
