// The status of a job as the monitor sees it (GET /status, `shardyard monitor`), as plain
// data, and its JSON (docs/monitor.md has the schema).
//
// A process collects the part it hosts: one RankStatus per rank (its cursor, its logical
// shards' progress, its queues, its checkpoints, its actors), and the job's coordinator
// adds them up into a JobStatus with add_rank(). Today one process hosts the coordinator
// and every rank; a coordinator in a process of its own asks each rank process for its
// RankReport (the status and the metric samples, in one message) and merges them the same
// way, so nothing here assumes one process. Collecting (status_board.h) and rendering
// (status_json) are separate, and the monitor parses what was rendered (parse_status_json).
//
// Plain structs and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/state/messages.h"
#include "runtime/metrics.h"
#include "runtime/status.h"

namespace shardyard::actors {

// A data-plane queue of a rank: a channel from workers to the loader (depth in packets) or
// the route from the dispatcher to the workers (depth in deliveries, capacity 0).
struct QueueStatus {
  std::string name;  // r<rank>/e<epoch>/w<worker>, .../all or .../route
  uint64_t depth = 0;
  uint64_t capacity = 0;
  uint64_t bytes = 0;  // payload bytes queued (channels)
};

struct RankStatus {
  uint32_t rank = 0;
  std::string node;
  uint32_t pid = 0;
  // The cursor: what the trainer consumed of the open (or last) epoch.
  uint32_t epoch = 0;
  bool epoch_open = false;
  uint64_t step = 0;   // batches taken in the epoch
  uint64_t steps = 0;  // batches in the epoch
  uint64_t items = 0;  // items taken in the epoch
  // Per logical shard of the rank in this epoch (parallel vectors): done when consumed ==
  // take, unseen when consumed == 0 < take.
  std::vector<uint32_t> shards;
  std::vector<uint64_t> take;
  std::vector<uint64_t> consumed;
  std::vector<QueueStatus> queues;
  // Checkpoints: saves done by this run, the last committed generation, the generation a
  // restore started from (0: none), and the generations committed by this run (last 16).
  uint64_t checkpoint_saves = 0;
  uint64_t checkpoint_generation = 0;
  uint64_t restored_generation = 0;
  std::vector<uint64_t> checkpoint_generations;
  std::vector<ActorSnapshot> actors;  // the rank's dispatcher, workers, loader, checkpoint
};

// What a rank process answers its coordinator's status request with (one message).
struct RankReport {
  std::vector<RankStatus> ranks;  // the ranks the process hosts
  MetricsSnapshot metrics;        // their metric samples (labelled by rank and node)
  MailboxOrder order{};           // not sent (actors/state/mailbox_order.h)
};

struct JobStatus {
  // The job (JobInfo and the plan).
  uint32_t world_size = 1;
  uint32_t workers = 1;
  uint32_t batch_size = 1;
  uint32_t logical_shards = 1;
  uint64_t items = 0;  // per epoch, in the whole job
  std::string dispatch;
  std::string fingerprint;
  // Who serves this status.
  std::string node;
  uint32_t pid = 0;
  double uptime_s = 0;
  std::vector<ActorSnapshot> actors;  // the coordinator's first, then each rank's
  std::vector<RankStatus> ranks;      // by rank, their actors moved into `actors`
};

// Adds a rank's part: its actors to job->actors, the rest to job->ranks (kept sorted by
// rank). A rank already there is replaced.
void add_rank(JobStatus* job, RankStatus rank);

std::string status_json(const JobStatus& status, int indent = -1);
// The JSON of status_json() back; kInvalidArgument naming what is missing or mistyped.
Result<JobStatus> parse_status_json(const std::string& text);

}  // namespace shardyard::actors
