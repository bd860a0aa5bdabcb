#include "actors/state/coordinator_state.h"

#include "actors/state/agreement.h"
#include "runtime/shard.h"

namespace shardyard::actors {

Status checkpoint_aborted(const std::string& dir, uint32_t epoch, uint64_t step, uint32_t rank,
                          const std::string& error) {
  return io_error("checkpoint into " + dir + " at epoch " + std::to_string(epoch) + " step " +
                  std::to_string(step) + " aborted: rank " + std::to_string(rank) +
                  " could not write its file: " + error +
                  "; the last committed checkpoint stays the latest");
}

CoordinatorState CoordinatorState::for_world(uint32_t world_size, uint32_t restart_count) {
  CoordinatorState c(JobInfo{});
  c.job_.reset();
  c.world_size_ = world_size;
  c.restart_count_ = restart_count;
  return c;
}

Result<JoinOutcome> CoordinatorState::join(const JoinRequest& req) {
  SY_RETURN_IF_ERROR(failure_);
  const std::string who = "rank " + std::to_string(req.rank);
  if (req.protocol_version != kProtocolVersion)
    return invalid_argument(
        who + " speaks protocol version " + std::to_string(req.protocol_version) +
        "; this coordinator speaks version " + std::to_string(kProtocolVersion) +
        ": run the same shardyard release on every rank");
  if (restart_count_ && req.restart_count != *restart_count_)
    return unavailable(who + " belongs to restart " + std::to_string(req.restart_count) +
                       " of the job; this coordinator serves restart " +
                       std::to_string(*restart_count_));
  if (req.rank >= world_size_)
    return invalid_argument(who + " is outside a world of " + std::to_string(world_size_));
  if (!job_) {
    if (req.job.world_size != world_size_) {
      abort(invalid_argument(who + " was started for a world of " +
                             std::to_string(req.job.world_size) + " ranks; the job has " +
                             std::to_string(world_size_)));
      return failure_;
    }
    job_ = req.job;
    restart_count_ = req.restart_count;
  } else if (Status st = check_agreement(*job_, req.job, req.rank); !st.is_ok()) {
    abort(st);
    return failure_;
  }
  if (req.fingerprint != job_->fingerprint) {
    abort(invalid_argument(who + " has a manifest of another dataset (fingerprint mismatch)"));
    return failure_;
  }
  if (req.workers != job_->workers) {
    abort(invalid_argument(who + " asks for " + std::to_string(req.workers) +
                           " workers; the job has " + std::to_string(job_->workers)));
    return failure_;
  }
  if (joined_.count(req.rank)) {
    abort(invalid_argument(who + " joined twice: two processes were given the same rank"));
    return failure_;
  }
  joined_.insert(req.rank);
  return JoinOutcome{*job_, world_complete()};
}

Result<EpochKey> CoordinatorState::epoch_key(uint32_t epoch) const {
  SY_RETURN_IF_ERROR(failure_);
  // The same derivation as plan_epoch(): a pure function of (seed, epoch), handed out by
  // the coordinator so that no rank ever computes it from a seed of its own.
  return EpochKey{epoch, shardyard::epoch_key(job_->seed, epoch)};
}

void CoordinatorState::abort(Status why) {
  if (failure_.is_ok()) failure_ = std::move(why);
}

void CoordinatorState::leave(const RankLeave& l) {
  left_.insert(l.rank);
  if (!l.ok)
    abort(unavailable("rank " + std::to_string(l.rank) + " stopped with an error: " + l.error));
}

void CoordinatorState::rank_lost(uint32_t rank, const std::string& why) {
  if (left_.count(rank)) return;
  abort(unavailable("rank " + std::to_string(rank) + " was lost: " + why));
}

void CoordinatorState::rank_done(const RankEpochDone& done) { done_[done.epoch].insert(done.rank); }

bool CoordinatorState::epoch_complete(uint32_t epoch) const {
  auto it = done_.find(epoch);
  return it != done_.end() && it->second.size() == world_size_;
}

Result<uint64_t> CoordinatorState::begin_save(const CheckpointBegin& b) {
  if (b.rank >= world_size_)
    return invalid_argument("rank " + std::to_string(b.rank) + " is outside a world of " +
                            std::to_string(world_size_));
  if (joined_.size() != world_size_)
    return invalid_argument("a checkpoint is a cut across every rank, and only " +
                            std::to_string(joined_.size()) + " of " + std::to_string(world_size_) +
                            " ranks joined this coordinator");
  if (auto aborted = tell_aborted(b.rank, b.dir, b.epoch, b.step)) return *aborted;
  const bool same = pending_ && pending_->dir == b.dir && pending_->epoch == b.epoch &&
                    pending_->step == b.step && !pending_->saved.count(b.rank);
  if (!same) {
    pending_ = PendingSave{b.dir, b.epoch, b.step, 0, {}};
    pending_->generation = std::max(b.proposed_generation, last_generation_ + 1);
  }
  return pending_->generation;
}

Result<std::optional<CheckpointManifest>> CoordinatorState::rank_saved(const RankSaved& s,
                                                                       int64_t now_ms) {
  if (aborted_ && aborted_->generation == s.generation && aborted_->dir == s.dir) {
    if (auto aborted = tell_aborted(s.rank, s.dir, s.epoch, s.step)) return *aborted;
    return aborted_->error;
  }
  if (!pending_ || pending_->generation != s.generation || pending_->dir != s.dir)
    return cancelled("rank " + std::to_string(s.rank) + " saved generation " +
                     std::to_string(s.generation) +
                     ", which is no longer pending (another cut was started)");
  if (s.epoch != pending_->epoch || s.step != pending_->step)
    return invalid_argument("rank " + std::to_string(s.rank) + " saved epoch " +
                            std::to_string(s.epoch) + " step " + std::to_string(s.step) +
                            "; the cut is at epoch " + std::to_string(pending_->epoch) + " step " +
                            std::to_string(pending_->step));
  pending_->saved[s.rank] = s;
  if (pending_->saved.size() < world_size_) return std::optional<CheckpointManifest>();
  const RankSaved& first = pending_->saved.begin()->second;
  for (const auto& [r, other] : pending_->saved)
    if (other.steps != first.steps || other.layout_step0 != first.layout_step0 ||
        other.epoch_complete != first.epoch_complete)
      return internal_error("ranks disagree on the batch layout of epoch " +
                            std::to_string(first.epoch) + " (rank " + std::to_string(r) + ")");
  CheckpointManifest m;
  m.generation = pending_->generation;
  m.created_unix_ms = now_ms;
  m.job = checkpoint_job();
  m.topology = CheckpointTopology{world_size_, job_->workers, job_->batch_size, job_->exact_order};
  m.epoch = first.epoch;
  m.step = first.step;
  m.steps = first.steps;
  m.layout_step0 = first.layout_step0;
  m.epoch_complete = first.epoch_complete;
  for (const auto& [r, other] : pending_->saved)
    m.ranks.push_back(RankFileRef{r, other.file, other.size, other.checksum});
  last_generation_ = m.generation;
  return std::optional<CheckpointManifest>(std::move(m));
}

std::string CoordinatorState::pending_state(const CheckpointManifest& manifest) const {
  CheckpointState state;
  state.manifest = encode_checkpoint_manifest(manifest);
  if (pending_)
    for (const auto& [r, saved] : pending_->saved) state.rank_files.push_back(saved.bytes);
  return encode_checkpoint_state(state);
}

void CoordinatorState::save_finished() { pending_.reset(); }

Status CoordinatorState::save_failed(const RankSaveFailed& f) {
  if (!pending_ || pending_->generation != f.generation || pending_->dir != f.dir)
    return Status::ok();
  AbortedSave a{f.dir, pending_->epoch, pending_->step, f.generation, {}, {}};
  a.error = checkpoint_aborted(f.dir, a.epoch, a.step, f.rank, f.error);
  // Ranks that reported their file hear of it in the reply they wait for; so does the
  // rank that failed.
  for (const auto& [r, saved] : pending_->saved) a.told.insert(r);
  a.told.insert(f.rank);
  Status error = a.error;
  aborted_ = std::move(a);
  if (aborted_->told.size() >= world_size_) aborted_.reset();
  pending_.reset();
  return error;
}

std::optional<Status> CoordinatorState::tell_aborted(uint32_t rank, const std::string& dir,
                                                     uint32_t epoch, uint64_t step) {
  if (!aborted_ || aborted_->dir != dir || aborted_->epoch != epoch || aborted_->step != step ||
      aborted_->told.count(rank))
    return std::nullopt;
  aborted_->told.insert(rank);
  Status error = aborted_->error;
  if (aborted_->told.size() >= world_size_) aborted_.reset();
  return error;
}

CheckpointJob CoordinatorState::checkpoint_job() const {
  return CheckpointJob{
      job_->fingerprint,    job_->num_items, job_->logical_shards, job_->chunk_items,
      job_->seed,           job_->shuffle,   job_->drop_last,      job_->distributed_strategy,
      job_->worker_strategy};
}

Result<bool> CoordinatorState::offer(const ResumeOffer& offer) {
  SY_RETURN_IF_ERROR(failure_);
  const std::string who = "rank " + std::to_string(offer.rank);
  if (offer.rank >= world_size_)
    return invalid_argument(who + " is outside a world of " + std::to_string(world_size_));
  SY_ASSIGN_OR_RETURN(auto ckpt, decode_checkpoint(offer.manifest, offer.rank_files, offer.dir));
  const auto& m = ckpt.manifest;
  SY_RETURN_IF_ERROR(check_same_job(m.job, checkpoint_job()));
  if (offered_) {
    if (offered_->manifest.generation != m.generation) {
      abort(invalid_argument(who + " loaded checkpoint generation " + std::to_string(m.generation) +
                             " from " + offer.dir + "; other ranks loaded generation " +
                             std::to_string(offered_->manifest.generation) +
                             ": every rank must resume from the same checkpoint"));
      return failure_;
    }
    if (offered_manifest_ != offer.manifest) {
      abort(invalid_argument(who + " loaded another checkpoint of generation " +
                             std::to_string(m.generation) + " (from " + offer.dir +
                             ") than the other ranks: every rank must resume from one directory"));
      return failure_;
    }
  } else {
    offered_ = std::move(ckpt);
    offered_manifest_ = offer.manifest;
    resumed_generation_ = m.generation;
    last_generation_ = std::max(last_generation_, m.generation);
  }
  offered_by_.insert(offer.rank);
  return offered_by_.size() == world_size_;
}

Result<ResumeGrant> CoordinatorState::grant(uint32_t rank) const {
  SY_RETURN_IF_ERROR(failure_);
  if (!offered_ || !offered_by_.count(rank))
    return invalid_argument("rank " + std::to_string(rank) + " offered no checkpoint");
  const Checkpoint& ckpt = *offered_;
  const auto& m = ckpt.manifest;
  ResumeGrant g;
  g.generation = m.generation;
  g.epoch = ckpt.resume_epoch();
  g.partial = !m.epoch_complete;
  g.rescaled = m.topology.ranks != world_size_ || m.topology.workers != job_->workers;
  if (g.partial) {
    EpochCursor c = ckpt.cursor();
    g.step = c.step;
    g.take = std::move(c.take);
    g.consumed = std::move(c.consumed);
    g.saved_ranks = c.ranks;
    g.saved_batch_size = c.batch_size;
    g.steps = c.steps;
    g.layout_step0 = c.layout_step0;
    g.layout_offset = std::move(c.layout_offset);
    g.layout_items = std::move(c.layout_items);
    if (g.rescaled) {
      for (auto& s : ckpt.worker_states())
        if (!s.empty()) g.worker_states.push_back(std::move(s));
    } else {
      g.worker_states = ckpt.ranks[rank].worker_states;
    }
    // The dispatcher's and the loader's stages are one per rank: other workers change
    // nothing for them, other ranks make them merge every rank's state.
    g.ranks_changed = m.topology.ranks != world_size_;
    if (g.ranks_changed) {
      for (const auto& r : ckpt.ranks) {
        if (!r.dispatcher_state.empty()) g.dispatcher_states.push_back(r.dispatcher_state);
        if (!r.loader_state.empty()) g.loader_states.push_back(r.loader_state);
      }
    } else {
      g.dispatcher_states = {ckpt.ranks[rank].dispatcher_state};
      g.loader_states = {ckpt.ranks[rank].loader_state};
    }
  }
  return g;
}

Result<ResumeGrant> CoordinatorState::resume(const ResumeOffer& o) {
  SY_RETURN_IF_ERROR(offer(o).status());
  return grant(o.rank);
}

ActorSnapshot CoordinatorState::snapshot() const {
  ActorSnapshot s;
  s.role = "coordinator";
  s.state = "running";
  s.detail = std::to_string(joined_.size()) + "/" + std::to_string(world_size_) +
             " ranks joined, L=" + std::to_string(job_->logical_shards);
  if (!done_.empty()) s.epoch = done_.rbegin()->first;
  return s;
}

}  // namespace shardyard::actors
