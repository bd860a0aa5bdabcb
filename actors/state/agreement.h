// Agreement: every rank of a job must describe the same job. A rank in another process
// builds its JobInfo from its own options and manifest; the coordinator compares it with
// the job's field by field before it admits the rank, so a rank started with another seed,
// L, strategy, batch size, pipeline or dataset is refused instead of silently overlapping
// data.
//
// Pure functions. Thread-safe.
#pragma once

#include <cstdint>

#include "actors/state/messages.h"
#include "runtime/status.h"

namespace shardyard::actors {

// OK when `theirs` (what rank `rank` says) describes the job `job`; otherwise an error
// naming the first field that differs and both values:
//   "rank 2 does not agree with the job on the seed: the job has 17, rank 2 has 18".
Status check_agreement(const JobInfo& job, const JobInfo& theirs, uint32_t rank);

}  // namespace shardyard::actors
