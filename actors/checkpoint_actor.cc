// The checkpoint role: one detached actor per rank (its handlers write and read files).
//
// Save: propose a generation (from what the directory holds), get the cut's generation from
// the coordinator, write this rank's file atomically, report it, and answer the loader
// once the coordinator has committed CHECKPOINT for every rank. Restore: read the files,
// offer their bytes to the coordinator, pass its grant to the rank's dispatcher, and
// answer the loader with the grant. docs/protocol.md has the sequence.
#include "actors/roles.h"
#include "actors/state/coordinator_state.h"
#include "actors/state/status_board.h"
#include "io/persist/checkpoint_store.h"
#include "runtime/checkpoint.h"

namespace shardyard::actors {

namespace {

struct CheckpointActorState {
  uint32_t rank = 0;
  coordinator_actor coordinator;
  dispatcher_actor dispatcher;
  std::string state = "idle";
  uint64_t generation = 0;  // last committed or restored
  uint64_t bytes = 0;       // size of the last rank file written
  uint64_t saves = 0;
  double last_write_ms = 0;
  std::shared_ptr<RoleStats> stats;  // what the monitor sees (null without a StatusBoard)
  RankBoard* board = nullptr;        // the rank's checkpoints, for the monitor
  AfterTurns after_turns;            // last: destroyed first
  static inline const char* name = "shardyard.checkpoint";
  std::string detail() const {
    return "generation " + std::to_string(generation) + ", last rank file written in " +
           std::to_string(last_write_ms) + " ms";
  }
  void set(const std::string& s, RoleState shown) {
    state = s;
    if (!stats) return;
    stats->set_state(shown);
    stats->set_detail(detail());
  }
};

RankCheckpoint rank_checkpoint(const SaveRequest& req, uint32_t rank, uint64_t generation,
                               uint64_t fingerprint) {
  RankCheckpoint c;
  c.generation = generation;
  c.rank = rank;
  c.fingerprint = fingerprint;
  c.epoch = req.epoch;
  c.step = req.step;
  c.layout_offset = req.layout_offset;
  c.layout_items = req.layout_items;
  for (size_t k = 0; k < req.shards.size(); ++k)
    c.shards.push_back(ShardProgress{req.shards[k], req.take[k], req.consumed[k]});
  c.worker_states = req.worker_states;
  c.dispatcher_state = req.dispatcher_state;
  c.loader_state = req.loader_state;
  return c;
}

checkpoint_actor::behavior_type checkpoint_fn(
    checkpoint_actor::stateful_pointer<CheckpointActorState> self,
    std::shared_ptr<const JobData> job, uint32_t rank, coordinator_actor coordinator,
    dispatcher_actor dispatcher) {
  const ActorTurn turn;
  self->state.rank = rank;
  self->state.coordinator = coordinator;
  self->state.dispatcher = dispatcher;
  if (job->status) {
    self->state.stats = job->status->role("checkpoint", rank);
    self->state.board = &job->status->rank(rank);
  }
  const uint64_t fingerprint = job->manifest->fingerprint;
  const std::chrono::milliseconds barrier{job->checkpoint_timeout_ms};
  const std::string coordinator_name = "the coordinator";
  return {
      [=](const SaveRequest& req) -> caf::typed_response_promise<SaveDone> {
        const ActorTurn turn(req);
        auto rp = self->make_response_promise<SaveDone>();
        if (req.shards.size() != req.take.size() || req.shards.size() != req.consumed.size()) {
          rp.deliver(to_error(invalid_argument("malformed save request")));
          return rp;
        }
        // Without a directory (Loader::state()) the cut comes back as bytes, nothing is
        // written. With one, the directory first: a file system that cannot write (HTTP, S3)
        // refuses here, with the directory's name, before anything is asked of the
        // coordinator.
        const bool in_memory = req.dir.empty();
        Result<uint64_t> proposed = uint64_t{0};
        if (!in_memory) {
          if (Status st = job->fs->create_dir(req.dir); !st.is_ok()) {
            rp.deliver(to_error(st));
            return rp;
          }
          proposed = io::next_generation(*job->fs, req.dir);
          if (!proposed.is_ok()) {
            rp.deliver(to_error(proposed.status()));
            return rp;
          }
        }
        self->state.set("saving", RoleState::kSaving);
        CheckpointBegin begin{rank, req.dir, req.epoch, req.step, *proposed};
        self->request(self->state.coordinator, kReplyTimeout, begin)
            .then(
                [=](const CheckpointGeneration& g) mutable {
                  const ActorTurn turn(g);
                  const int64_t t0 = job->clock->steady_ns();
                  const std::string name = io::rank_file_name(rank, g.generation);
                  const std::string bytes =
                      encode_rank_checkpoint(rank_checkpoint(req, rank, g.generation, fingerprint));
                  Status st;
                  if (!in_memory) {
                    // What aborted saves and crashes left below this generation goes first.
                    io::remove_uncommitted(*job->fs, req.dir, g.generation);
                    st = io::write_checkpoint_file(*job->fs, req.dir, name, bytes);
                  }
                  self->state.last_write_ms = (job->clock->steady_ns() - t0) / 1e6;
                  if (!st.is_ok()) {
                    // The other ranks must not wait for this file: the coordinator aborts
                    // the cut for all of them.
                    self->state.set("failed", RoleState::kFailed);
                    self->send(self->state.coordinator,
                               RankSaveFailed{rank, req.dir, g.generation, st.message()});
                    rp.deliver(to_error(
                        checkpoint_aborted(req.dir, req.epoch, req.step, rank, st.message())));
                    return;
                  }
                  RankSaved saved{rank,
                                  req.dir,
                                  g.generation,
                                  req.epoch,
                                  req.step,
                                  req.steps,
                                  req.layout_step0,
                                  req.epoch_complete,
                                  name,
                                  bytes.size(),
                                  file_checksum(bytes),
                                  in_memory ? bytes : std::string()};
                  const uint64_t size = bytes.size();
                  // The barrier: the reply comes once every rank saved this cut.
                  self->request(self->state.coordinator, barrier, saved)
                      .then(
                          [=](const CheckpointCommitted& c) mutable {
                            const ActorTurn turn(c);
                            self->state.generation = c.generation;
                            self->state.bytes = size;
                            ++self->state.saves;
                            if (auto& stats = self->state.stats) {  // bytes: of every file
                              stats->add(0, size);
                              stats->add_steps(1);
                            }
                            self->state.set("idle", RoleState::kIdle);
                            if (auto* b = self->state.board) {
                              b->checkpoint_committed(c.generation);
                              b->saves.add();
                            }
                            rp.deliver(SaveDone{c.generation, size, c.state});
                          },
                          [=](const caf::error& err) mutable {
                            const ActorTurn turn;
                            self->state.set("failed", RoleState::kFailed);
                            rp.deliver(to_error(
                                request_failed(err, coordinator_name, "RankSaved", barrier)));
                          });
                },
                [=](const caf::error& err) mutable {
                  const ActorTurn turn;
                  self->state.set("failed", RoleState::kFailed);
                  rp.deliver(to_error(
                      request_failed(err, coordinator_name, "CheckpointBegin", kReplyTimeout)));
                });
        return rp;
      },
      [=](const RestoreRequest& req) -> caf::typed_response_promise<ResumeGrant> {
        const ActorTurn turn(req);
        auto rp = self->make_response_promise<ResumeGrant>();
        // A directory's files, or the cut a trainer kept (Loader::state()).
        Result<io::CheckpointFiles> files = io::CheckpointFiles{};
        if (!req.state.empty()) {
          auto state = decode_checkpoint_state(req.state);
          if (state.is_ok()) {
            files->manifest = std::move(state->manifest);
            files->rank_files = std::move(state->rank_files);
          } else {
            files = state.status();
          }
        } else {
          files = io::read_checkpoint_files(*job->fs, req.dir);
        }
        if (!files.is_ok()) {
          rp.deliver(to_error(files.status()));
          return rp;
        }
        self->state.set("restoring", RoleState::kRestoring);
        const std::string source = req.state.empty() ? req.dir : "the loader state";
        ResumeOffer offer{rank, source, std::move(files->manifest), std::move(files->rank_files)};
        self->request(self->state.coordinator, kReplyTimeout, std::move(offer))
            .then(
                [=](const ResumeGrant& grant) mutable {
                  const ActorTurn turn(grant);
                  self->request(self->state.dispatcher, kReplyTimeout, grant)
                      .then(
                          [=](const ResumeAck& msg) mutable {
                            const ActorTurn turn(msg);
                            self->state.generation = grant.generation;
                            self->state.set("idle", RoleState::kIdle);
                            if (auto* b = self->state.board)
                              b->checkpoint_restored(grant.generation);
                            rp.deliver(grant);
                          },
                          [=](const caf::error& err) mutable {
                            const ActorTurn turn;
                            rp.deliver(to_error(request_failed(
                                err, "the dispatcher of rank " + std::to_string(rank),
                                "ResumeGrant", kReplyTimeout)));
                          });
                },
                [=](const caf::error& err) mutable {
                  const ActorTurn turn;
                  self->state.set("failed", RoleState::kFailed);
                  rp.deliver(to_error(
                      request_failed(err, coordinator_name, "ResumeOffer", kReplyTimeout)));
                });
        return rp;
      },
      [=](const SnapshotRequest& msg) -> ActorSnapshot {
        const ActorTurn turn(msg);
        auto& st = self->state;
        if (st.stats) return job->status->snapshot(*st.stats);
        ActorSnapshot s;
        s.role = "checkpoint";
        s.rank = st.rank;
        s.state = st.state;
        s.bytes = st.bytes;
        s.steps = st.saves;
        s.detail = st.detail();
        return s;
      },
      [=](const ShutdownRequest& msg) -> ShutdownAck {
        const ActorTurn turn(msg);
        self->state.set("stopped", RoleState::kStopped);
        self->state.coordinator = nullptr;
        self->state.dispatcher = nullptr;
        self->quit();
        return ShutdownAck{"checkpoint", rank, 0};
      },
  };
}

}  // namespace

checkpoint_actor spawn_checkpoint_actor(caf::actor_system& sys, std::shared_ptr<const JobData> job,
                                        uint32_t rank, coordinator_actor coordinator,
                                        dispatcher_actor dispatcher) {
  return sys.spawn<caf::detached>(checkpoint_fn, std::move(job), rank, std::move(coordinator),
                                  std::move(dispatcher));
}

}  // namespace shardyard::actors
