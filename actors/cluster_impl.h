// Cluster's private state, shared by the two files that implement it: actors/cluster.cc
// (LoaderOptions, starting and stopping the job's actors) and actors/loader.cc (a rank's
// Loader: epochs, batches, checkpoints). Not installed; include only from those two.
//
// Thread-safety: Impl::mu guards what the SY_GUARDED_BY annotations say.
#pragma once

#include "actors/loader.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "actors/device_feed.h"
#include "actors/monitor.h"
#include "actors/net/host.h"
#include "actors/net/network.h"
#include "actors/protocol.h"
#include "actors/roles.h"
#include "actors/state/job.h"
#include "actors/state/merger.h"
#include "actors/state/placement.h"
#include "actors/state/status_board.h"
#include "actors/state/worker_process.h"
#include "io/format/manifest_scan.h"
#include "io/format/record_scan.h"
#include "io/format/sample_reader.h"
#include "io/fs/mapping_guard.h"
#include "runtime/metrics_text.h"
#include "runtime/mutex.h"

namespace shardyard {

using namespace actors;  // NOLINT: the glue of the actors layer (a private header of two files)

// ---- cluster -----------------------------------------------------------------------------

struct RankRoles {
  loader_actor loader;
  dispatcher_actor dispatcher;
  checkpoint_actor checkpoint;
  std::vector<worker_actor> workers;
  bool loader_open = false;
  std::vector<std::weak_ptr<io::Channel>> channels;  // of the open epoch
  std::weak_ptr<io::Route> route;                    // of the open epoch
};

// The actor system and the configuration it refers to. Shared by the calls that use it, so
// that shutdown() on one thread never destroys it under another thread's request: the last
// one to let go of it waits for the actors to finish.
struct ActorSystem {
  explicit ActorSystem(std::unique_ptr<caf::actor_system_config> c)
      : cfg(std::move(c)), sys(*cfg) {}
  std::unique_ptr<caf::actor_system_config> cfg;
  caf::actor_system sys;
};

struct Cluster::Impl {
  // Set by start(), then read-only.
  LoaderOptions options;
  ScanReport report;
  std::shared_ptr<const JobData> job;
  std::unique_ptr<DeviceFeed> device;     // null: batches stay in host memory
  std::unique_ptr<net::TlsIdentity> tls;  // ranks in other processes, off loopback
  bool networked = false;                 // the world has ranks in other processes
  // The monitor of this process's ranks (made by start(), never reset: its endpoints stop
  // with shutdown(), and it answers nothing after that).
  std::unique_ptr<JobMonitor> monitor;
  // Placement kLocal: what every worker process of the job is started with (null: inproc).
  std::shared_ptr<WorkerLaunch> workers;

  Mutex mu;
  std::shared_ptr<ActorSystem> system SY_GUARDED_BY(mu);  // null once shut down
  coordinator_actor coordinator SY_GUARDED_BY(mu);        // hosted here (in process, or rank 0)
  net::gate_actor gate SY_GUARDED_BY(mu);                 // hosted here for other processes' ranks
  // What this process's ranks talk to: the coordinator, or its gate in another process.
  coordinator_actor job_coordinator SY_GUARDED_BY(mu);
  std::map<uint32_t, RankRoles> ranks SY_GUARDED_BY(mu);
  bool stopped SY_GUARDED_BY(mu) = false;
  Status failure SY_GUARDED_BY(mu);  // why the job stopped under this process
  // The first error each hosted rank's Loader met (its leave reports it).
  std::map<uint32_t, Status> rank_errors SY_GUARDED_BY(mu);

  // The job stopped (the coordinator said so, or went away): every open epoch is
  // cancelled, so that a trainer waiting in next() hears of it at once. Once the owner has
  // shut this cluster down, its ranks have left the job and the coordinator going away
  // (its process stops once every rank left) is no failure: the trainer hears kCancelled.
  void stop_job(Status why) SY_EXCLUDES(mu) {
    {
      MutexLock lock(&mu);
      if (!failure.is_ok() || stopped) return;
      failure = std::move(why);
    }
    cancel_epochs();
  }
  // Packets each worker queues for its loader: options.prefetch_packets, or where that is
  // 0 the job's default (JobData::default_prefetch_packets).
  uint32_t prefetch_packets() const {
    return options.prefetch_packets ? options.prefetch_packets : job->default_prefetch_packets();
  }
  Status job_failure() SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    return failure;
  }
  void cancel_epochs() SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    for (auto& [r, roles] : ranks) {
      for (auto& weak : roles.channels)
        if (auto ch = weak.lock()) ch->cancel();
      if (auto route = roles.route.lock()) route->cancel();
    }
  }

  // The actor system, or kCancelled after shutdown().
  Result<std::shared_ptr<ActorSystem>> running() SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    if (stopped || !system) return cancelled("the cluster was shut down");
    return system;
  }
  // A copy of a hosted rank's handles.
  RankRoles roles_of(uint32_t rank) SY_EXCLUDES(mu) {
    MutexLock lock(&mu);
    return ranks.at(rank);
  }
};

}  // namespace shardyard
