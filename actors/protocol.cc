#include "actors/protocol.h"

#include "actors/status_protocol.h"

namespace shardyard::actors {

void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<JobInfo>("shardyard::JobInfo");
  cfg.add_message_type<JoinRequest>("shardyard::JoinRequest");
  cfg.add_message_type<EpochKeyRequest>("shardyard::EpochKeyRequest");
  cfg.add_message_type<EpochKey>("shardyard::EpochKey");
  cfg.add_message_type<EpochStart>("shardyard::EpochStart");
  cfg.add_message_type<EpochTicket>("shardyard::EpochTicket");
  cfg.add_message_type<WorkUnit>("shardyard::WorkUnit");
  cfg.add_message_type<UnitAccepted>("shardyard::UnitAccepted");
  cfg.add_message_type<WorkerDone>("shardyard::WorkerDone");
  cfg.add_message_type<RankEpochDone>("shardyard::RankEpochDone");
  cfg.add_message_type<StepReport>("shardyard::StepReport");
  cfg.add_message_type<SnapshotRequest>("shardyard::SnapshotRequest");
  cfg.add_message_type<JobInfoRequest>("shardyard::JobInfoRequest");
  cfg.add_message_type<ActorSnapshot>("shardyard::ActorSnapshot");
  cfg.add_message_type<ShutdownRequest>("shardyard::ShutdownRequest");
  cfg.add_message_type<ShutdownAck>("shardyard::ShutdownAck");
  cfg.add_message_type<SaveRequest>("shardyard::SaveRequest");
  cfg.add_message_type<SaveDone>("shardyard::SaveDone");
  cfg.add_message_type<CheckpointBegin>("shardyard::CheckpointBegin");
  cfg.add_message_type<CheckpointGeneration>("shardyard::CheckpointGeneration");
  cfg.add_message_type<RankSaved>("shardyard::RankSaved");
  cfg.add_message_type<CheckpointCommitted>("shardyard::CheckpointCommitted");
  cfg.add_message_type<RankSaveFailed>("shardyard::RankSaveFailed");
  cfg.add_message_type<CommitOutcome>("shardyard::CommitOutcome");
  cfg.add_message_type<RestoreRequest>("shardyard::RestoreRequest");
  cfg.add_message_type<ResumeOffer>("shardyard::ResumeOffer");
  cfg.add_message_type<ResumeGrant>("shardyard::ResumeGrant");
  cfg.add_message_type<ResumeAck>("shardyard::ResumeAck");
  cfg.add_message_type<Hello>("shardyard::Hello");
  cfg.add_message_type<Challenge>("shardyard::Challenge");
  cfg.add_message_type<Proof>("shardyard::Proof");
  cfg.add_message_type<Admitted>("shardyard::Admitted");
  cfg.add_message_type<JobAborted>("shardyard::JobAborted");
  cfg.add_message_type<RankLeave>("shardyard::RankLeave");
  cfg.add_message_type<LeaveAck>("shardyard::LeaveAck");
  cfg.add_message_type<AwaitLeaves>("shardyard::AwaitLeaves");
  cfg.add_message_type<std::vector<uint32_t>>("std::vector<uint32_t>");
  cfg.add_message_type<std::vector<uint64_t>>("std::vector<uint64_t>");
  cfg.add_message_type<std::vector<std::string>>("std::vector<std::string>");
  register_status_protocol(cfg);
}

void register_status_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<RankReportRequest>("shardyard::RankReportRequest");
  cfg.add_message_type<RankReport>("shardyard::RankReport");
  cfg.add_message_type<RankStatus>("shardyard::RankStatus");
  cfg.add_message_type<std::vector<RankStatus>>("std::vector<shardyard::RankStatus>");
  cfg.add_message_type<std::vector<QueueStatus>>("std::vector<shardyard::QueueStatus>");
  cfg.add_message_type<std::vector<ActorSnapshot>>("std::vector<shardyard::ActorSnapshot>");
  cfg.add_message_type<MetricsSnapshot>("shardyard::MetricsSnapshot");
  cfg.add_message_type<std::vector<MetricFamily>>("std::vector<shardyard::MetricFamily>");
  cfg.add_message_type<std::vector<MetricPoint>>("std::vector<shardyard::MetricPoint>");
}

}  // namespace shardyard::actors
