// CoordinatorState: the coordinator's logic without CAF.
//
// It owns the job's identity (JobInfo), admits ranks whose manifest fingerprint and
// topology match, hands out the one shared key of every epoch (so every rank's dispatcher
// shuffles identically), and records which ranks finished which epoch.
//
// Single-owner (the coordinator actor).
#pragma once

#include <map>
#include <set>

#include "actors/protocol.h"
#include "runtime/status.h"

namespace shardyard::actors {

class CoordinatorState {
 public:
  explicit CoordinatorState(JobInfo job) : job_(std::move(job)) {}
  Result<JobInfo> join(const JoinRequest& req);
  EpochKey epoch_key(uint32_t epoch) const;
  void rank_done(const RankEpochDone& done);
  // True once every rank reported the epoch done.
  bool epoch_complete(uint32_t epoch) const;
  ActorSnapshot snapshot() const;
  const JobInfo& job() const { return job_; }

 private:
  JobInfo job_;
  std::set<uint32_t> joined_;
  std::map<uint32_t, std::set<uint32_t>> done_;  // epoch -> ranks
};

}  // namespace shardyard::actors
