// The control-plane messages: every message between the roles, as plain structs.
//
// No CAF here: the role state classes (actors/state/) use these structs without an actor
// system. actors/protocol.h adds inspect() and registers every type with CAF. None holds a
// pointer, a callable or a process-local handle; bytes of items never travel here (they
// use the data plane, io/transport/data_plane.h), only the name of the channel that carries
// them. docs/protocol.md says who sends each message, who answers with what, and when.
// Every struct ends with `MailboxOrder order{}` (actors/state/mailbox_order.h), which is not
// sent: it shows ThreadSanitizer that a message's fields were written before its handler
// reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/state/mailbox_order.h"

namespace shardyard::actors {

// The version of this protocol. A rank joins only a coordinator of the same version
// (JoinRequest); change it with any change of a message's fields or meaning.
inline constexpr uint32_t kProtocolVersion = 1;

// What defines a job; the coordinator hands it to every rank that joins.
struct JobInfo {
  uint64_t fingerprint = 0;  // manifest fingerprint
  uint64_t num_items = 0;
  uint32_t logical_shards = 1;
  uint32_t chunk_items = 1;
  uint64_t seed = 0;
  bool shuffle = false;
  bool drop_last = false;
  std::string distributed_strategy;
  std::string worker_strategy;
  uint32_t world_size = 1;
  uint32_t workers = 1;
  uint32_t batch_size = 1;
  bool exact_order = true;
  std::string pipeline;  // spec_to_string() of the pipeline spec
  std::string dispatch;  // dispatch_name() of the resolved dispatch mode
  std::string windows;   // window_spec_to_string(), empty for tar shards
  MailboxOrder order{};
};

// rank -> coordinator: join the job; reply JobInfo, or an error when the protocol version,
// the fingerprint or the topology does not match the job. The version is the first field
// on the wire (actors/protocol.h), so every later version can still read it.
struct JoinRequest {
  uint32_t rank = 0;
  uint32_t workers = 0;
  uint64_t fingerprint = 0;
  JobInfo job;                 // the job as this rank built it from its own options and manifest
  uint32_t restart_count = 0;  // the launcher's restarts (TORCHELASTIC_RESTART_COUNT)
  uint32_t protocol_version = kProtocolVersion;
  MailboxOrder order{};
};

// dispatcher -> coordinator: the shared key of an epoch; reply EpochKey.
struct EpochKeyRequest {
  uint32_t epoch = 0;
  MailboxOrder order{};
};
struct EpochKey {
  uint32_t epoch = 0;
  uint64_t key = 0;
  MailboxOrder order{};
};

// loader -> dispatcher: start an epoch, feeding the named channels (one per worker, or one
// shared by all workers). Reply EpochTicket once every worker has its unit.
struct EpochStart {
  uint32_t rank = 0;
  uint32_t epoch = 0;
  std::vector<std::string> channels;  // size 1 (shared) or W
  std::string route;  // dispatch modes: the route from the dispatcher to the workers
  MailboxOrder order{};
};

// The rank's share of the epoch, enough for the loader to merge worker output in order.
// Steps [first_step, steps) are delivered; their sizes follow the layout (EpochPlan in
// runtime/shard.h): from layout_step0 on, layout_items items from position layout_offset.
struct EpochTicket {
  uint32_t epoch = 0;
  uint64_t steps = 0;
  uint64_t items = 0;
  std::vector<uint32_t> shards;     // logical shards in interleave order
  std::vector<uint64_t> take;       // items of each
  std::vector<uint64_t> consumed;   // of each, consumed before a resume (else zeros)
  std::vector<uint32_t> worker_of;  // worker of each
  uint64_t first_step = 0;
  uint64_t layout_step0 = 0;
  uint64_t layout_offset = 0;
  uint64_t layout_items = 0;
  MailboxOrder order{};
};

// dispatcher -> worker: produce these shards' items of this epoch into `channel`, each
// from its `consumed` position on; a resumed unit restores its stages from stage_states.
// With a `route` the worker reads no shard itself: it takes what the dispatcher routes to it
// (the reset-epoch message of docs/protocol.md, "Routing"). The dispatcher's own feed is a
// unit of the rank's pending shards with the route and the dispatcher's stage states.
struct WorkUnit {
  uint32_t rank = 0;
  uint32_t worker = 0;
  uint32_t epoch = 0;
  uint64_t epoch_key = 0;
  std::vector<uint32_t> shards;  // in interleave order
  std::vector<uint64_t> take;
  std::vector<uint64_t> consumed;
  std::string channel;
  std::vector<std::string> stage_states;  // saved worker states (encode_stage_states)
  bool rescaled = false;                  // the states come from another topology
  std::string route;
  MailboxOrder order{};
};

// worker -> dispatcher: the reply to a WorkUnit, at once: the worker took the unit and runs
// it (WorkerDone follows when it ends).
struct UnitAccepted {
  uint32_t rank = 0;
  uint32_t worker = 0;
  uint32_t epoch = 0;
  MailboxOrder order{};
};

// worker (or the dispatcher's feed) -> dispatcher: the unit is finished (ok == false:
// `error` says why).
struct WorkerDone {
  uint32_t rank = 0;
  uint32_t worker = 0;
  uint32_t epoch = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  bool ok = true;
  std::string error;
  MailboxOrder order{};
};

// loader -> coordinator: the rank's trainer consumed the whole epoch.
struct RankEpochDone {
  uint32_t rank = 0;
  uint32_t epoch = 0;
  uint64_t steps = 0;
  uint64_t items = 0;
  MailboxOrder order{};
};

// loader side -> loader actor: where the trainer is (the cursor).
struct StepReport {
  uint32_t rank = 0;
  uint32_t epoch = 0;
  uint64_t step = 0;   // steps consumed in this epoch
  uint64_t items = 0;  // items consumed in this epoch
  MailboxOrder order{};
};

// ---- checkpoints (docs/checkpoint-format.md, docs/protocol.md) --------------------------

// Loader -> its rank's checkpoint actor: save this rank's part of the cut at `step`.
// Reply SaveDone once the whole job's cut is committed (every rank saved).
struct SaveRequest {
  std::string dir;
  uint32_t epoch = 0;
  uint64_t step = 0;   // steps consumed in the epoch
  uint64_t steps = 0;  // one past the epoch's last step
  uint64_t layout_step0 = 0;
  bool epoch_complete = false;
  std::vector<uint32_t> shards;  // the rank's logical shards
  std::vector<uint64_t> take;
  std::vector<uint64_t> consumed;
  uint64_t layout_offset = 0;
  uint64_t layout_items = 0;
  std::vector<std::string> worker_states;  // by worker of the rank
  std::string dispatcher_state;            // the rank's non-replicable stages
  std::string loader_state;                // the stages after the merge point
  MailboxOrder order{};
};
struct SaveDone {
  uint64_t generation = 0;
  uint64_t bytes = 0;  // size of this rank's file
  std::string state;   // a save without a directory: the whole cut (Loader::state())
  MailboxOrder order{};
};

// checkpoint actor -> coordinator: a rank starts saving a cut; reply CheckpointGeneration,
// the generation every rank of this cut writes (the largest proposal wins, so files of an
// interrupted save are never reused).
struct CheckpointBegin {
  uint32_t rank = 0;
  std::string dir;
  uint32_t epoch = 0;
  uint64_t step = 0;
  uint64_t proposed_generation = 0;  // next_generation() as this rank saw the directory
  MailboxOrder order{};
};
struct CheckpointGeneration {
  uint64_t generation = 0;
  MailboxOrder order{};
};

// checkpoint actor -> coordinator: this rank's file is durable. The reply, CheckpointCommitted,
// comes when every rank's file is and CHECKPOINT names them (or an error).
struct RankSaved {
  uint32_t rank = 0;
  std::string dir;
  uint64_t generation = 0;
  uint32_t epoch = 0;
  uint64_t step = 0;
  uint64_t steps = 0;
  uint64_t layout_step0 = 0;
  bool epoch_complete = false;
  std::string file;  // name inside dir
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::string bytes;  // a save without a directory (dir empty): the rank file's bytes
  MailboxOrder order{};
};
struct CheckpointCommitted {
  uint64_t generation = 0;
  // A cut saved without a directory (Loader::state()): the whole cut, every rank's file and
  // the manifest (encode_checkpoint_state), handed to every rank instead of written.
  std::string state;
  MailboxOrder order{};
};
// checkpoint actor -> coordinator: this rank could not write its file of the cut (a full
// disk, a lost mount). The coordinator aborts the cut at once: every rank waiting for its
// commit, and every rank that begins or reports it later, gets an error naming this rank
// and `error`. CHECKPOINT is not touched, so the last committed checkpoint stays the latest.
struct RankSaveFailed {
  uint32_t rank = 0;
  std::string dir;
  uint64_t generation = 0;
  std::string error;
  MailboxOrder order{};
};
// The coordinator's committer (a short-lived detached actor that writes CHECKPOINT, so the
// coordinator never blocks on a disk) -> coordinator: the commit's outcome.
struct CommitOutcome {
  uint64_t generation = 0;
  bool ok = true;
  std::string error;
  MailboxOrder order{};
};

// Loader -> its checkpoint actor: resume from the checkpoint in `dir`. The actor loads it
// and offers it to the coordinator; reply ResumeGrant (also forwarded to the dispatcher).
struct RestoreRequest {
  std::string dir;
  std::string state;  // instead of a directory: a cut Loader::state() returned
  MailboxOrder order{};
};
// checkpoint actor -> coordinator: what this rank loaded, as the files' bytes (decoded and
// validated again by the coordinator with the same functions). Reply ResumeGrant.
struct ResumeOffer {
  uint32_t rank = 0;
  std::string dir;
  std::string manifest;                 // the CHECKPOINT file
  std::vector<std::string> rank_files;  // by rank of the saved topology
  MailboxOrder order{};
};
// coordinator -> rank (-> dispatcher): where the rank resumes. `epoch` is the first epoch
// to run; when `partial`, it resumes at the cursor below, else it starts afresh.
struct ResumeGrant {
  uint32_t epoch = 0;
  bool partial = false;
  uint64_t step = 0;
  std::vector<uint64_t> take;      // by logical shard
  std::vector<uint64_t> consumed;  // by logical shard
  uint32_t saved_ranks = 0;
  uint32_t saved_batch_size = 0;
  uint64_t steps = 0;
  uint64_t layout_step0 = 0;
  std::vector<uint64_t> layout_offset;  // by saved rank
  std::vector<uint64_t> layout_items;   // by saved rank
  // Without a rescale: the saved state of each worker of this rank (by worker). After one:
  // every saved state, each handed to every worker (Stage::restore_state merges them).
  std::vector<std::string> worker_states;
  // The same for the rank's dispatcher and loader stages (one instance per rank): this
  // rank's own saved state, or when the number of ranks changed every saved rank's.
  std::vector<std::string> dispatcher_states;
  std::vector<std::string> loader_states;
  bool ranks_changed = false;
  bool rescaled = false;
  uint64_t generation = 0;
  MailboxOrder order{};
};
struct ResumeAck {
  MailboxOrder order{};
};

// anyone -> any role: a plain snapshot of the actor's state (for the monitor and tests;
// docs/monitor.md says what each field means for each role).
struct SnapshotRequest {
  MailboxOrder order{};
};
struct ActorSnapshot {
  std::string role;  // coordinator, dispatcher, worker, loader, checkpoint
  uint32_t rank = 0;
  uint32_t worker = 0;
  std::string state;  // role_stats.h: idle, running, waiting_input, waiting_output, ...
  uint32_t epoch = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint64_t steps = 0;
  std::string detail;
  std::string node;  // host name of its process
  uint32_t pid = 0;
  double items_per_s = 0;       // over the last seconds
  uint64_t queue_depth = 0;     // its output queue: packets, deliveries or ready batches
  uint64_t queue_capacity = 0;  // 0: unbounded or none
  double input_wait_s = 0;      // time blocked waiting for input, in total
  double output_wait_s = 0;     // time blocked waiting for its consumer, in total
  double uptime_s = 0;          // since the actor started
  MailboxOrder order{};
};

// coordinator -> a rank process (in a job of several processes): what the process hosts,
// for the monitor. The reply is a RankReport (actors/state/job_status.h): the status of
// each rank it hosts and its metric samples. Not sent yet (docs/monitor.md).
struct RankReportRequest {
  MailboxOrder order{};
};
// monitor -> coordinator: the job as the coordinator admitted it (a coordinator in its own
// process has no manifest to read it from).
struct JobInfoRequest {
  MailboxOrder order{};
};

// owner -> role: stop; the role replies ShutdownAck after it has let go of what it holds.
struct ShutdownRequest {
  std::string reason;
  MailboxOrder order{};
};
struct ShutdownAck {
  std::string role;
  uint32_t rank = 0;
  uint32_t worker = 0;
  MailboxOrder order{};
};

// ---- ranks in other processes (docs/multi-process.md) ----------------------------------

// A rank process -> the coordinator's gate, first message on a new connection; reply
// Challenge. The gate admits a process (its CAF node) only once it proved the job's token.
struct Hello {
  uint32_t protocol_version = 0;
  uint32_t rank = 0;
  std::string client_nonce;  // 32 random bytes
  MailboxOrder order{};
};
struct Challenge {
  std::string server_nonce;  // 32 random bytes
  std::string node;          // the rank process's CAF node id as the gate sees it
  MailboxOrder order{};
};
// rank process -> gate: auth_proof(token, "rank", ...); reply Admitted with the gate's own
// proof, so the rank knows it reached its job's coordinator and not another one.
struct Proof {
  uint32_t rank = 0;
  std::string proof;
  MailboxOrder order{};
};
struct Admitted {
  std::string proof;
  MailboxOrder order{};
};

// coordinator -> every joined rank's loader actor: the job stops (a rank was lost, a rank
// disagreed, a rank failed); every rank fails with `reason`.
struct JobAborted {
  std::string reason;
  MailboxOrder order{};
};

// rank -> coordinator: this rank is done (ok) or stopped by an error; reply LeaveAck. A rank
// process that goes away without leaving is lost, and its loss stops the job.
struct RankLeave {
  uint32_t rank = 0;
  bool ok = true;
  std::string error;
  MailboxOrder order{};
};
struct LeaveAck {
  MailboxOrder order{};
};

// The process hosting the coordinator -> coordinator: answer once every rank left, or the
// job stopped (reply LeaveAck, or the reason as an error).
struct AwaitLeaves {
  MailboxOrder order{};
};

}  // namespace shardyard::actors
