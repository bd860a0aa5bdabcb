#include "actors/state/coordinator_state.h"

#include "runtime/shard.h"

namespace shardyard::actors {

Status checkpoint_aborted(const std::string& dir, uint32_t epoch, uint64_t step, uint32_t rank,
                          const std::string& error) {
  return io_error("checkpoint into " + dir + " at epoch " + std::to_string(epoch) + " step " +
                  std::to_string(step) + " aborted: rank " + std::to_string(rank) +
                  " could not write its file: " + error +
                  "; the last committed checkpoint stays the latest");
}

Result<JobInfo> CoordinatorState::join(const JoinRequest& req) {
  if (req.protocol_version != kProtocolVersion)
    return invalid_argument(
        "rank " + std::to_string(req.rank) + " speaks protocol version " +
        std::to_string(req.protocol_version) + "; this coordinator speaks version " +
        std::to_string(kProtocolVersion) + ": run the same shardyard release on every rank");
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

Result<uint64_t> CoordinatorState::begin_save(const CheckpointBegin& b) {
  if (b.rank >= job_.world_size)
    return invalid_argument("rank " + std::to_string(b.rank) + " is outside a world of " +
                            std::to_string(job_.world_size));
  if (joined_.size() != job_.world_size)
    return invalid_argument("a checkpoint is a cut across every rank, and only " +
                            std::to_string(joined_.size()) + " of " +
                            std::to_string(job_.world_size) +
                            " ranks joined this coordinator; host every rank in one Cluster");
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
  if (pending_->saved.size() < job_.world_size) return std::optional<CheckpointManifest>();
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
  m.topology = CheckpointTopology{job_.world_size, job_.workers, job_.batch_size, job_.exact_order};
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
  if (aborted_->told.size() >= job_.world_size) aborted_.reset();
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
  if (aborted_->told.size() >= job_.world_size) aborted_.reset();
  return error;
}

CheckpointJob CoordinatorState::checkpoint_job() const {
  return CheckpointJob{
      job_.fingerprint, job_.num_items, job_.logical_shards,       job_.chunk_items,    job_.seed,
      job_.shuffle,     job_.drop_last, job_.distributed_strategy, job_.worker_strategy};
}

Result<ResumeGrant> CoordinatorState::resume(const ResumeOffer& offer) {
  SY_ASSIGN_OR_RETURN(auto ckpt, decode_checkpoint(offer.manifest, offer.rank_files, offer.dir));
  const auto& m = ckpt.manifest;
  SY_RETURN_IF_ERROR(check_same_job(m.job, checkpoint_job()));
  if (resumed_generation_ && *resumed_generation_ != m.generation)
    return invalid_argument("rank " + std::to_string(offer.rank) +
                            " loaded checkpoint generation " + std::to_string(m.generation) +
                            " from " + offer.dir + "; other ranks resumed generation " +
                            std::to_string(*resumed_generation_));
  resumed_generation_ = m.generation;
  last_generation_ = std::max(last_generation_, m.generation);

  ResumeGrant g;
  g.generation = m.generation;
  g.epoch = ckpt.resume_epoch();
  g.partial = !m.epoch_complete;
  g.rescaled = m.topology.ranks != job_.world_size || m.topology.workers != job_.workers;
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
      g.worker_states = ckpt.ranks[offer.rank].worker_states;
    }
    // The dispatcher's and the loader's stages are one per rank: other workers change
    // nothing for them, other ranks make them merge every rank's state.
    g.ranks_changed = m.topology.ranks != job_.world_size;
    if (g.ranks_changed) {
      for (const auto& r : ckpt.ranks) {
        if (!r.dispatcher_state.empty()) g.dispatcher_states.push_back(r.dispatcher_state);
        if (!r.loader_state.empty()) g.loader_states.push_back(r.loader_state);
      }
    } else {
      g.dispatcher_states = {ckpt.ranks[offer.rank].dispatcher_state};
      g.loader_states = {ckpt.ranks[offer.rank].loader_state};
    }
  }
  return g;
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
