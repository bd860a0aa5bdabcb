// RankMerger: turns the output of a rank's workers into that rank's batches.
//
// In exact order it walks the rank's interleave (from the EpochTicket) and takes each next
// item from the worker that owns that position's logical shard, so the batches are the
// same whatever the number of workers. With a dispatcher that routes items (a route), the
// workers share one channel and every item carries its rank position: the merger puts them
// back in order in a reorder buffer as large as the route's window, and credits the route
// with what it took (whenever it is about to block for more, so a batch may span more than
// the window), which is the route's backpressure. In as-completed order it takes
// items as they arrive on one channel shared by all workers (exactly once still holds, the
// order does not). Stages after the pipeline's merge point run here, on the rank order.
// Batch sizes follow the epoch plan (equal step counts on every rank); a resumed epoch
// starts at the ticket's first step with every shard at its consumed position.
//
// What each step consumed (which logical shard each item came from, and the stage state
// of each worker after its last item in the step) comes out with the step, so the loader
// can advance its checkpoint cursor when the trainer takes the batch, not when it is built.
//
// Thread-compatible: take_step() must be called by one thread at a time (steps come out in
// order); build() may run on several threads at once; cancel() from any thread.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "actors/state/job.h"
#include "actors/state/worker_core.h"
#include "runtime/batch.h"

namespace shardyard::actors {

// Who runs the stages after the merge point: the rank's loader (worker 0 of W, not the
// dispatcher).
WorkerInfo loader_identity(const JobData& job, uint32_t rank, uint32_t epoch);

struct StepProgress {
  std::vector<uint32_t> shard_index;  // ticket index of each item's logical shard
  // Worker -> its stage state after its last item in the step (stateful pipelines only).
  std::vector<std::pair<uint32_t, std::shared_ptr<const std::string>>> states;
  // The dispatcher's stages after the step's last item, and the loader's (post) stages
  // after the step (null when they have no state).
  std::shared_ptr<const std::string> dispatcher_state;
  std::shared_ptr<const std::string> loader_state;
};

// The trainer-side cursor of a rank's epoch: what has been consumed, per shard of the
// ticket, and each worker's stage state as of its last consumed item.
class RankCursor {
 public:
  RankCursor() = default;
  // Initial states: what a resume restored (per worker, the dispatcher's, the loader's).
  RankCursor(const EpochTicket& ticket, uint32_t workers,
             std::vector<std::shared_ptr<const std::string>> initial_states,
             std::shared_ptr<const std::string> dispatcher_state = nullptr,
             std::shared_ptr<const std::string> loader_state = nullptr);
  void apply(const StepProgress& p);
  const std::vector<uint64_t>& consumed() const { return consumed_; }
  // Encoded state per worker ("" when a worker's pipeline has no state).
  std::vector<std::string> worker_states() const;
  std::string dispatcher_state() const { return dispatcher_ ? *dispatcher_ : std::string(); }
  std::string loader_state() const { return loader_ ? *loader_ : std::string(); }

 private:
  std::vector<uint64_t> consumed_;  // by ticket index
  std::vector<std::shared_ptr<const std::string>> states_;
  std::shared_ptr<const std::string> dispatcher_, loader_;
};

class RankMerger {
 public:
  // One channel per worker (exact order without a route) or one shared by all; `route`
  // when a dispatcher routes items; `post` the stages after the merge point (may be empty).
  RankMerger(std::shared_ptr<const JobData> job, uint32_t rank, EpochTicket ticket,
             std::vector<std::shared_ptr<io::Channel>> channels, bool exact,
             std::shared_ptr<io::Route> route = nullptr, StageRunner post = StageRunner());
  // The items of the next step, in order, and that step's number; false after the last
  // step. On an error `*step` is the step that failed. `progress` (optional) receives what
  // the step consumes.
  Result<bool> take_step(std::vector<Item>* items, uint64_t* step,
                         StepProgress* progress = nullptr);
  // Collates a step's items (one copy of each payload; unread fields are read into their
  // columns, which can fail). Safe to call concurrently.
  Result<Batch> build(std::vector<Item>& items, uint64_t step) const;
  // take_step() then build(): the next batch of the epoch, or nullopt after the last one.
  Result<std::optional<Batch>> next(StepProgress* progress = nullptr);
  void cancel();
  uint64_t steps() const { return ticket_.steps; }
  const EpochTicket& ticket() const { return ticket_; }
  uint64_t step() const { return step_; }
  uint64_t items_consumed() const { return consumed_; }

 private:
  Status take(uint32_t channel, Item* out);
  Status take_position(uint64_t position, Item* out);  // route: reorder by rank position
  Status check_drained();
  void credit_taken();  // credits the route with the items taken so far (taken_)
  // Same layout as EpochPlan::batch_begin, from the ticket.
  uint64_t batch_begin(uint64_t step) const;

  std::shared_ptr<const JobData> job_;
  uint32_t rank_;
  EpochTicket ticket_;
  std::vector<std::shared_ptr<io::Channel>> channels_;
  // One channel per worker: follow the interleave. One shared channel: take as they come.
  bool exact_;
  // Per channel: the packet being taken from and the position of its next item (no
  // per-item queue: items are moved out of the packet in place).
  struct Pending {
    io::Packet packet;
    size_t next = 0;
    size_t left() const { return packet.items.size() - next; }
  };
  std::vector<Pending> pending_;
  InterleaveCursor cursor_;
  std::vector<uint32_t> index_of_shard_;  // logical shard -> ticket index
  std::shared_ptr<io::Route> route_;
  std::vector<Item> ring_;        // reorder buffer: position p waits in ring_[p % size]
  std::vector<uint8_t> present_;  // by ring slot
  StageRunner post_;
  WorkerInfo identity_;  // of the loader's post stages
  uint64_t start_ = 0;   // rank position of the epoch's first delivered item
  uint64_t step_ = 0;
  uint64_t consumed_ = 0;
  uint64_t taken_ = 0;  // consumed_ plus the items of the step being taken
};

}  // namespace shardyard::actors
