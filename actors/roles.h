// The roles as CAF actors: typed interfaces (declared once, here) and spawn functions.
//
// Each role's logic lives in a class without CAF (coordinator_state.h, dispatcher_state.h,
// worker_core.h, merger.h); the actors below are thin shells that turn messages into calls
// on it, keep timers and replies, and export snapshots. Workers are detached actors (their
// unit blocks on reads and on the data plane's backpressure); the others are event-based.
// Every request has a timeout: a worker accepts a unit at once (UnitAccepted) and reports
// its end in a WorkerDone message, and the dispatcher monitors its workers, so that no reply
// waits on how long an epoch takes.
// docs/protocol.md describes every message and the order of a run.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol.h"
#include "actors/state/coordinator_state.h"
#include "actors/state/job.h"
#include "actors/status_protocol.h"

namespace shardyard::actors {

// The coordinator's timer of the join barrier (its deadline passed).
using join_deadline_atom = caf::atom_constant<caf::atom("sy_joindl")>;

using coordinator_actor = caf::typed_actor<
    caf::replies_to<JoinRequest>::with<JobInfo>, caf::replies_to<EpochKeyRequest>::with<EpochKey>,
    caf::reacts_to<RankEpochDone>, caf::replies_to<CheckpointBegin>::with<CheckpointGeneration>,
    caf::replies_to<RankSaved>::with<CheckpointCommitted>, caf::reacts_to<RankSaveFailed>,
    caf::reacts_to<CommitOutcome>, caf::replies_to<ResumeOffer>::with<ResumeGrant>,
    caf::replies_to<RankLeave>::with<LeaveAck>, caf::replies_to<AwaitLeaves>::with<LeaveAck>,
    caf::reacts_to<join_deadline_atom>, caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
    caf::replies_to<RankReportRequest>::with<RankReport>,
    caf::replies_to<JobInfoRequest>::with<JobInfo>,
    caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

using worker_actor = caf::typed_actor<caf::replies_to<WorkUnit>::with<UnitAccepted>,
                                      caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                                      caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

using dispatcher_actor =
    caf::typed_actor<caf::replies_to<EpochStart>::with<EpochTicket>,
                     caf::replies_to<ResumeGrant>::with<ResumeAck>, caf::reacts_to<WorkerDone>,
                     caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                     caf::replies_to<ShutdownRequest>::with<ShutdownAck>>;

// A rank's loader actor is the rank's member of the job: it joins the coordinator (the
// owner's JoinRequest goes through it, so the coordinator monitors it), keeps the cursor,
// and hears when the job stops (JobAborted, or the coordinator going away).
using loader_actor = caf::typed_actor<caf::replies_to<JoinRequest>::with<JobInfo>,
                                      caf::reacts_to<JobAborted>, caf::reacts_to<StepReport>,
                                      caf::reacts_to<RankEpochDone>, caf::reacts_to<WorkerDone>,
                                      caf::replies_to<SnapshotRequest>::with<ActorSnapshot>,
                                      caf::replies_to<RankReportRequest>::with<RankReport>,
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

// How long each request between roles waits for its reply (docs/protocol.md, "Timeouts").
// A role that answers at once gets kReplyTimeout; the checkpoint barrier and the trainer's
// save() and restore() wait LoaderOptions::checkpoint_timeout_ms.
inline constexpr std::chrono::milliseconds kReplyTimeout{30000};
inline constexpr std::chrono::milliseconds kJoinTimeout{30000};
inline constexpr std::chrono::milliseconds kEpochStartTimeout{60000};
inline constexpr std::chrono::milliseconds kSnapshotTimeout{10000};
inline constexpr std::chrono::milliseconds kShutdownTimeout{30000};

// The Status of a failed request: a timeout names the actor and the message it waited on
// ("no reply from the coordinator to EpochKeyRequest within 30000 ms"); another error is
// from_error(err).
Status request_failed(const caf::error& err, const std::string& actor, const char* message,
                      std::chrono::milliseconds timeout);

// Spawn order: coordinator, loader actor, workers, dispatcher (which reports progress to
// the loader actor), checkpoint actor. The trainer-side Loader sends EpochStart to the dispatcher
// itself.
struct CoordinatorOptions {
  // How long after the first rank joined the others may take (then the job stops, naming
  // the ranks that did not come).
  uint32_t join_timeout_ms = 300000;
  // Where the coordinator says what happens to the job (a rank lost, the job stopping);
  // null: nowhere (an in-process job reports through its ranks' errors).
  std::function<void(const std::string&)> log;
  // The coordinator commits checkpoints through `fs` and dates them by `clock` (the job's
  // Env's; both must outlive it).
  FileSystem* fs = nullptr;
  Clock* clock = nullptr;
};
coordinator_actor spawn_coordinator(caf::actor_system& sys, CoordinatorState core,
                                    CoordinatorOptions options);
// `runner` runs the worker's units (null: a WorkerCore on the actor's thread; placement
// `local` gives a worker process's runner, actors/worker_process.h).
class UnitRunner;
worker_actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const JobData> job, uint32_t rank,
                          uint32_t worker, std::shared_ptr<UnitRunner> runner = nullptr);
dispatcher_actor spawn_dispatcher(caf::actor_system& sys, std::shared_ptr<const JobData> job,
                                  uint32_t rank, coordinator_actor coordinator,
                                  std::vector<worker_actor> workers, loader_actor loader);
struct LoaderActorOptions {
  // Called (on the actor's thread) once, with the reason, when the job stops under this
  // rank: JobAborted from the coordinator, or the coordinator gone.
  std::function<void(Status)> on_abort;
  uint32_t join_timeout_ms = 300000;  // how long the join waits for the whole world
  // What this process's roles report (RankReportRequest answers from it; null: nothing).
  std::shared_ptr<StatusBoard> status;
};
loader_actor spawn_loader_actor(caf::actor_system& sys, uint32_t rank,
                                coordinator_actor coordinator, LoaderActorOptions options);
checkpoint_actor spawn_checkpoint_actor(caf::actor_system& sys, std::shared_ptr<const JobData> job,
                                        uint32_t rank, coordinator_actor coordinator,
                                        dispatcher_actor dispatcher);

}  // namespace shardyard::actors
