#include "actors/protocol.h"

namespace shardyard::actors {

void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<JobInfo>("shardyard::JobInfo");
  cfg.add_message_type<JoinRequest>("shardyard::JoinRequest");
  cfg.add_message_type<EpochKeyRequest>("shardyard::EpochKeyRequest");
  cfg.add_message_type<EpochKey>("shardyard::EpochKey");
  cfg.add_message_type<EpochStart>("shardyard::EpochStart");
  cfg.add_message_type<EpochTicket>("shardyard::EpochTicket");
  cfg.add_message_type<WorkUnit>("shardyard::WorkUnit");
  cfg.add_message_type<WorkerDone>("shardyard::WorkerDone");
  cfg.add_message_type<RankEpochDone>("shardyard::RankEpochDone");
  cfg.add_message_type<StepReport>("shardyard::StepReport");
  cfg.add_message_type<SnapshotRequest>("shardyard::SnapshotRequest");
  cfg.add_message_type<ActorSnapshot>("shardyard::ActorSnapshot");
  cfg.add_message_type<ShutdownRequest>("shardyard::ShutdownRequest");
  cfg.add_message_type<ShutdownAck>("shardyard::ShutdownAck");
  cfg.add_message_type<std::vector<uint32_t>>("std::vector<uint32_t>");
  cfg.add_message_type<std::vector<uint64_t>>("std::vector<uint64_t>");
  cfg.add_message_type<std::vector<std::string>>("std::vector<std::string>");
}

}  // namespace shardyard::actors
