// The roles as CAF actors: typed interfaces (declared once, here) and spawn functions.
//
// Each role's logic lives in a class without CAF (coordinator_state.h, dispatcher_state.h,
// worker_core.h, merger.h); the actors below are thin shells that turn messages into calls
// on it, keep timers and replies, and export snapshots. Workers are detached actors (their
// unit blocks on reads and on the data plane's backpressure); the others are event-based.
// docs/protocol.md describes every message and the order of a run.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/protocol.h"
#include "actors/state/job.h"

namespace shardyard::actors {

using coordinator_actor = caf::typed_actor<
    caf::replies_to<JoinRequest>::with<JobInfo>, caf::replies_to<EpochKeyRequest>::with<EpochKey>,
    caf::reacts_to<RankEpochDone>, caf::replies_to<CheckpointBegin>::with<CheckpointGeneration>,
    caf::replies_to<RankSaved>::with<CheckpointCommitted>, caf::reacts_to<RankSaveFailed>,
    caf::reacts_to<CommitOutcome>, caf::replies_to<ResumeOffer>::with<ResumeGrant>,
    caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
    caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

using worker_actor = caf::typed_actor<caf::replies_to<WorkUnit>::with<WorkerDone>,
                                      caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                                      caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

using dispatcher_actor =
    caf::typed_actor<caf::replies_to<EpochStart>::with<EpochTicket>,
                     caf::replies_to<ResumeGrant>::with<ResumeAck>, caf::reacts_to<WorkerDone>,
                     caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                     caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

using loader_actor = caf::typed_actor<caf::reacts_to<StepReport>, caf::reacts_to<RankEpochDone>,
                                      caf::reacts_to<WorkerDone>,
                                      caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                                      caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

// One per rank, detached (it writes and reads files): saves the rank's part of a cut and
// takes part in the coordinator's barrier; on restart loads the checkpoint, offers it to
// the coordinator and hands the grant to the rank's dispatcher.
using checkpoint_actor = caf::typed_actor<caf::replies_to<SaveRequest>::with<SaveDone>,
                                          caf::replies_to<RestoreRequest>::with<ResumeGrant>,
                                          caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                                          caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

// A Status as a caf::error (sec::runtime_error carrying the message) and back.
caf::error to_error(const Status& st);
Status from_error(const caf::error& err);

// Spawn order: coordinator, loader actor, workers, dispatcher (which reports progress to
// the loader actor), checkpoint actor. The trainer-side Loader sends EpochStart to the dispatcher
// itself.
coordinator_actor spawn_coordinator(caf::actor_system& sys, JobInfo job);
worker_actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const JobData> job, uint32_t rank,
                          uint32_t worker);
dispatcher_actor spawn_dispatcher(caf::actor_system& sys, std::shared_ptr<const JobData> job,
                                  uint32_t rank, coordinator_actor coordinator,
                                  std::vector<worker_actor> workers, loader_actor loader);
loader_actor spawn_loader_actor(caf::actor_system& sys, uint32_t rank,
                                coordinator_actor coordinator);
checkpoint_actor spawn_checkpoint_actor(caf::actor_system& sys, std::shared_ptr<const JobData> job,
                                        uint32_t rank, coordinator_actor coordinator,
                                        dispatcher_actor dispatcher);

}  // namespace shardyard::actors
