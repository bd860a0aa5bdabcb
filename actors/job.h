// JobData: what every role of one process needs to read, built once and shared read-only:
// the manifest and its item index, the logical shards, the plan spec, the pipeline spec,
// the file system, the buffer pool and the data plane. It is handed to actors when they are
// spawned (never inside a message: it is process-local).
//
// Thread-safe to read; nothing in it changes after make_job() (the pool and the data plane
// are internally synchronised).
#pragma once

#include <memory>

#include "actors/protocol.h"
#include "io/data_plane.h"
#include "io/file_system.h"
#include "runtime/buffer.h"
#include "runtime/manifest.h"
#include "runtime/pipeline.h"
#include "runtime/shard.h"

namespace shardyard::actors {

struct JobData {
  std::shared_ptr<const Manifest> manifest;
  ItemIndex index;
  LogicalShards shards;
  PlanSpec plan;  // with logical_shards and chunk_items resolved
  Spec pipeline;
  Topology topology;
  uint32_t batch_size = 1;
  bool exact_order = true;  // the loader merges in the global order (Order::kExact)
  io::FileSystem* fs = nullptr;
  std::shared_ptr<BufferPool> pool;
  std::shared_ptr<io::DataPlane> data_plane;
  uint32_t packet_items = 128;       // items per data-plane packet
  uint64_t packet_bytes = 4u << 20;  // or fewer when they reach this many bytes

  JobInfo info() const;
};

// Resolves defaults (L, chunk size) and validates the spec against the manifest.
Result<std::shared_ptr<JobData>> make_job(std::shared_ptr<const Manifest> manifest, PlanSpec plan,
                                          Spec pipeline, Topology topology, uint32_t batch_size,
                                          io::FileSystem* fs);

}  // namespace shardyard::actors
