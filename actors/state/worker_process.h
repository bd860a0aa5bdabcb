// Worker processes (placement `local`, docs/worker-processes.md): each of a rank's workers
// runs in a process of its own, forked by the program's fork server or the same program
// started again in worker mode (actors/state/worker_spawn.h), and hands its items to the
// rank through the shared-memory data plane (io/transport/shm_channel.h).
//
// The rank side is a UnitRunner (worker_core.h) that the worker actor runs its units with:
// it starts its worker process when the first unit comes, sends it the job once (the
// manifest as a read-only shared segment, the rest as a small frame) and every unit on a
// control socket, and copies the pointers of the items it pops from the unit's shared
// channel into the rank's channel, counting what it handed over. When the process dies (a
// signal, a crash in a stage, the OOM killer) the runner sees its socket close at once,
// reaps it, logs pid, signal and unit, starts a new one and gives it the rest of the unit:
// the unit again with each shard's consumed count raised by what was handed over and the
// stage states of the last item handed over, so the trainer gets every item exactly once
// and in the same order as an undisturbed run. A process that dies again and again before
// it hands over another item (a poison sample) stops the run after max_restarts restarts,
// naming the item it was on (the worker writes the key of the item in its stages to a
// shared page before the stages run).
//
// The worker process dies with its rank: it asks the kernel for SIGKILL when the thread that
// started it ends (PR_SET_PDEATHSIG), and it exits when its control socket closes.
//
// Thread-safety: a ProcessRunner belongs to one worker actor's thread; the WorkerLaunch
// is immutable and shared (its restart counter is atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/state/job.h"
#include "actors/state/worker_core.h"
#include "actors/state/worker_frames.h"
#include "io/transport/item_codec.h"
#include "io/transport/shm_segment.h"
#include "io/transport/shm_shard.h"
#include "runtime/window.h"

namespace shardyard::actors {

// The descriptor number of a worker process's control socket; set in a worker process only.
inline constexpr char kWorkerFdEnv[] = "SHARDYARD_WORKER_FD";
// The pid of the rank process that started it (a worker whose parent is gone exits).
inline constexpr char kWorkerParentEnv[] = "SHARDYARD_WORKER_PARENT";

struct WorkerProcessOptions {
  std::string binary;             // the program started in worker mode; empty: this one
  uint32_t max_restarts = 3;      // restarts of one worker without progress before the run stops
  uint64_t arena_bytes = 0;       // shared arena of each worker's channel (and its data arena,
                                  // when it has one); 0: sized from the job
  uint32_t prefetch_batches = 2;  // LoaderOptions::prefetch_batches (sizes the arena)
  std::string shm_dir;            // where arenas live; empty: $SHARDYARD_SHM_DIR, else /dev/shm
  int start_timeout_ms = 60000;   // a new worker process must be ready within this
  // A windows dataset is rebuilt by each worker from its sources (stat calls only).
  std::vector<std::string> sources;
  unsigned scan_threads = 2;
  // Where deaths and restarts are told (one line each); null: stderr.
  std::function<void(const std::string&)> log;
};

// A loaded shard's image, and the parts of it that the feeds gave worker processes and got
// back whole (UnitFeed).
struct SharedImage {
  explicit SharedImage(io::ShmShardImage made) : image(std::move(made)) {}
  io::ShmShardImage image;
  std::atomic<uint32_t> parts{0};
  std::atomic<uint32_t> handed{0};
};

// What every worker process of one job needs, made once per job and shared by the runners.
class WorkerLaunch {
 public:
  static Result<std::shared_ptr<WorkerLaunch>> create(const JobData& job,
                                                      WorkerProcessOptions options);
  const WorkerProcessOptions& options() const { return options_; }
  const WorkerJob& job() const { return job_; }  // rank and worker left 0
  // A read-only descriptor of the encoded manifest (none for a windows dataset).
  Result<io::UniqueFd> manifest_fd() const;
  bool has_manifest_segment() const { return manifest_.has_value(); }
  uint64_t arena_bytes() const { return arena_bytes_; }
  // The data arena of each worker's channel (io/transport/shm_channel.h data_bytes); 0 when
  // the workers read no chunk into one.
  uint64_t data_bytes() const { return data_bytes_; }
  // Worker processes restarted so far, over the whole job.
  uint64_t restarts() const { return restarts_.load(); }
  void count_restart() { restarts_.fetch_add(1); }
  void log(const std::string& line) const;
  // Maps bytes [offset, offset + size) of the job's source `source` for an item a worker
  // process named by file range (io/transport/item_codec.h): checked against the manifest,
  // mapped as the rank's own reader maps (guarded), read where a file cannot be mapped.
  // Empty for a windows dataset. Thread-safe.
  const io::FileRanges& file_ranges() const { return file_ranges_; }
  // The image of a loaded shard (broadcast) that every worker process of `rank` maps: made
  // by the first worker's feed that needs it, shared by the others while any holds it.
  // A feed holds it until its worker process handed back the last item of its part of the
  // shard (SharedImage::parts and handed), having copied every window of it into its arena
  // first. When the last holder lets go and every part was handed back whole, no process
  // reads the image any more, and its room (segment and mapping) is kept for a later
  // shard's image (io::ShmImageRoom). Not after an abandoned unit (a worker may still be
  // reading), and not where a stage of the job reads field bytes: such a stage might keep
  // an item of the shard and read it later, so its bytes must stay as they are while the
  // mapping lives (Item::owner).
  Result<std::shared_ptr<SharedImage>> shard_image(
      uint32_t rank, const std::shared_ptr<const io::SharedShard>& shard);

 private:
  WorkerLaunch() = default;
  WorkerProcessOptions options_;
  WorkerJob job_;
  std::optional<io::ShmSegment> manifest_;
  io::FileRanges file_ranges_;
  uint64_t arena_bytes_ = 0;
  uint64_t data_bytes_ = 0;
  std::atomic<uint64_t> restarts_{0};
  struct Image {
    std::weak_ptr<const io::SharedShard> shard;
    std::weak_ptr<SharedImage> image;
  };
  std::mutex images_mu_;
  std::map<std::pair<uint32_t, const io::SharedShard*>, Image> images_;  // guarded by images_mu_
  // The rooms of images no process reads any more (the last ones given back, at most 2).
  struct Rooms {
    bool enabled = false;  // no stage of the job reads field bytes
    std::mutex mu;
    std::vector<io::ShmImageRoom> idle;  // guarded by mu
    // Keeps `given` as the newest idle rooms, 2 at most in all: the ones let go come back,
    // for the caller to unmap and close without the lock.
    std::vector<io::ShmImageRoom> keep(std::vector<io::ShmImageRoom> given);
  };
  const std::shared_ptr<Rooms> rooms_ = std::make_shared<Rooms>();
};

// The runner of worker `worker` of rank `rank`: its process starts with the first unit and
// stops when the runner is destroyed (at most 5 s, then SIGKILL).
std::shared_ptr<UnitRunner> make_process_runner(std::shared_ptr<WorkerLaunch> launch,
                                                std::shared_ptr<const JobData> job, uint32_t rank,
                                                uint32_t worker);

// The body of a worker process: when this process was started as one (kWorkerFdEnv is set)
// it runs until its rank closes the control socket and returns the exit code; otherwise
// nullopt at once.
std::optional<int> run_worker_process_if_requested();

// The same body in a worker process forked by the fork server (actors/state/fork_server.h),
// on its end of the control socket.
int serve_worker_process(io::UniqueFd control);

// Starts this process's worker fork server (ForkServer::start with serve_worker_process).
Status start_worker_fork_server();

}  // namespace shardyard::actors
