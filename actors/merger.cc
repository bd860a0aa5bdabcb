#include "actors/merger.h"

#include <algorithm>

namespace shardyard::actors {

RankMerger::RankMerger(std::shared_ptr<const JobData> job, uint32_t rank, EpochTicket ticket,
                       std::vector<std::shared_ptr<io::Channel>> channels)
    : job_(std::move(job)),
      rank_(rank),
      ticket_(std::move(ticket)),
      channels_(std::move(channels)),
      exact_(channels_.size() > 1 || job_->topology.workers == 1),
      pending_(channels_.size()),
      cursor_(ticket_.take, ticket_.consumed),
      index_of_shard_(job_->shards.count(), UINT32_MAX) {
  for (uint32_t k = 0; k < ticket_.shards.size(); ++k) index_of_shard_[ticket_.shards[k]] = k;
  step_ = ticket_.first_step;
  for (auto c : ticket_.consumed) consumed_ += c;
}

uint64_t RankMerger::batch_begin(uint64_t step) const {
  const auto& t = ticket_;
  return t.layout_offset + shardyard::batch_begin(t.layout_items, t.steps - t.layout_step0,
                                                  job_->batch_size, step - t.layout_step0);
}

Result<Item> RankMerger::take(uint32_t ch) {
  auto& p = pending_[ch];
  while (p.left() == 0) {
    p.packet.items.clear();
    p.next = 0;
    SY_ASSIGN_OR_RETURN(bool got, channels_[ch]->pop(&p.packet));
    if (!got)
      return internal_error("rank " + std::to_string(rank_) + ": worker channel " +
                            std::to_string(ch) + " ended early at item " +
                            std::to_string(consumed_) + " of " + std::to_string(ticket_.items));
  }
  return std::move(p.packet.items[p.next++]);
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
  }
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t k;
    Item it;
    if (exact_) {
      k = cursor_.next();
      SY_ASSIGN_OR_RETURN(it, take(ticket_.worker_of[k]));
      if (it.shard != ticket_.shards[k])
        return internal_error(
            "rank " + std::to_string(rank_) + ": expected an item of logical shard " +
            std::to_string(ticket_.shards[k]) + ", got one of " + std::to_string(it.shard));
    } else {
      SY_ASSIGN_OR_RETURN(it, take(0));
      k = it.shard < index_of_shard_.size() ? index_of_shard_[it.shard] : UINT32_MAX;
      if (k == UINT32_MAX)
        return internal_error("rank " + std::to_string(rank_) + ": got an item of logical shard " +
                              std::to_string(it.shard) + ", which is not this rank's");
    }
    if (progress) {
      progress->shard_index.push_back(k);
      if (it.stage_state) {
        const uint32_t w = ticket_.worker_of[k];
        auto at = std::find_if(progress->states.begin(), progress->states.end(),
                               [w](const auto& p) { return p.first == w; });
        if (at == progress->states.end()) {
          progress->states.emplace_back(w, std::move(it.stage_state));
        } else {
          at->second = std::move(it.stage_state);
        }
      }
    }
    items->push_back(std::move(it));
  }
  consumed_ += n;
  ++step_;
  if (step_ == ticket_.steps) SY_RETURN_IF_ERROR(check_drained());
  return true;
}

Batch RankMerger::build(std::vector<Item>& items, uint64_t step) const {
  return build_batch(items, ticket_.epoch, step, rank_, *job_->pool);
}

Result<std::optional<Batch>> RankMerger::next(StepProgress* progress) {
  std::vector<Item> items;
  uint64_t step = 0;
  SY_ASSIGN_OR_RETURN(bool got, take_step(&items, &step, progress));
  if (!got) return std::optional<Batch>();
  return std::optional<Batch>(build(items, step));
}

Status RankMerger::check_drained() {
  // Without drop_last every produced item must have been consumed; with it, workers stop at
  // the plan's take counts, so the channels must be at their end too.
  for (size_t ch = 0; ch < channels_.size(); ++ch) {
    if (pending_[ch].left() > 0)
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
                       std::vector<std::shared_ptr<const std::string>> initial_states)
    : consumed_(ticket.consumed), states_(std::move(initial_states)) {
  consumed_.resize(ticket.shards.size(), 0);
  states_.resize(workers);
}

void RankCursor::apply(const StepProgress& p) {
  for (auto k : p.shard_index) ++consumed_[k];
  for (const auto& [w, s] : p.states) states_[w] = s;
}

std::vector<std::string> RankCursor::worker_states() const {
  std::vector<std::string> out(states_.size());
  for (size_t w = 0; w < states_.size(); ++w)
    if (states_[w]) out[w] = *states_[w];
  return out;
}

void RankMerger::cancel() {
  for (auto& c : channels_) c->cancel();
}

}  // namespace shardyard::actors
