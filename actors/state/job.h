// JobData: what every role of one process needs to read, built once by make_job() from one
// JobOptions and shared read-only: the manifest and its item index, the logical shards, the
// plan spec, the pipeline spec, the file system and clock of the job's Env, the buffer pool
// and the data plane. It is handed to actors when they are spawned (never inside a message:
// it is process-local).
//
// Thread-safe to read; nothing in it changes after make_job() (the pool, the data plane, the
// file system and the clock are internally synchronised).
#pragma once

#include <memory>

#include "actors/state/messages.h"
#include "io/format/sample_reader.h"
#include "io/fs/file_system.h"
#include "io/transport/data_plane.h"
#include "runtime/buffer.h"
#include "runtime/clock.h"
#include "runtime/manifest.h"
#include "runtime/pipeline.h"
#include "runtime/pipeline_cut.h"
#include "runtime/shard.h"

namespace shardyard::actors {

class StatusBoard;  // status_board.h

struct JobData {
  std::shared_ptr<const Manifest> manifest;
  ItemIndex index;
  LogicalShards shards;
  PlanSpec plan;  // with logical_shards and chunk_items resolved
  // Items a worker's stream reads from a logical shard at once: plan.chunk_items, or fewer
  // where the order does not depend on the chunks (no shuffle, samples read as a stream:
  // runtime/shard.h default_read_items). Windows are read a chunk at a time whatever the
  // order (a read of fewer windows reads their shared records more often), and a loaded
  // shard (broadcast) is read whole.
  uint32_t read_items = 1;
  Spec pipeline;
  Topology topology;
  uint32_t batch_size = 1;
  bool exact_order = true;   // the loader merges in the global order (Order::kExact)
  FileSystem* fs = nullptr;  // sources and checkpoints
  Clock* clock = nullptr;
  std::shared_ptr<BufferPool> pool;
  std::shared_ptr<DataPlane> data_plane;
  uint32_t packet_items = 128;       // items per data-plane packet
  uint64_t packet_bytes = 4u << 20;  // or fewer when they reach this many bytes
  Dispatch dispatch = Dispatch::kNone;
  SpecCut cut;                     // where each stage of `pipeline` runs
  uint32_t prefetch_shards = 1;    // broadcast: logical shards loaded ahead of the one in use
  std::string route_key_field;     // by key: route by this field's bytes (empty: the item key)
  io::SampleReaderOptions reader;  // of every SampleReader (the bound on one sample's bytes)
  uint32_t checkpoint_timeout_ms = 120000;  // how long a save waits for the other ranks
  // Members of local tar shards at least this long are left unread by a worker that reads
  // its own shards and read straight into their batch columns (runtime/item.h
  // Field::unread()); 0 when off (LoaderOptions::read_into_batch_bytes) or when a stage of
  // the pipeline reads field bytes.
  uint64_t unread_field_bytes = 0;
  // What the roles of this process report to the monitor (null: nothing is reported).
  std::shared_ptr<StatusBoard> status;

  JobInfo info() const;
  // Whether building a batch is where most of its bytes are read: members left unread by
  // the workers (unread_field_bytes) make up the job's samples, local tar shards whose
  // samples are that long on average, read by the workers themselves.
  bool collates_from_files() const;
  // Logical shards each worker of a rank interleaves (rounded up).
  uint64_t shards_per_worker() const;
  // Items in one data-plane packet of items of `mean_payload` bytes: packet_items, or
  // fewer where that many reach packet_bytes first (actors/state/worker_core.cc Packer).
  uint64_t items_per_packet(uint64_t mean_payload) const;
  // Packets each worker queues for its loader where LoaderOptions::prefetch_packets is 0.
  // In exact order a worker whose channel is full sleeps while the loader waits for the
  // other workers' items, so its queue must span the rhythm of its reads: a stream reads
  // `read_items` of each logical shard it interleaves in turn, so every that many rounds
  // its items come at the cost of a read each. The default is the packets of one such round,
  // 1 to 3; anything deeper only holds bytes that leave the cache before they are collated
  // (docs/performance.md, "Packets queued per worker"). In any order (Order::kAsCompleted)
  // nothing waits for a lagging worker: 1. Dispatched jobs keep 3.
  uint32_t default_prefetch_packets() const;
};

// Everything make_job() needs, in one struct (defaults as in LoaderOptions).
struct JobOptions {
  std::shared_ptr<const Manifest> manifest;
  PlanSpec plan;
  Spec pipeline;
  Topology topology;
  uint32_t batch_size = 1;
  bool exact_order = true;  // Order::kExact
  Dispatch dispatch = Dispatch::kNone;
  uint32_t prefetch_shards = 1;
  std::string route_key_field;
  uint32_t checkpoint_timeout_ms = 120000;
  uint64_t max_sample_bytes = kDefaultMaxSampleBytes;           // the bound on one sample's bytes
  uint64_t read_into_batch_bytes = kDefaultReadIntoBatchBytes;  // LoaderOptions's
  // From the job's Env: required.
  FileSystem* fs = nullptr;
  Clock* clock = nullptr;
  std::shared_ptr<DataPlane> data_plane;
  std::shared_ptr<StatusBoard> status;  // what the roles report to the monitor (null: nothing)
};

// Resolves defaults (L, chunk size, the dispatch mode) and validates the spec against the
// manifest, and the pipeline's cut (runtime/pipeline_cut.h) for the dispatch mode: a
// pipeline that cannot be cut fails here, before any epoch starts. Broadcast dispatch
// orders each rank's shards one after another (PlanSpec::sequential), takes a whole
// logical shard as its shuffle block unless chunk_items is set, and splits a loaded
// shard's items among workers by the WORKER strategy, contiguous or strided.
Result<std::shared_ptr<const JobData>> make_job(JobOptions options);

}  // namespace shardyard::actors
