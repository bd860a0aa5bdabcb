#include "actors/state/merger.h"

#include <algorithm>

namespace shardyard::actors {

RankMerger::RankMerger(std::shared_ptr<const JobData> job, uint32_t rank, EpochTicket ticket,
                       std::vector<std::shared_ptr<io::Channel>> channels, bool exact,
                       std::shared_ptr<io::Route> route, StageRunner post)
    : job_(std::move(job)),
      rank_(rank),
      ticket_(std::move(ticket)),
      channels_(std::move(channels)),
      exact_(exact),
      pending_(channels_.size()),
      cursor_(route ? std::vector<uint64_t>() : ticket_.take, ticket_.consumed),
      index_of_shard_(job_->shards.count(), UINT32_MAX),
      route_(std::move(route)),
      post_(std::move(post)) {
  for (uint32_t k = 0; k < ticket_.shards.size(); ++k) index_of_shard_[ticket_.shards[k]] = k;
  step_ = ticket_.first_step;
  for (auto c : ticket_.consumed) consumed_ += c;
  start_ = consumed_;
  taken_ = consumed_;
  if (route_) route_->consumed(start_);  // a resumed epoch's positions start at its cursor
  if (route_ && exact_) {
    ring_.resize(route_->window());
    present_.assign(route_->window(), 0);
  }
  identity_ = loader_identity(*job_, rank_, ticket_.epoch);
}

WorkerInfo loader_identity(const JobData& job, uint32_t rank, uint32_t epoch) {
  WorkerInfo w;
  w.rank = rank;
  w.world_size = job.topology.ranks;
  w.num_workers = job.topology.workers;
  w.global_worker = rank * job.topology.workers;
  w.seed = job.plan.seed;
  w.epoch = epoch;
  return w;
}

Status RankMerger::take_position(uint64_t position, Item* out) {
  const uint64_t size = ring_.size();
  while (!present_[position % size]) {
    auto& p = pending_[0];
    p.packet.items.clear();
    credit_taken();  // before blocking: the workers may wait for it
    SY_ASSIGN_OR_RETURN(bool got, channels_[0]->pop(&p.packet));
    if (!got)
      return internal_error("rank " + std::to_string(rank_) + ": the workers ended early at item " +
                            std::to_string(position) + " of " +
                            std::to_string(start_ + ticket_.items));
    for (auto& item : p.packet.items) {
      // The route never lets an item run more than the window ahead of what was taken.
      if (item.position < position || item.position >= position + size ||
          present_[item.position % size])
        return internal_error("rank " + std::to_string(rank_) + ": item at position " +
                              std::to_string(item.position) + " arrived while position " +
                              std::to_string(position) + " was awaited");
      const uint64_t slot = item.position % size;
      ring_[slot] = std::move(item);
      present_[slot] = 1;
    }
  }
  present_[position % size] = 0;
  *out = std::move(ring_[position % size]);
  return Status::ok();
}

// A step's items may come from more positions than the route lets the dispatcher and the
// workers run ahead of the last credit (a batch larger than the window, or, in broadcast,
// than the shards loaded ahead), so the credit cannot wait for the step's end: what the
// step took so far is credited whenever the merger is about to block for more.
void RankMerger::credit_taken() {
  if (route_) route_->consumed(taken_);
}

uint64_t RankMerger::batch_begin(uint64_t step) const {
  const auto& t = ticket_;
  return t.layout_offset + shardyard::batch_begin(t.layout_items, t.steps - t.layout_step0,
                                                  job_->batch_size, step - t.layout_step0);
}

Status RankMerger::take(uint32_t ch, Item* out) {
  auto& p = pending_[ch];
  while (p.left() == 0) {
    p.packet.items.clear();
    p.next = 0;
    credit_taken();  // before blocking: the workers may wait for it
    SY_ASSIGN_OR_RETURN(bool got, channels_[ch]->pop(&p.packet));
    if (!got)
      return internal_error("rank " + std::to_string(rank_) + ": worker channel " +
                            std::to_string(ch) + " ended early at item " +
                            std::to_string(consumed_) + " of " + std::to_string(ticket_.items));
  }
  *out = std::move(p.packet.items[p.next++]);
  return Status::ok();
}

Result<bool> RankMerger::take_step(std::vector<Item>* items, uint64_t* step,
                                   StepProgress* progress) {
  *step = step_;
  if (step_ >= ticket_.steps) return false;
  const uint64_t n = batch_begin(step_ + 1) - batch_begin(step_);
  items->clear();
  items->reserve(n);
  if (progress) {
    progress->shard_index.clear();
    progress->states.clear();
    progress->dispatcher_state = nullptr;
    progress->loader_state = nullptr;
  }
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t k;
    // Taken straight into its place: an Item is 160 bytes, and each move of one, and the
    // destruction of what it moved from, costs again for every item of the epoch.
    Item& it = items->emplace_back();
    taken_ = consumed_ + i;
    if (exact_ && !route_) {  // follow the interleave: the owner of the position's shard
      k = cursor_.next();
      SY_RETURN_IF_ERROR(take(ticket_.worker_of[k], &it));
      if (it.shard != ticket_.shards[k])
        return internal_error(
            "rank " + std::to_string(rank_) + ": expected an item of logical shard " +
            std::to_string(ticket_.shards[k]) + ", got one of " + std::to_string(it.shard));
    } else {  // by position (routed, exact) or as they come; the item names its shard
      SY_RETURN_IF_ERROR(exact_ ? take_position(consumed_ + i, &it) : take(0, &it));
      k = it.shard < index_of_shard_.size() ? index_of_shard_[it.shard] : UINT32_MAX;
      if (k == UINT32_MAX)
        return internal_error("rank " + std::to_string(rank_) + ": got an item of logical shard " +
                              std::to_string(it.shard) + ", which is not this rank's");
    }
    if (progress) {
      progress->shard_index.push_back(k);
      if (it.dispatch_state) progress->dispatcher_state = std::move(it.dispatch_state);
      if (it.stage_state) {
        const uint32_t w = route_ ? it.worker : ticket_.worker_of[k];
        auto at = std::find_if(progress->states.begin(), progress->states.end(),
                               [w](const auto& p) { return p.first == w; });
        if (at == progress->states.end()) {
          progress->states.emplace_back(w, std::move(it.stage_state));
        } else {
          at->second = std::move(it.stage_state);
        }
      }
    }
  }
  if (!post_.empty()) {
    ScopedWorkerInfo scoped(&identity_);
    for (auto& it : *items) {
      SY_RETURN_IF_ERROR(post_.process(it, identity_, epoch_key(job_->plan.seed, ticket_.epoch)));
    }
    if (progress && post_.stateful()) progress->loader_state = post_.state();
  }
  consumed_ += n;
  if (route_) route_->consumed(consumed_);  // credit: the route may run further ahead
  ++step_;
  if (step_ == ticket_.steps) SY_RETURN_IF_ERROR(check_drained());
  return true;
}

Result<Batch> RankMerger::build(std::vector<Item>& items, uint64_t step) const {
  return build_batch(items, ticket_.epoch, step, rank_, *job_->pool);
}

Result<std::optional<Batch>> RankMerger::next(StepProgress* progress) {
  std::vector<Item> items;
  uint64_t step = 0;
  SY_ASSIGN_OR_RETURN(bool got, take_step(&items, &step, progress));
  if (!got) return std::optional<Batch>();
  SY_ASSIGN_OR_RETURN(Batch b, build(items, step));
  return std::optional<Batch>(std::move(b));
}

Status RankMerger::check_drained() {
  // Without drop_last every produced item must have been consumed; with it, workers stop at
  // the plan's take counts, so the channels must be at their end too.
  for (auto p : present_)
    if (p)
      return internal_error("rank " + std::to_string(rank_) +
                            ": the workers produced more items than planned");
  for (size_t ch = 0; ch < channels_.size(); ++ch) {
    if (pending_[ch].left() > 0 && !(route_ && exact_))
      return internal_error("rank " + std::to_string(rank_) + ": worker channel " +
                            std::to_string(ch) + " produced more items than planned");
    io::Packet extra;
    SY_ASSIGN_OR_RETURN(bool got, channels_[ch]->pop(&extra));
    if (got)
      return internal_error("rank " + std::to_string(rank_) + ": worker channel " +
                            std::to_string(ch) + " produced more items than planned");
  }
  return Status::ok();
}

RankCursor::RankCursor(const EpochTicket& ticket, uint32_t workers,
                       std::vector<std::shared_ptr<const std::string>> initial_states,
                       std::shared_ptr<const std::string> dispatcher_state,
                       std::shared_ptr<const std::string> loader_state)
    : consumed_(ticket.consumed),
      states_(std::move(initial_states)),
      dispatcher_(std::move(dispatcher_state)),
      loader_(std::move(loader_state)) {
  consumed_.resize(ticket.shards.size(), 0);
  states_.resize(workers);
}

void RankCursor::apply(const StepProgress& p) {
  for (auto k : p.shard_index) ++consumed_[k];
  for (const auto& [w, s] : p.states) states_[w] = s;
  if (p.dispatcher_state) dispatcher_ = p.dispatcher_state;
  if (p.loader_state) loader_ = p.loader_state;
}

std::vector<std::string> RankCursor::worker_states() const {
  std::vector<std::string> out(states_.size());
  for (size_t w = 0; w < states_.size(); ++w)
    if (states_[w]) out[w] = *states_[w];
  return out;
}

void RankMerger::cancel() {
  for (auto& c : channels_) c->cancel();
  if (route_) route_->cancel();
}

}  // namespace shardyard::actors
