// Pipeline: stages as data (Spec), a registry that builds them by type name, and the
// worker identity every stage and source can read.
//
// A Spec is a list of stage type names with string parameters. It is plain data so a
// worker in another process builds the same pipeline from the same registry (register
// user stages in every process before opening a loader). A stage is replicable (map():
// every worker runs its own instance on its own items) or non-replicable (once(): one
// instance per rank, fed every item of the rank in order). Stages after merge() run once
// per rank in the loader, on the merged rank order (post-processing). Where each stage
// runs is decided by cut_pipeline() (runtime/pipeline_cut.h): the prefix up to the last
// non-replicable stage before the merge runs in the rank's dispatcher, the rest of the
// stages before the merge in every worker. A stage that keeps state across items declares
// it (Stage::has_state) so checkpoints can carry it.
//
// Per-item randomness comes from StageContext::rng, a counter-based stream keyed by
// (seed, epoch, item id): an augmentation draws the same numbers whatever worker, rank or
// topology runs the item.
//
// Thread-safety: StageRegistry is internally synchronised. A Stage instance belongs to one
// worker thread. current_worker() is thread-local.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/hash.h"
#include "runtime/item.h"
#include "runtime/status.h"

namespace shardyard {

// Who is running: set for every worker thread and passed to every stage.
struct WorkerInfo {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t worker = 0;
  uint32_t num_workers = 1;
  uint32_t global_worker = 0;  // rank * num_workers + worker
  uint32_t epoch = 0;
  uint64_t seed = 0;
  bool dispatcher = false;  // a non-replicable stage run by the rank's dispatcher
};

// The identity of the calling worker thread, or nullptr outside a worker (like torch's
// get_worker_info()).
const WorkerInfo* current_worker();

// Sets current_worker() for the calling thread for the scope's life.
class ScopedWorkerInfo {
 public:
  explicit ScopedWorkerInfo(const WorkerInfo* info);
  ~ScopedWorkerInfo();
  ScopedWorkerInfo(const ScopedWorkerInfo&) = delete;
  ScopedWorkerInfo& operator=(const ScopedWorkerInfo&) = delete;

 private:
  const WorkerInfo* previous_;
};

struct StageContext {
  const WorkerInfo& worker;
  ItemRng rng;  // keyed by (seed, epoch, item id)
};

class Stage {
 public:
  virtual ~Stage() = default;
  // Called once per epoch before the first item, on the worker thread.
  virtual Status open(const WorkerInfo& /*worker*/) { return Status::ok(); }
  // Transforms one item in place. An error stops the run and names the item.
  virtual Status process(Item& item, StageContext& ctx) = 0;

  // State kept across items (a running statistic, a sampler's position) is declared, so a
  // checkpoint can carry it: a stage with has_state() is asked for save_state() after every
  // item it processes (keep it small), and the checkpoint keeps the state as of the last
  // item of this worker that the trainer consumed. Stateless stages need none of this:
  // per-item randomness comes from StageContext::rng.
  virtual bool has_state() const { return false; }
  virtual std::string save_state() const { return {}; }
  // Called after open() when an epoch resumes from a checkpoint. Without a rescale `saved`
  // holds this worker's own state; after one (other ranks or workers) it holds the saved
  // state of every worker of the checkpoint that had one, and the stage merges them.
  virtual Status restore_state(const std::vector<std::string>& /*saved*/, bool /*rescaled*/) {
    return Status::ok();
  }
};

using StageParams = std::map<std::string, std::string>;

struct StageSpec {
  std::string type;
  StageParams params;
  bool replicable = true;  // false: exactly one instance per rank
};

// The pipeline as data:
//   Spec().once("dedupe").map("decode").map("crop", {{"size", "224"}}).merge().once("stats")
class Spec {
 public:
  // A replicable stage: every worker runs its own copy on its own items.
  Spec& map(std::string type, StageParams params = {});
  // A non-replicable stage: one copy per rank sees every item of the rank, in rank order.
  Spec& once(std::string type, StageParams params = {});
  // The merge point: the stages added after it run in the loader, once per rank, on the
  // merged rank order (post-processing).
  Spec& merge();
  const std::vector<StageSpec>& stages() const { return stages_; }
  std::vector<StageSpec>& mutable_stages() { return stages_; }
  // Index of the first stage after the merge point (stages().size() without one).
  size_t merge_at() const { return merge_at_ ? merge_at_ - 1 : stages_.size(); }
  bool has_merge() const { return merge_at_ != 0; }

 private:
  std::vector<StageSpec> stages_;
  size_t merge_at_ = 0;  // 1 + index of the first post stage; 0 = no merge point
};

// A Spec as one line of text, the same for equal specs, so that processes compare and pass
// pipelines as data: stages in order separated by spaces, each `map/TYPE` or `once/TYPE`
// with parameters as `:key=value;key=value` (sorted by key), and the merge point as
// `merge`: "once/dedupe map/crop:size=224 merge once/stats". Bytes other than letters,
// digits and -_.,+@ are written %XX.
std::string spec_to_string(const Spec& spec);
// The inverse; an error names the token it cannot read.
Result<Spec> spec_from_string(const std::string& text);

using StageFactory = std::function<Result<std::unique_ptr<Stage>>(const StageParams&)>;
// A map stage from a plain function.
using MapFn = std::function<Status(Item&, StageContext&)>;
StageFactory map_stage(MapFn fn);

// Built in: "select_fields" (fields=a,b: keep only these), "drop_fields" (fields=a,b),
// "rename_field" (from=x, to=y), "count" (field=seq: numbers the items an instance sees;
// stateful), "sleep" (us=N: waits N microseconds per item, a stand-in for a costly
// transform).
//
// A stage type that never reads the bytes of the fields it gets (it keeps, drops, renames or
// adds fields, or only looks at keys) is registered with reads_bytes = false, as the
// built-ins are: a job whose stages are all such types leaves large members of local tar
// shards unread until the batch is built, and reads them straight into their columns
// (Field::unread()). Such a stage may therefore get unread fields (no bytes in memory, only
// their place in the file: Field::data is null); it must not read them. A stage registered
// as reading bytes never sees an unread field.
class StageRegistry {
 public:
  static StageRegistry& global();
  Status add(const std::string& type, StageFactory factory, bool reads_bytes = true);
  Result<std::unique_ptr<Stage>> make(const StageSpec& spec) const;
  bool contains(const std::string& type) const;
  // False only for a type registered with reads_bytes = false (true for unknown ones).
  bool reads_bytes(const std::string& type) const;

 private:
  StageRegistry();
  mutable std::mutex mu_;
  std::map<std::string, StageFactory> factories_;  // guarded by mu_
  std::set<std::string> blind_;                    // guarded by mu_: reads_bytes() false
};

// Whether any stage of `spec` reads field bytes (StageRegistry::reads_bytes).
bool spec_reads_bytes(const Spec& spec);

// Builds every stage of a spec, failing on the first unknown type or bad parameter.
Result<std::vector<std::unique_ptr<Stage>>> build_pipeline(const Spec& spec);
// Builds stages [begin, end) of a spec.
Result<std::vector<std::unique_ptr<Stage>>> build_stages(const Spec& spec, size_t begin,
                                                         size_t end);

}  // namespace shardyard
