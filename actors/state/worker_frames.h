// The control frames between a rank and its worker processes (placement local,
// docs/worker-processes.md, "How it works"): what their bodies hold, encoded with
// runtime/codec.h. A decoder takes exactly one body and refuses a short, long or
// inconsistent one (kCorrupt), and never allocates more than the body's bytes can hold;
// tests/fuzz/worker_frame_fuzz.cc checks that an accepted body re-encodes to the same bytes.
//
// Pure functions and value types; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/state/messages.h"
#include "actors/state/worker_core.h"
#include "runtime/shard.h"
#include "runtime/status.h"
#include "runtime/window.h"

namespace shardyard::actors {

enum WorkerFrame : uint16_t {
  kJobFrame = 101,     // rank -> worker: WorkerJob; fds: key page, manifest (tar datasets)
  kReadyFrame = 102,   // worker -> rank: u64 pid
  kUnitFrame = 103,    // rank -> worker: UnitOrder; fds: the unit's channel, its input
  kDoneFrame = 104,    // worker -> rank: items, bytes, status
  kFailedFrame = 105,  // worker -> rank: why it cannot build the job (text)
  // During a unit of a dispatch mode:
  kShardFrame = 106,       // rank -> worker: a loaded shard (broadcast); fd: its image
  kRouteEndFrame = 107,    // rank -> worker: the route ended (its status)
  kCreditWantFrame = 108,  // worker -> rank: u64, wait until the loader consumed below it
  kCreditFrame = 109,      // rank -> worker: u64, the loader consumed everything below it
};
inline constexpr uint32_t kWorkerFrameVersion = 1;
inline constexpr size_t kControlFrameBytes = 1 << 20;  // the largest control frame
// The key page, which a worker process writes before its stages run on an item and the rank
// reads after its death: u64 sequence (odd while the key is written) | u32 length | u32 0 |
// key.
inline constexpr size_t kPageBytes = 4096;
inline constexpr size_t kPageKeyOffset = 16;
inline constexpr size_t kPageKeyBytes = kPageBytes - kPageKeyOffset;

// What a worker process rebuilds its job from (make_job gives it the same JobData).
struct WorkerJob {
  uint64_t fingerprint = 0;  // of the manifest: the worker checks what it decoded or built
  PlanSpec plan;             // resolved (L and chunk size set)
  std::string pipeline;      // spec_to_string()
  Topology topology;
  uint32_t batch_size = 1;
  bool exact_order = true;
  std::string dispatch;  // dispatch_name()
  uint32_t prefetch_shards = 1;
  std::string route_key_field;
  uint64_t max_sample_bytes = 0;
  uint64_t read_into_batch_bytes = 0;
  uint32_t packet_items = 0;
  uint64_t packet_bytes = 0;
  // A windows dataset is rebuilt from its record files; a tar dataset's manifest comes as a
  // segment of manifest_bytes encoded bytes.
  WindowSpec windows;
  uint32_t scan_threads = 2;
  std::vector<std::string> sources;
  uint64_t manifest_bytes = 0;
  uint32_t rank = 0;
  uint32_t worker = 0;
};

// A unit for a worker process: the WorkUnit, the rank position below which items of loaded
// shards were handed over already (a process taking over from a dead one), the route's
// window.
struct UnitOrder {
  WorkUnit unit;
  uint64_t skip_below = 0;
  uint32_t window = 0;
};

std::string encode_job(const WorkerJob& job);
Result<WorkerJob> decode_job(std::string_view body);
std::string encode_unit(const UnitOrder& order);
Result<UnitOrder> decode_unit(std::string_view body);
// A status: the body of a shared-memory channel's finish frame (io/transport/shm_frames.h).
std::string encode_status(const Status& status);
// Whether a status body is well formed: a finish frame's body, and OK without a message.
bool status_well_formed(std::string_view body);
Status decode_status(std::string_view body);  // the status carried, or kCorrupt
// A done frame: u64 items | u64 bytes | status.
std::string encode_done(const Result<UnitStats>& done);
Result<UnitStats> decode_done(std::string_view body);  // kCorrupt, or the unit's outcome
// Whether a done frame's body is well formed (decode_done() cannot tell a unit's error from
// damage otherwise).
bool done_well_formed(std::string_view body);

}  // namespace shardyard::actors
