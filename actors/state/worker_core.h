// WorkerCore: what a worker does with a work unit, without CAF.
//
// Without a dispatcher stage (Dispatch::kNone), given its logical shards of an epoch (in
// interleave order, with how many items to take from each), a worker walks the
// round-robin interleave of its shards, reads them chunk by chunk (actors/state/shard_stream.h),
// runs its stages on each item with a per-item random stream, and pushes packets of items
// into its data-plane channel. The order it produces is exactly the rank order restricted
// to its shards, which is what lets the loader merge.
//
// With a dispatcher (the unit names a route), the worker reads nothing itself: it receives
// routed items, or loaded shards of which it takes its part of the item indices (the
// WORKER level: strided or contiguous), runs its stages and pushes the items, each with its
// rank position, into a channel shared by the rank's workers; the loader puts them back in
// order. Before it blocks on the route or on the loader's credit it pushes what it holds,
// so the loader is never left waiting for an item a worker sits on.
//
// A resumed unit restores stateful stages; every item of a stateful pipeline carries the
// stages' state right after it.
//
// DispatchCore is the dispatcher's producing side: it reads the rank's share (all of its
// logical shards), runs the non-replicable prefix of the pipeline on every item in rank
// order, and sends items (round robin, on request) or whole loaded shards (broadcast,
// loading the next ones ahead on other threads) into the route.
//
// Both report to the monitor as they go (job->status, role_stats.h): items and bytes as
// they leave, time spent reading or waiting for routed items (input) and blocked on a full
// channel or the loader's credit (output).
//
// Single-owner: one WorkerCore per worker thread, one DispatchCore per dispatcher feed.
// run() blocks (reads, backpressure).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "actors/state/job.h"
#include "actors/state/role_stats.h"
#include "io/format/sample_reader.h"

namespace shardyard::actors {

struct UnitStats {
  uint64_t items = 0;
  uint64_t bytes = 0;
};

// A range of a pipeline's stages, built for one thread: runs them on items.
class StageRunner {
 public:
  // Builds stages [begin, end) of the job's pipeline, opens them for `identity` and restores
  // their saved states (encode_stage_states blobs; one without a rescale).
  static Result<StageRunner> open(const JobData& job, size_t begin, size_t end,
                                  const WorkerInfo& identity,
                                  const std::vector<std::string>& saved_states, bool rescaled);
  bool empty() const { return stages_.empty(); }
  bool stateful() const { return !stateful_.empty(); }
  // Runs the stages on `item`; an error names the item.
  Status process(Item& item, const WorkerInfo& identity, uint64_t epoch_key);
  // The encoded states of the stateful stages now (after the last processed item).
  std::shared_ptr<const std::string> state() const;

 private:
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<Stage*> stateful_;
  mutable std::vector<std::string> scratch_;
};

// What a worker actor runs its units with: a WorkerCore on the actor's own thread (placement
// `inproc`), or a worker process driven from it (placement `local`, actors/worker_process.h).
class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  // Called once on the thread that will run the units, before the first (a worker process
  // starts here, so that the first epoch does not wait for it).
  virtual void prepare() {}
  // Produces the unit into `channel` and finishes the channel (with the error, if any).
  virtual Result<UnitStats> run(const WorkUnit& unit, io::Channel& channel) = 0;
};

class WorkerCore : public UnitRunner {
 public:
  WorkerCore(std::shared_ptr<const JobData> job, uint32_t rank, uint32_t worker);
  Result<UnitStats> run(const WorkUnit& unit, io::Channel& channel) override;
  // The same with the route given (a worker process receives routed items from its rank,
  // not from the job's data plane).
  Result<UnitStats> run(const WorkUnit& unit, io::Channel& channel, io::Route* route);
  // Called with every item before the worker's stages run on it (a worker process shows
  // its rank which item it is on, so that a crash in a stage names the item).
  void set_on_item(std::function<void(const Item&)> on_item) { on_item_ = std::move(on_item); }
  // Items of loaded shards (broadcast) at rank positions below this are skipped, stages and
  // all: a worker process that takes over from a dead one starts where it stopped.
  void set_skip_below(uint64_t position) { skip_below_ = position; }

 private:
  Status produce(const WorkUnit& unit, io::Channel& channel, UnitStats* stats);
  Status consume(const WorkUnit& unit, io::Route& route, io::Channel& channel, UnitStats* stats);

  std::shared_ptr<const JobData> job_;
  WorkerInfo identity_;
  io::SampleReader reader_;
  std::shared_ptr<RoleStats> stats_;  // the worker's, from job->status (null: none)
  std::function<void(const Item&)> on_item_;
  uint64_t skip_below_ = 0;
};

// The WORKER level on a loaded shard of `items` items (broadcast dispatch): worker `worker`
// of `workers` takes indices begin, begin + step, ... below end.
struct ShardPart {
  uint64_t begin = 0, step = 1, end = 0;
};
ShardPart shard_part(uint64_t items, uint32_t worker, uint32_t workers, bool contiguous);

class DispatchCore {
 public:
  DispatchCore(std::shared_ptr<const JobData> job, uint32_t rank);
  // Feeds the unit (the rank's pending shards, in rank order) into `route` and finishes it
  // (with the error, if any).
  Result<UnitStats> run(const WorkUnit& unit, io::Route& route);

 private:
  Status route_items(const WorkUnit& unit, io::Route& route, UnitStats* stats);
  Status broadcast(const WorkUnit& unit, io::Route& route, UnitStats* stats);

  std::shared_ptr<const JobData> job_;
  WorkerInfo identity_;
  io::SampleReader reader_;
  std::shared_ptr<RoleStats> stats_;  // the dispatcher's, from job->status (null: none)
};

}  // namespace shardyard::actors
