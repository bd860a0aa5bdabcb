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

// What join() says: the job as the coordinator holds it, and whether every rank of the
// world has joined now (the ranks' joins are answered then, all at once).
struct JoinOutcome {
  JobInfo job;
  bool world_complete = false;
};

class CoordinatorState {
 public:
  // A coordinator in a rank's process knows the job from that rank's options.
  explicit CoordinatorState(JobInfo job) : world_size_(job.world_size), job_(std::move(job)) {}
  // A coordinator of its own (`shardyard coordinator`) knows the world size only; the first
  // rank that joins describes the job, and every later one must agree with it.
  static CoordinatorState for_world(uint32_t world_size, uint32_t restart_count);

  // Admits a rank: its JobInfo must agree with the job's (check_agreement), its rank be in
  // the world and not taken. A rank that disagrees fails the whole job (failure()): a job
  // whose ranks see different data overlaps samples silently.
  Result<JoinOutcome> join(const JoinRequest& req);
  uint32_t world_size() const { return world_size_; }
  bool world_complete() const { return joined_.size() == world_size_; }
  Result<EpochKey> epoch_key(uint32_t epoch) const;
  void rank_done(const RankEpochDone& done);
  // True once every rank reported the epoch done.
  bool epoch_complete(uint32_t epoch) const;
  ActorSnapshot snapshot() const;
  const JobInfo& job() const { return *job_; }
  bool has_job() const { return job_.has_value(); }

  // The job stops: every later request fails with `why` (the first reason is kept).
  void abort(Status why);
  const Status& failure() const { return failure_; }
  // A rank leaves: done (ok) or stopped by an error, which stops the job.
  void leave(const RankLeave& leave);
  // A rank's process went away (its connection broke, or its loader actor is gone): unless
  // it left first, the job stops, naming it.
  void rank_lost(uint32_t rank, const std::string& why);
  bool joined(uint32_t rank) const { return joined_.count(rank) > 0; }
  bool left(uint32_t rank) const { return left_.count(rank) > 0; }
  // Every rank of the world joined and left.
  bool all_left() const { return left_.size() == world_size_; }

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
  // The cut rank_saved() just completed, as one byte string (encode_checkpoint_state): for
  // a cut saved without a directory (Loader::state()), whose rank files came in RankSaved.
  std::string pending_state(const CheckpointManifest& manifest) const;
  // The pending cut was committed (or failed): the next save starts afresh.
  void save_finished();
  bool save_pending() const { return pending_.has_value(); }

  // Validates what a rank loaded (decoding it again) and checks it belongs to this job and
  // is the very checkpoint every other rank offered (same CHECKPOINT, so the same
  // generation of the same directory); true once every rank of the world has offered it.
  // A rank that offers another checkpoint fails the job, naming both.
  Result<bool> offer(const ResumeOffer& offer);
  // Where `rank` resumes on this job's topology, once every rank offered.
  Result<ResumeGrant> grant(uint32_t rank) const;
  // offer() and grant() at once, for a world of one rank or a caller that needs no barrier.
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

  uint32_t world_size_ = 1;
  std::optional<uint32_t> restart_count_;  // the launcher's restart this coordinator serves
  std::optional<JobInfo> job_;
  Status failure_;
  std::set<uint32_t> joined_;
  std::set<uint32_t> left_;
  std::optional<Checkpoint> offered_;  // the checkpoint the ranks resume from
  std::string offered_manifest_;       // its CHECKPOINT bytes, the same from every rank
  std::set<uint32_t> offered_by_;
  std::map<uint32_t, std::set<uint32_t>> done_;  // epoch -> ranks
  std::optional<PendingSave> pending_;
  std::optional<AbortedSave> aborted_;
  uint64_t last_generation_ = 0;
  std::optional<uint64_t> resumed_generation_;  // the checkpoint every rank must offer
};

}  // namespace shardyard::actors
