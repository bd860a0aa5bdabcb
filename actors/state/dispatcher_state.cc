#include "actors/state/dispatcher_state.h"

namespace shardyard::actors {

Result<EpochAssignment> DispatcherState::start_epoch(const EpochStart& start, const EpochKey& key) {
  const auto& job = *job_;
  std::optional<EpochCursor> cursor;
  std::vector<std::string> states, dispatcher_states;
  bool rescaled = false, ranks_changed = false;
  if (resume_ && resume_->epoch == start.epoch && resume_->partial) {
    const auto& g = *resume_;
    cursor = EpochCursor{
        g.epoch, g.step,         g.take,          g.consumed,    g.saved_ranks, g.saved_batch_size,
        g.steps, g.layout_step0, g.layout_offset, g.layout_items};
    states = g.worker_states;
    dispatcher_states = g.dispatcher_states;
    rescaled = g.rescaled;
    ranks_changed = g.ranks_changed;
  }
  SY_ASSIGN_OR_RETURN(auto plan,
                      plan_epoch(*job.manifest, job.index, job.shards, job.plan, job.topology,
                                 job.batch_size, start.epoch, cursor ? &*cursor : nullptr));
  if (key.epoch != start.epoch || key.key != plan.epoch_key)
    return internal_error("rank " + std::to_string(rank_) + ": the coordinator's key for epoch " +
                          std::to_string(start.epoch) + " differs from this rank's plan");
  const uint32_t w_count = job.topology.workers;
  if (start.channels.size() != 1 && start.channels.size() != w_count)
    return invalid_argument("epoch start names " + std::to_string(start.channels.size()) +
                            " channels for " + std::to_string(w_count) + " workers");
  const auto& rp = plan.ranks[rank_];
  EpochAssignment a;
  a.ticket.epoch = start.epoch;
  a.ticket.steps = plan.steps;
  a.ticket.items = rp.items;
  a.ticket.shards = rp.shards;
  a.ticket.take = rp.take;
  a.ticket.consumed = rp.consumed;
  a.ticket.worker_of = rp.worker_of;
  a.ticket.first_step = plan.first_step;
  a.ticket.layout_step0 = plan.layout_step0;
  a.ticket.layout_offset = rp.layout_offset;
  a.ticket.layout_items = rp.layout_items;
  a.units.resize(w_count);
  for (uint32_t w = 0; w < w_count; ++w) {
    auto& u = a.units[w];
    u.rank = rank_;
    u.worker = w;
    u.epoch = start.epoch;
    u.epoch_key = key.key;
    u.channel = start.channels.size() == 1 ? start.channels[0] : start.channels[w];
    u.route = start.route;
    u.rescaled = rescaled;
    if (rescaled) {
      u.stage_states = states;  // every saved state: the stages merge them
    } else if (w < states.size() && !states[w].empty()) {
      u.stage_states = {states[w]};
    }
  }
  if (!start.route.empty()) {
    if (job.dispatch == Dispatch::kNone)
      return invalid_argument("epoch start names a route, but the job has no dispatch mode");
    WorkUnit feed;
    feed.rank = rank_;
    feed.worker = w_count;  // not a worker: the dispatcher
    feed.epoch = start.epoch;
    feed.epoch_key = key.key;
    feed.route = start.route;
    feed.stage_states = dispatcher_states;
    feed.rescaled = ranks_changed;
    a.feed = std::move(feed);
  }
  for (size_t k = 0; k < rp.shards.size(); ++k) {
    auto& u = a.feed ? *a.feed : a.units[rp.worker_of[k]];
    // The feed keeps consumed shards too: its rank positions start after all they held.
    if (rp.take[k] == rp.consumed[k] && !a.feed) continue;
    u.shards.push_back(rp.shards[k]);
    u.take.push_back(rp.take[k]);
    u.consumed.push_back(rp.consumed[k]);
  }
  if (cursor) resume_.reset();  // a restart of this epoch later starts it afresh
  epoch_ = start.epoch;
  outstanding_ = w_count + (a.feed ? 1 : 0);
  items_done_ = bytes_done_ = 0;
  failure_.clear();
  return a;
}

void DispatcherState::unit_done(const WorkerDone& done) {
  if (done.epoch != epoch_) return;
  if (outstanding_ > 0) --outstanding_;
  items_done_ += done.items;
  bytes_done_ += done.bytes;
  if (!done.ok && failure_.empty()) failure_ = done.error;
}

ActorSnapshot DispatcherState::snapshot() const {
  ActorSnapshot s;
  s.role = "dispatcher";
  s.rank = rank_;
  s.epoch = epoch_;
  s.items = items_done_;
  s.bytes = bytes_done_;
  s.state = !failure_.empty() ? "failed" : outstanding_ > 0 ? "running" : "idle";
  s.detail =
      std::to_string(outstanding_) + " units out" + (failure_.empty() ? "" : ": " + failure_);
  return s;
}

}  // namespace shardyard::actors
