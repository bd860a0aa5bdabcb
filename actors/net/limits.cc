#include "actors/net/limits.h"

#include <string>

namespace shardyard::actors::net {

namespace {

Status too_big(const char* message, const char* what, size_t size, size_t limit) {
  return invalid_argument(std::string("a ") + message + " from the network was refused: its " +
                          what + " holds " + std::to_string(size) + ", more than the limit of " +
                          std::to_string(limit));
}

#define SY_LIMIT(msg, what, size, limit) \
  if ((size) > (limit)) return too_big(msg, what, size, limit)

Status check_job(const char* msg, const JobInfo& j) {
  SY_LIMIT(msg, "distributed strategy", j.distributed_strategy.size(), kMaxNameBytes);
  SY_LIMIT(msg, "worker strategy", j.worker_strategy.size(), kMaxNameBytes);
  SY_LIMIT(msg, "pipeline spec", j.pipeline.size(), kMaxSpecBytes);
  SY_LIMIT(msg, "dispatch mode", j.dispatch.size(), kMaxNameBytes);
  SY_LIMIT(msg, "window spec", j.windows.size(), kMaxNameBytes);
  return Status::ok();
}

}  // namespace

Status check_limits(const Hello& m) {
  if (m.client_nonce.size() != kNonceBytes)
    return invalid_argument("a Hello from the network was refused: its nonce has " +
                            std::to_string(m.client_nonce.size()) + " bytes, not " +
                            std::to_string(kNonceBytes));
  return Status::ok();
}

Status check_limits(const Proof& m) {
  SY_LIMIT("Proof", "proof", m.proof.size(), kMaxNameBytes);
  return Status::ok();
}

Status check_limits(const JoinRequest& m) { return check_job("JoinRequest", m.job); }

Status check_limits(const EpochKeyRequest&) { return Status::ok(); }
Status check_limits(const RankEpochDone&) { return Status::ok(); }
Status check_limits(const SnapshotRequest&) { return Status::ok(); }
Status check_limits(const RankReportRequest&) { return Status::ok(); }
Status check_limits(const JobInfoRequest&) { return Status::ok(); }

Status check_limits(const CheckpointBegin& m) {
  SY_LIMIT("CheckpointBegin", "directory", m.dir.size(), kMaxNameBytes);
  return Status::ok();
}

Status check_limits(const RankSaved& m) {
  SY_LIMIT("RankSaved", "directory", m.dir.size(), kMaxNameBytes);
  SY_LIMIT("RankSaved", "file name", m.file.size(), kMaxNameBytes);
  SY_LIMIT("RankSaved", "rank file", m.bytes.size(), kMaxStateBytes);
  return Status::ok();
}

Status check_limits(const ResumeOffer& m) {
  SY_LIMIT("ResumeOffer", "directory", m.dir.size(), kMaxNameBytes);
  SY_LIMIT("ResumeOffer", "CHECKPOINT file", m.manifest.size(), kMaxStateBytes);
  SY_LIMIT("ResumeOffer", "list of rank files", m.rank_files.size(), kMaxEntries);
  size_t total = m.manifest.size();
  for (const auto& f : m.rank_files) {
    SY_LIMIT("ResumeOffer", "rank file", f.size(), kMaxStateBytes);
    total += f.size();
  }
  SY_LIMIT("ResumeOffer", "checkpoint", total, 4 * kMaxStateBytes);
  return Status::ok();
}

Status check_limits(const RankLeave& m) {
  SY_LIMIT("RankLeave", "error", m.error.size(), kMaxSpecBytes);
  return Status::ok();
}

Status check_limits(const RankSaveFailed& m) {
  SY_LIMIT("RankSaveFailed", "directory", m.dir.size(), kMaxNameBytes);
  SY_LIMIT("RankSaveFailed", "error", m.error.size(), kMaxSpecBytes);
  return Status::ok();
}

#undef SY_LIMIT

}  // namespace shardyard::actors::net
