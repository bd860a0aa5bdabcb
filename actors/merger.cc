#include "actors/merger.h"

namespace shardyard::actors {

RankMerger::RankMerger(std::shared_ptr<const JobData> job, uint32_t rank, EpochTicket ticket,
                       std::vector<std::shared_ptr<io::Channel>> channels)
    : job_(std::move(job)),
      rank_(rank),
      ticket_(std::move(ticket)),
      channels_(std::move(channels)),
      exact_(channels_.size() > 1 || job_->topology.workers == 1),
      pending_(channels_.size()),
      cursor_(ticket_.take) {}

uint64_t RankMerger::batch_begin(uint64_t step) const {
  return shardyard::batch_begin(ticket_.items, ticket_.steps, job_->batch_size, step);
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

Result<bool> RankMerger::take_step(std::vector<Item>* items, uint64_t* step) {
  *step = step_;
  if (step_ >= ticket_.steps) return false;
  const uint64_t n = batch_begin(step_ + 1) - batch_begin(step_);
  items->clear();
  items->reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (exact_) {
      const uint32_t k = cursor_.next();
      SY_ASSIGN_OR_RETURN(Item it, take(ticket_.worker_of[k]));
      if (it.shard != ticket_.shards[k])
        return internal_error(
            "rank " + std::to_string(rank_) + ": expected an item of logical shard " +
            std::to_string(ticket_.shards[k]) + ", got one of " + std::to_string(it.shard));
      items->push_back(std::move(it));
    } else {
      SY_ASSIGN_OR_RETURN(Item it, take(0));
      items->push_back(std::move(it));
    }
  }
  consumed_ += n;
  ++step_;
  if (step_ == ticket_.steps) SY_RETURN_IF_ERROR(check_drained());
  return true;
}

Batch RankMerger::build(std::vector<Item>& items, uint64_t step) const {
  return build_batch(items, ticket_.epoch, step, rank_, *job_->pool);
}

Result<std::optional<Batch>> RankMerger::next() {
  std::vector<Item> items;
  uint64_t step = 0;
  SY_ASSIGN_OR_RETURN(bool got, take_step(&items, &step));
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

void RankMerger::cancel() {
  for (auto& c : channels_) c->cancel();
}

}  // namespace shardyard::actors
