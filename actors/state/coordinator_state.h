// CoordinatorState: the coordinator's logic without CAF.
//
// It owns the job's identity (JobInfo), admits ranks whose manifest fingerprint and
// topology match, hands out the one shared key of every epoch (so every rank's dispatcher
// shuffles identically), and records which ranks finished which epoch. It is the
// checkpoint barrier (every rank of a cut gets one generation; once every rank's file is
// durable it yields the CHECKPOINT manifest to commit) and, on restart, validates what each
// rank loaded and grants it where to resume on the new topology.
//
// Single-owner (the coordinator actor).
#pragma once

#include <map>
#include <optional>
#include <set>

#include "actors/state/messages.h"
#include "runtime/checkpoint.h"
#include "runtime/status.h"

namespace shardyard::actors {

// The error of a cut aborted because rank `rank` could not write its file: what every rank
// of the cut gets, the one that failed included.
Status checkpoint_aborted(const std::string& dir, uint32_t epoch, uint64_t step, uint32_t rank,
                          const std::string& error);

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

  // A rank starts saving a cut: the generation its file carries. A begin for another cut
  // (directory, epoch or step) while one is pending abandons the pending one.
  Result<uint64_t> begin_save(const CheckpointBegin& begin);
  // A rank's file is durable. Returns the manifest to commit once every rank of the world
  // has saved this cut; refuses a file of another generation or cut.
  Result<std::optional<CheckpointManifest>> rank_saved(const RankSaved& saved, int64_t now_ms);
  // A rank could not write its file. When it is of the pending cut, the cut is aborted:
  // returns the error every rank of it gets (naming the rank and what failed), which
  // begin_save() and rank_saved() also give each rank that comes to the aborted cut later.
  // OK when the cut is not pending (already aborted or replaced): nothing changes.
  Status save_failed(const RankSaveFailed& failed);
  // The pending cut was committed (or failed): the next save starts afresh.
  void save_finished();
  bool save_pending() const { return pending_.has_value(); }

  // Validates what a rank loaded (decoding it again), checks it belongs to this job and is
  // the checkpoint every other rank offered, and grants the rank where to resume.
  Result<ResumeGrant> resume(const ResumeOffer& offer);

 private:
  struct PendingSave {
    std::string dir;
    uint32_t epoch = 0;
    uint64_t step = 0;
    uint64_t generation = 0;
    std::map<uint32_t, RankSaved> saved;  // by rank
  };
  // An aborted cut, until every rank has heard of it: a rank that already did and begins
  // the same cut again is retrying it (a new cut starts).
  struct AbortedSave {
    std::string dir;
    uint32_t epoch = 0;
    uint64_t step = 0;
    uint64_t generation = 0;
    Status error;
    std::set<uint32_t> told;
  };
  // The abort's error for `rank` when it comes to the aborted cut for the first time.
  std::optional<Status> tell_aborted(uint32_t rank, const std::string& dir, uint32_t epoch,
                                     uint64_t step);
  // The part of the job a checkpoint records and a resume must match.
  CheckpointJob checkpoint_job() const;

  JobInfo job_;
  std::set<uint32_t> joined_;
  std::map<uint32_t, std::set<uint32_t>> done_;  // epoch -> ranks
  std::optional<PendingSave> pending_;
  std::optional<AbortedSave> aborted_;
  uint64_t last_generation_ = 0;
  std::optional<uint64_t> resumed_generation_;  // the checkpoint every rank must offer
};

}  // namespace shardyard::actors
