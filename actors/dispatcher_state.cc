#include "actors/dispatcher_state.h"

namespace shardyard::actors {

Result<EpochAssignment> DispatcherState::start_epoch(const EpochStart& start, const EpochKey& key) {
  const auto& job = *job_;
  SY_ASSIGN_OR_RETURN(auto plan, plan_epoch(*job.manifest, job.index, job.shards, job.plan,
                                            job.topology, job.batch_size, start.epoch));
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
  a.ticket.worker_of = rp.worker_of;
  a.units.resize(w_count);
  for (uint32_t w = 0; w < w_count; ++w) {
    auto& u = a.units[w];
    u.rank = rank_;
    u.worker = w;
    u.epoch = start.epoch;
    u.epoch_key = key.key;
    u.channel = start.channels.size() == 1 ? start.channels[0] : start.channels[w];
  }
  for (size_t k = 0; k < rp.shards.size(); ++k) {
    auto& u = a.units[rp.worker_of[k]];
    if (rp.take[k] == 0) continue;
    u.shards.push_back(rp.shards[k]);
    u.take.push_back(rp.take[k]);
  }
  epoch_ = start.epoch;
  outstanding_ = w_count;
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
