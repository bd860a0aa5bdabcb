// The trainer-facing API: open a loader, iterate batches, read the worker identity.
//
//   LoaderOptions opt;
//   opt.sources = {"/data/train-{000000..000127}.tar"};
//   opt.workers = 4;  opt.batch_size = 256;  opt.plan.shuffle = true;  opt.plan.seed = 17;
//   SY_RETURN_IF_ERROR(opt.topology_from_env());      // RANK / WORLD_SIZE, OMPI_*, SLURM_*
//   SY_ASSIGN_OR_RETURN(auto loader, Loader::open(opt));
//   for (uint32_t epoch = 0; epoch < 3; ++epoch) {
//     SY_RETURN_IF_ERROR(loader->start_epoch(epoch));
//     for (;;) {
//       SY_ASSIGN_OR_RETURN(auto batch, loader->next());
//       if (!batch) break;                             // end of the epoch
//       train(batch->field("jpg"), batch->field("cls"));
//     }
//   }
//
// A Loader is one rank. Loader::open() runs the rank's roles inside the calling process
// (placement `inproc`): a coordinator, the rank's dispatcher, its workers (threads) and its
// loader actor, all CAF actors. Cluster runs several ranks of one job in one process (what
// `shardyard run --ranks R` does); each rank's Loader is then used from its own thread.
//
// What the process provides (file system, clock, data plane, actor-system configuration) comes
// from one Env (actors/env.h), Env::Default() unless LoaderOptions::env names another.
//
// Installed as <shardyard/loader.h>; it and the headers it includes name public types only.
//
// With LoaderOptions::device set, every batch next() returns also has its columns in device
// memory, copied ahead of the trainer on a stream of their own, and a ready event
// (gpu::on_device(batch), docs/gpu.md).
// Thread-compatible: one thread uses a Loader. Errors are values; nothing throws.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/env.h"
#include "gpu/device.h"
#include "runtime/batch.h"
#include "runtime/manifest.h"
#include "runtime/pipeline.h"
#include "runtime/pipeline_cut.h"
#include "runtime/shard.h"
#include "runtime/window.h"

namespace shardyard {

// Where a rank's workers run (docs/worker-processes.md).
enum class WorkerPlacement {
  kInproc,  // threads of the trainer's process (the default)
  kLocal,   // a process each, on the trainer's node; items cross through shared memory
};

enum class Order {
  kExact,        // batches in the global order: identical whatever the number of workers
  kAsCompleted,  // items as workers finish them: exactly once, order not reproducible
};

struct LoaderOptions {
  std::vector<std::string> sources;  // paths, URLs, brace patterns, directories, s3 prefixes/
  // Time-series windows over raw record files (docs/windows.md). length 0 (the default):
  // the sources are tar shards. Otherwise every source is a file of record_bytes-sized
  // records and the items are windows; the default L is then one logical shard per source.
  WindowSpec windows;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t workers = 2;  // data workers per rank
  // kLocal: every worker is a process of its own, this program started again in worker
  // mode (the program calls worker_main() at the top of main, below), or worker_binary.
  // A worker process that dies is replaced and its unit goes on where the trainer's
  // batches stand: every item exactly once, the same batches as an undisturbed run.
  WorkerPlacement placement = WorkerPlacement::kInproc;
  std::string worker_binary;  // kLocal: the program started in worker mode; empty: this one
  // kLocal: restarts of one worker in a row without progress (the same item killing it)
  // before the run stops, naming the item.
  uint32_t max_worker_restarts = 3;
  // kLocal: the shared-memory arena of each worker's channel, in /dev/shm (or
  // $SHARDYARD_SHM_DIR); 0: sized from the batch and the mean sample.
  uint64_t shm_arena_bytes = 0;
  uint32_t batch_size = 64;
  PlanSpec plan;  // L, seed, shuffle, drop_last, strategies
  Order order = Order::kExact;
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  // Members WebDataset's rule skips (docs/tar.md: no key.ext name, links, ...) are skipped
  // and counted (Manifest::members_skipped); true makes each one but a directory entry
  // damage, handled by on_corrupt.
  bool strict_members = false;
  // The pipeline: replicable stages (Spec::map) run by every worker, non-replicable ones
  // (Spec::once) once per rank in its dispatcher, stages after Spec::merge() in the loader
  // (runtime/pipeline_cut.h decides; a pipeline that cannot be cut fails open()).
  Spec pipeline;
  // How the dispatcher feeds the workers (runtime/pipeline_cut.h): kNone, every worker
  // reads its own logical shards (the default; round robin when the pipeline has
  // non-replicable stages); kRoundRobin or kOnRequest, the dispatcher reads and routes
  // items; kBroadcast, the dispatcher loads whole logical shards, shared read-only by the
  // workers, each taking its part of every shard's items (contiguous or strided, by
  // plan.worker_strategy); kByKey, the dispatcher reads and routes by a routing key
  // (route_key_field). Batches in exact order are the same in every mode but
  // broadcast, whose rank order takes its shards one after another.
  Dispatch dispatch = Dispatch::kNone;
  uint32_t prefetch_shards = 1;  // broadcast: shards loaded ahead of the one in use
  // kByKey: items go to worker hash(routing key) mod W, so every item of a key meets the
  // same worker's stages (a per-key cache, a per-key sequence). The routing key is this
  // field's bytes (a non-replicable stage can compute it), or the item's key when empty.
  std::string route_key_field;
  // Batches collated ahead of the trainer (0 = always collate in next()). Collator threads
  // build ahead once the trainer is seen to spend time between batches (its step took
  // longer than collating a batch, three steps in a row); until then next() collates in
  // the trainer's thread, which spares two thread hand-offs per batch where the trainer
  // waits for data anyway. `prefetch_eager` starts them building at once. Where building a
  // batch reads its large members from local shards (read_into_batch_bytes), two collators
  // build each batch together from the first one, at any depth above 0: a depth of 1 then
  // holds the columns of two batches (the trainer's and the next) with two readers.
  uint32_t prefetch_batches = 2;
  bool prefetch_eager = false;
  // Packets queued per worker (each up to 128 items or 4 MiB). Each also holds the chunks
  // its items were read from until they are collated. 0 (the default) lets the job choose:
  // in exact order the packets of one round of a worker's reads, 1 to 3 (on 64 shards of
  // 4 KiB samples and 2 workers, 1 read in order and 3 shuffled); 1 in any order; 3 with a
  // dispatcher (actors/state/job.h JobData::default_prefetch_packets, docs/performance.md
  // "Packets queued per worker"). Cluster::prefetch_packets() says what a job uses.
  uint32_t prefetch_packets = 0;
  // What the job takes from the process (actors/env.h); null = Env::Default(). Its file
  // system serves every source and receives checkpoints: by default local paths, http://,
  // https:// and s3:// uris (configured from the environment; only local paths can be
  // written). A user file system (a database, an object store client) comes in through a
  // FileSystemEnv; its reads run on the worker threads, where current_worker() says who is
  // reading. Must outlive the loader.
  Env* env = nullptr;
  // The most bytes one sample may occupy (its tar members with their headers, inflated for
  // a .tar.gz shard; a window's records): a larger one fails the run, naming its key, before
  // the first batch. Bounds the memory a decompression bomb can take.
  uint64_t max_sample_bytes = kDefaultMaxSampleBytes;
  // Members of local tar shards at least this long are not read (nor mapped) by the workers
  // but read with one positioned read straight into their place in the batch's column, when
  // no stage of the pipeline reads field bytes (StageRegistry::add's reads_bytes) and the
  // job reads through the default file system (not an Env's own). Smaller members, and every
  // member of other jobs, are read as before. 0: off.
  uint64_t read_into_batch_bytes = kDefaultReadIntoBatchBytes;
  // false: scan the sources every time and write no cache; a cached manifest of these
  // sources that differs from the scan is removed.
  bool use_manifest_cache = true;
  // Empty: $SHARDYARD_CACHE_DIR, else $XDG_CACHE_HOME/shardyard, else ~/.cache/shardyard.
  std::string cache_dir;
  unsigned scan_threads = 2;
  // How long save() and restore() wait for the other ranks and the coordinator (and each
  // step of a save for the one it waits on).
  uint32_t checkpoint_timeout_ms = 120000;
  // Where batches are delivered (docs/gpu.md). Empty: host memory. "cuda:N" ("cuda" is
  // cuda:0): columns are collated into pinned memory and copied to GPU N on a stream of
  // their own, device_prefetch batches ahead of the trainer; every batch has its columns in
  // device memory and a ready event (gpu::on_device). "host": a stand-in device in host
  // memory that runs the same path without a GPU. open() fails when the device is unusable.
  std::string device;
  uint32_t device_prefetch = 2;  // batches whose copies run ahead of the trainer, 1..64
  // A device of the caller's instead of `device` (a backend of its own, or one that injects
  // faults in tests); the loader and its batches share it.
  std::shared_ptr<gpu::Device> custom_device;

  // Ranks in several processes or on several nodes (docs/multi-process.md). A Loader whose
  // world has ranks outside its process joins the job's coordinator over the network:
  // `coordinator` names it (HOST:PORT), or `rendezvous_file` holds its address (one node,
  // rank 0 writes it). With host_coordinator this process listens there itself (rank 0
  // under torchrun or mpirun); otherwise it connects, retrying for join_timeout_ms. The
  // job's token comes from `token` or `token_file`; a coordinator off loopback needs one,
  // and connections off loopback are mutual TLS with the token's identity (force_tls: on
  // loopback too). topology_from_env() sets all of these from the launcher's variables.
  std::string coordinator;
  std::string rendezvous_file;
  bool host_coordinator = false;
  std::string token;
  std::string token_file;
  bool force_tls = false;
  uint32_t restart_count = 0;  // the launcher's restart (TORCHELASTIC_RESTART_COUNT)
  // How long every rank may take to join once the first did; the job starts only then.
  uint32_t join_timeout_ms = 300000;
  // How long the process hosting the coordinator waits at shutdown for the other ranks to
  // leave (they lose the coordinator with it).
  uint32_t leave_timeout_ms = 120000;
  uint32_t heartbeat_interval_ms = 500;
  uint32_t connection_timeout_ms = 5000;  // a peer silent this long is lost

  // The job's monitoring endpoints (docs/monitor.md): GET /metrics (Prometheus text) and
  // GET /status (JSON) over HTTP on metrics_address:metrics_port, served on a thread of
  // their own while the loader (its Cluster) lives. -1: not served; 0: a free port
  // (Cluster::monitor_port() says which). The address is loopback unless set otherwise:
  // anyone who can reach it can read the job's state (no authentication).
  int32_t metrics_port = -1;
  std::string metrics_address = "127.0.0.1";

  // Sets metrics_port (and metrics_address) from SHARDYARD_METRICS_PORT (and
  // SHARDYARD_METRICS_ADDRESS), which a launcher sets for the processes it starts; leaves
  // them alone when unset. A value that is not a port is an error.
  Status monitor_from_env();
  // Sets rank, world_size and the coordinator's whereabouts from the launcher's variables
  // (actors/state/placement.h): SHARDYARD_*, torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
  // MASTER_ADDR, MASTER_PORT, ...), Open MPI (OMPI_COMM_WORLD_*), MPICH (PMI_RANK, PMI_SIZE),
  // SLURM (SLURM_PROCID, SLURM_NTASKS, ...), first found wins; leaves them alone when none
  // is set. Set explicit values after calling it: they win.
  Status topology_from_env();
  Status validate() const;
};

const char* worker_placement_name(WorkerPlacement p);
Result<WorkerPlacement> parse_worker_placement(const std::string& name);

// The entry of a worker process (placement local): a program that opens loaders with
// placement local calls it at the top of main, after registering its stages and before
// anything else:
//   int main(int argc, char** argv) {
//     register_my_stages();
//     if (auto code = shardyard::worker_main()) return *code;
//     ...
// In a process started as a worker it serves its rank and returns the exit code when the
// rank lets it go; in any other process it returns nullopt at once.
std::optional<int> worker_main();

// Optional, for a program that opens loaders with placement local: call it right after
// worker_main() returned nullopt, while the process has one thread. It forks a small
// process, the fork server, that forks this program's worker processes from this image
// when loaders ask for them, so that a worker process starts without an exec and without
// loading the program and its libraries again (docs/worker-processes.md, "How a worker
// process starts"). Loaders with no worker_binary then use it; where it was not started, or
// is gone, they start the program again in worker mode. kInvalidArgument when the process
// has more than one thread or a fork server already.
Status start_worker_fork_server();

// CPU seconds (user + system, summed) and the largest peak RSS of the worker processes of
// this process (placement local) that have ended, whether it started them or its fork
// server did (getrusage's RUSAGE_CHILDREN sees the fork server's only once the server
// itself has ended).
struct EndedWorkerUsage {
  double cpu_seconds = 0;
  long peak_rss_kb = 0;
};
EndedWorkerUsage ended_worker_process_usage();

class Cluster;
namespace actors {
struct RestoreRequest;
}  // namespace actors

// Where a restored job resumes (Loader::restore).
struct ResumePoint {
  uint32_t epoch = 0;  // the first epoch to run: start_epoch(epoch) continues it
  uint64_t step = 0;   // the number of its first batch (0 when the cut was an epoch's end)
  uint64_t generation = 0;
  bool rescaled = false;  // the checkpoint was taken at another number of ranks or workers
};

class Loader {
 public:
  // Builds or loads the manifest and starts this rank's roles.
  static Result<std::unique_ptr<Loader>> open(const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) an epoch; an epoch in progress is abandoned.
  Status start_epoch(uint32_t epoch);
  // The next batch of the current epoch; nullopt after its last batch.
  Result<std::optional<Batch>> next();

  // Checkpoints (docs/checkpoint-format.md). save() writes this rank's part of a
  // checkpoint of the whole job into `dir` at the current step, the batches next()
  // returned so far; batches prefetched but not returned are not part of it. Every rank of
  // the job calls save() after the same number of steps (a collective, like a barrier);
  // each returns once CHECKPOINT names every rank's file. It pauses nothing and copies no
  // sample: the state is a cursor per logical shard plus declared stage state. Saving
  // again into the same directory replaces the checkpoint atomically.
  Status save(const std::string& dir);
  // Before the first start_epoch(): loads the checkpoint in `dir`, which the coordinator
  // validates (same dataset, L, seed, plan; not damaged) and maps onto this job's ranks
  // and workers, which may differ from the checkpoint's. Then start_epoch(point.epoch)
  // continues the interrupted epoch: no sample of it is repeated or skipped, and at the
  // same ranks and batch size the batches are bit-identical to an uninterrupted run.
  Result<ResumePoint> restore(const std::string& dir);

  // For trainers that keep the loader's state inside their own checkpoints (as PyTorch's
  // distributed checkpoint keeps a state dict): state() is save() without a directory. Every
  // rank calls it after the same steps, and each gets the whole job's cut as bytes, the same
  // on every rank (a few dozen bytes per logical shard, plus declared stage state); nothing
  // is written. load_state() takes such bytes (any rank's copy) where restore() takes a
  // directory, before the first start_epoch(), with the same guarantees: every rank of the
  // new job must load the same cut, and it may have another number of ranks and workers.
  Result<std::string> state();
  Result<ResumePoint> load_state(const std::string& bytes);

  uint32_t rank() const { return rank_; }
  uint64_t steps_per_epoch() const;  // valid after start_epoch()
  const Manifest& manifest() const;
  Cluster& cluster() { return *cluster_; }

 private:
  friend class Cluster;
  struct Epoch;
  struct Restored;
  Loader(std::shared_ptr<Cluster> cluster, uint32_t rank);
  void stop_epoch();
  // Records an error this rank met (its leave reports it) and returns it, or the reason
  // the job stopped when it did.
  Status failed(Status st);
  // save() into `dir`, or state() when `dir` is empty: the cut's bytes then.
  Result<std::string> save_cut(const std::string& dir);
  Result<ResumePoint> restore_from(const actors::RestoreRequest& request);

  std::shared_ptr<Cluster> cluster_;
  uint32_t rank_;
  std::unique_ptr<Epoch> epoch_;
  std::unique_ptr<Restored> restored_;
};

// What Cluster::snapshot() reports of one actor (a plain copy of actors::ActorSnapshot).
struct RoleSnapshot {
  std::string role;
  uint32_t rank = 0;
  uint32_t worker = 0;
  std::string state;
  uint32_t epoch = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint64_t steps = 0;
  std::string detail;
  std::string node;  // host name
  uint32_t pid = 0;
  double items_per_s = 0;
  uint64_t queue_depth = 0;  // its output queue (docs/monitor.md)
  uint64_t queue_capacity = 0;
  double input_wait_s = 0;   // blocked waiting for input, in total
  double output_wait_s = 0;  // blocked waiting for its consumer, in total
  double uptime_s = 0;
};

// The roles of several ranks of one job in this process, and the actor system they run on.
class Cluster : public std::enable_shared_from_this<Cluster> {
 public:
  // Starts the coordinator and, for every rank in `ranks`, its loader actor, workers and
  // dispatcher. `options.world_size` is the job's world; `ranks` those hosted here.
  static Result<std::shared_ptr<Cluster>> start(const LoaderOptions& options,
                                                std::vector<uint32_t> ranks);
  ~Cluster();
  // A Loader for one of the hosted ranks (at most one open per rank).
  Result<std::unique_ptr<Loader>> loader(uint32_t rank);
  const Manifest& manifest() const;
  const ScanReport& scan_report() const;
  const LoaderOptions& options() const;
  uint32_t logical_shards() const;
  // Packets each worker queues: LoaderOptions::prefetch_packets, or the job's default.
  uint32_t prefetch_packets() const;
  // Every actor's state: the coordinator's asked through its mailbox, the others' read
  // from what they report as they run (a worker in a unit cannot answer a message).
  std::vector<RoleSnapshot> snapshot();
  // Cancels the epoch each hosted rank has open: a next() waiting for data returns
  // kCancelled at once (batches already collated are still handed out first), and that
  // epoch stays failed. For a trainer that stops on a signal; safe from any thread, any
  // number of times. Later epochs start normally.
  void interrupt();
  // Worker processes restarted so far (placement local), over every hosted rank.
  uint64_t worker_restarts() const;
  // The port of the monitoring endpoints (LoaderOptions::metrics_port), 0 when not served.
  uint16_t monitor_port() const;
  // What GET /status and GET /metrics answer (docs/monitor.md), without HTTP.
  std::string status_json();
  std::string metrics_text();
  // Asks every actor to stop and waits for each acknowledgement (also done on destruction).
  Status shutdown();

 private:
  friend class Loader;
  struct Impl;
  Cluster();
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardyard
