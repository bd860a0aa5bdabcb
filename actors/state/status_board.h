// StatusBoard: what this process knows of the roles it hosts, for the monitor, and its
// metrics registry. Roles write to it as they work; collecting reads it without asking any
// actor (a worker is busy in its unit for a whole epoch and cannot answer a message).
//
// - RoleStats per actor (role_stats.h): made by role(), shared with the actor.
// - RankBoard per rank: the cursor and logical shards of the open epoch (the trainer-side
//   loader sets them, at most every 20 ms), its data-plane queues (looked at through weak
//   pointers: the loader owns them), its checkpoints, and the rank's metrics the loader and
//   the checkpoint actor update (batches, next() wait, step time, save time, saves).
// - collect_rank() makes a rank's RankStatus (job_status.h); the registry's collector adds
//   every role's counters, the queues and the process-wide numbers to each scrape.
//
// Thread-safe. One per job per process (JobData::status), made before any actor starts.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/state/job_status.h"
#include "actors/state/role_stats.h"
#include "io/transport/data_plane.h"
#include "runtime/metrics.h"
#include "runtime/mutex.h"

namespace shardyard::actors {

// One data-plane queue of a rank's open epoch.
struct QueueRef {
  std::string name;  // the channel's or route's name
  std::weak_ptr<io::Channel> channel;
  std::weak_ptr<io::Route> route;
  uint64_t capacity = 0;  // packets (channels); 0 for the route
  int32_t worker = -1;    // the worker that fills the channel; -1: shared by every worker
};

class RankBoard {
 public:
  RankBoard(uint32_t rank, MetricsRegistry& metrics);
  uint32_t rank() const { return rank_; }

  // The trainer-side loader opened an epoch: its shards (ticket order) and queues.
  void open_epoch(const EpochTicket& ticket, std::vector<QueueRef> queues, uint32_t prefetch);
  void set_cursor(uint64_t step, uint64_t items, const std::vector<uint64_t>& consumed);
  void close_epoch();
  void set_ready_batches(size_t n) { ready_.store(n, std::memory_order_relaxed); }
  void checkpoint_committed(uint64_t generation);
  void checkpoint_restored(uint64_t generation);

  // Metrics of the rank (labelled rank="<r>").
  Counter& batches;
  Counter& saves;
  Histogram& next_wait;  // seconds the trainer waited in Loader::next()
  Histogram& step_time;  // seconds between two next() calls: the trainer's step
  Histogram& save_time;  // seconds a Loader::save() took

  // The rank's status (actors left empty: StatusBoard::collect_rank adds them).
  RankStatus collect() const;
  // The output queue of a worker (its channel, or the one it shares), of the dispatcher
  // (the route) and of the loader (batches ready for the trainer).
  QueueStatus worker_queue(uint32_t worker) const;
  QueueStatus route_queue() const;
  QueueStatus batch_queue() const;

 private:
  const uint32_t rank_;
  std::atomic<uint64_t> ready_{0};
  mutable Mutex mu_;
  RankStatus status_ SY_GUARDED_BY(mu_);  // cursor, shards, checkpoints
  std::vector<QueueRef> queues_ SY_GUARDED_BY(mu_);
  uint32_t prefetch_ SY_GUARDED_BY(mu_) = 0;
};

// This machine's name as the monitor shows it (the `node` of every actor and series).
std::string host_name();

class StatusBoard {
 public:
  StatusBoard();  // node = this host's name, pid = this process's
  const std::string& node() const { return node_; }
  uint32_t pid() const { return pid_; }
  MetricsRegistry& metrics() { return metrics_; }

  // The stats of one actor, made on first use (role "worker", "dispatcher", "loader",
  // "checkpoint"; worker 0 for a rank's single roles).
  std::shared_ptr<RoleStats> role(const std::string& role, uint32_t rank, uint32_t worker = 0);
  // The board of one rank, made on first use; valid as long as this StatusBoard.
  RankBoard& rank(uint32_t rank);
  std::vector<uint32_t> ranks() const;

  // One actor's snapshot, with this process's node and pid.
  ActorSnapshot snapshot(const RoleStats& stats) const;
  // A rank's status with its actors (dispatcher, workers, loader, checkpoint).
  RankStatus collect_rank(uint32_t rank) const;
  // Every rank of this process with the metric samples: what a rank process sends.
  RankReport collect_report() const;

 private:
  void collect_metrics(MetricsSnapshot* out) const;

  const std::string node_;
  const uint32_t pid_;
  MetricsRegistry metrics_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<RoleStats>> roles_ SY_GUARDED_BY(mu_);
  std::map<uint32_t, std::unique_ptr<RankBoard>> ranks_ SY_GUARDED_BY(mu_);
};

}  // namespace shardyard::actors
