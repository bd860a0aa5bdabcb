// Limits on what a message from the network may hold, checked after it was decoded and
// before any role sees it (docs/multi-process.md, "Security"). CAF 0.17 has no bound on a
// message's size of its own; these bounds keep a malformed or hostile message from making a
// role allocate or loop without end.
//
// Pure functions, no CAF (the fuzz target tests/fuzz/net_fuzz.cc runs them on decoded
// garbage). Thread-safe.
#pragma once

#include "actors/state/messages.h"
#include "runtime/status.h"

namespace shardyard::actors::net {

inline constexpr size_t kMaxNameBytes = 4096;        // directories, node ids, reasons
inline constexpr size_t kMaxSpecBytes = 1 << 20;     // a pipeline spec, an error text
inline constexpr size_t kMaxStateBytes = 64u << 20;  // one stage state, one checkpoint file
inline constexpr size_t kMaxEntries = 1u << 20;      // logical shards, ranks, workers
inline constexpr size_t kNonceBytes = 32;

Status check_limits(const Hello& m);
Status check_limits(const Proof& m);
Status check_limits(const JoinRequest& m);
Status check_limits(const EpochKeyRequest& m);
Status check_limits(const RankEpochDone& m);
Status check_limits(const CheckpointBegin& m);
Status check_limits(const RankSaved& m);
Status check_limits(const ResumeOffer& m);
Status check_limits(const RankLeave& m);
Status check_limits(const RankSaveFailed& m);
Status check_limits(const SnapshotRequest& m);
Status check_limits(const RankReportRequest& m);
Status check_limits(const JobInfoRequest& m);

}  // namespace shardyard::actors::net
