// The coordinator role: one event-based actor per job, a thin shell around CoordinatorState.
//
// Barriers: a rank's JoinRequest is answered once every rank of the world joined (so no rank
// starts while another might still disagree with the job), a ResumeOffer once every rank
// offered the same checkpoint, a RankSaved once the cut is committed. Every barrier has a
// deadline on the coordinator's side too, so a rank that never comes is named.
//
// Membership: the coordinator monitors every joined rank's loader actor (the JoinRequest's
// sender). A rank that goes away without RankLeave (its process died, its connection broke:
// CAF's heartbeats notice a frozen one) fails the job, and so does a rank that disagrees
// with the job, joins twice or leaves with an error: every pending request gets the reason,
// every other rank gets JobAborted with it, and later requests fail with it.
#include <chrono>
#include <map>
#include <vector>

#include <unistd.h>

#include "actors/roles.h"
#include "actors/state/coordinator_state.h"
#include "actors/state/status_board.h"
#include "io/persist/checkpoint_store.h"
#include "runtime/metrics.h"

namespace shardyard::actors {

namespace {

struct CoordinatorActorState {
  std::unique_ptr<CoordinatorState> core;
  CoordinatorOptions options;
  // Ranks of the pending cut waiting for its commit, with the generation they saved.
  std::vector<std::pair<uint64_t, caf::typed_response_promise<CheckpointCommitted>>> waiting;
  std::vector<std::pair<uint32_t, caf::typed_response_promise<JobInfo>>> joining;
  std::vector<std::pair<uint32_t, caf::typed_response_promise<ResumeGrant>>> offering;
  std::vector<caf::typed_response_promise<LeaveAck>> awaiting;
  std::map<uint32_t, caf::actor> agents;  // the loader actor of every joined rank
  bool told_abort = false;
  AfterTurns after_turns;  // last: destroyed first
  static inline const char* name = "shardyard.coordinator";
};

using coordinator_pointer = coordinator_actor::stateful_pointer<CoordinatorActorState>;

// How long the coordinator waits for each rank's report (a monitor's request).
constexpr std::chrono::milliseconds kReportTimeout{1500};

// The reports of one monitor request as they come in; answers once all are in.
struct Gathered {
  size_t pending = 0;
  RankReport merged;
  caf::typed_response_promise<RankReport> rp;
  void add(RankReport report) {
    for (auto& r : report.ranks) merged.ranks.push_back(std::move(r));
    // Each series carries its rank and node labels already; a family that disagrees between
    // processes (another build) is left out rather than failing the whole report.
    (void)merge_metrics(&merged.metrics, report.metrics);
    if (--pending == 0) rp.deliver(std::move(merged));
  }
};

// A rank that did not answer the monitor: its loader shows as unresponsive, with why.
RankReport unresponsive(uint32_t rank, const std::string& why) {
  RankReport report;
  RankStatus status;
  status.rank = rank;
  ActorSnapshot loader;
  loader.role = "loader";
  loader.rank = rank;
  loader.state = "unresponsive";
  loader.detail =
      "no report within " + std::to_string(kReportTimeout.count()) + " ms (" + why + ")";
  status.actors.push_back(std::move(loader));
  report.ranks.push_back(std::move(status));
  return report;
}

// The coordinator's committer: writes CHECKPOINT on its own thread and reports back. (The
// arguments come through spawn, not a capture: CAF 0.17 dereferences a null argument tuple
// for argument-less function actors.)
void commit_fn(caf::blocking_actor* self, coordinator_actor coordinator, FileSystem* fs,
               std::string dir, CheckpointManifest manifest) {
  Status st = io::commit_checkpoint(*fs, dir, manifest);
  self->send(coordinator, CommitOutcome{manifest.generation, st.is_ok(),
                                        st.is_ok() ? std::string() : st.to_string()});
}

void log_line(coordinator_pointer self, const std::string& line) {
  if (self->state.options.log) self->state.options.log(line);
}

// Once the job failed: every pending request gets the reason, every rank hears of it.
void fail_all(coordinator_pointer self) {
  auto& st = self->state;
  const Status& why = st.core->failure();
  if (why.is_ok()) return;
  const caf::error err = to_error(why);
  for (auto& [r, rp] : st.joining) rp.deliver(err);
  st.joining.clear();
  for (auto& [r, rp] : st.offering) rp.deliver(err);
  st.offering.clear();
  for (auto& [g, rp] : st.waiting) rp.deliver(err);
  st.waiting.clear();
  for (auto& rp : st.awaiting) rp.deliver(err);
  st.awaiting.clear();
  if (!st.told_abort) {
    st.told_abort = true;
    log_line(self, "the job stops: " + why.message());
    for (auto& [r, agent] : st.agents)
      if (!st.core->left(r))
        self->send(caf::actor_cast<loader_actor>(agent), JobAborted{why.message()});
  }
}

// The barrier of joins, with its deadline: ranks missing by then are named.
void check_joins(coordinator_pointer self) {
  auto& st = self->state;
  if (!st.core->failure().is_ok() || st.core->world_complete()) return;
  std::string missing;
  for (uint32_t r = 0; r < st.core->world_size(); ++r)
    if (!st.core->joined(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  st.core->abort(unavailable("rank(s) " + missing + " did not join within " +
                             std::to_string(st.options.join_timeout_ms / 1000) +
                             " s of the first rank"));
  fail_all(self);
}

struct CheckJoins {};

coordinator_actor::behavior_type coordinator_fn(coordinator_pointer self, CoordinatorState core,
                                                CoordinatorOptions options) {
  const ActorTurn turn;
  self->state.core = std::make_unique<CoordinatorState>(std::move(core));
  self->state.options = std::move(options);
  self->set_down_handler([=](caf::down_msg& dm) {
    const ActorTurn turn;
    auto& st = self->state;
    for (auto it = st.agents.begin(); it != st.agents.end(); ++it) {
      if (it->second.address() != dm.source) continue;
      const uint32_t rank = it->first;
      if (!st.core->left(rank)) {
        st.core->rank_lost(rank, "its process went away or stopped answering (" +
                                     self->system().render(dm.reason) + ")");
        fail_all(self);
      }
      st.agents.erase(it);
      return;
    }
  });
  return {
      [=](const JoinRequest& req) -> caf::result<JobInfo> {
        const ActorTurn turn(req);
        auto& st = self->state;
        const bool first = !st.core->has_job() || st.agents.empty();
        auto r = st.core->join(req);
        if (!r.is_ok()) {
          fail_all(self);
          return to_error(r.status());
        }
        if (auto sender = caf::actor_cast<caf::actor>(self->current_sender())) {
          st.agents[req.rank] = sender;
          self->monitor(sender);
        }
        if (first && !r->world_complete)
          caf::delayed_anon_send(coordinator_actor{self},
                                 std::chrono::milliseconds(st.options.join_timeout_ms),
                                 join_deadline_atom::value);
        if (!r->world_complete) {
          auto rp = self->make_response_promise<JobInfo>();
          st.joining.emplace_back(req.rank, rp);
          return rp;
        }
        log_line(self, "every rank of " + std::to_string(st.core->world_size()) + " joined");
        for (auto& [rank, rp] : st.joining) rp.deliver(r->job);
        st.joining.clear();
        return r->job;
      },
      [=](join_deadline_atom) {
        const ActorTurn turn;
        check_joins(self);
      },
      [=](const EpochKeyRequest& req) -> caf::result<EpochKey> {
        const ActorTurn turn(req);
        auto k = self->state.core->epoch_key(req.epoch);
        if (!k.is_ok()) return to_error(k.status());
        return *k;
      },
      [=](const RankEpochDone& done) {
        const ActorTurn turn(done);
        self->state.core->rank_done(done);
      },
      [=](const CheckpointBegin& begin) -> caf::result<CheckpointGeneration> {
        const ActorTurn turn(begin);
        auto g = self->state.core->begin_save(begin);
        if (!g.is_ok()) return to_error(g.status());
        // Ranks still waiting on an abandoned cut learn that it will never commit.
        auto& waiting = self->state.waiting;
        for (auto it = waiting.begin(); it != waiting.end();) {
          if (it->first == *g) {
            ++it;
            continue;
          }
          it->second.deliver(
              to_error(cancelled("the checkpoint of generation " + std::to_string(it->first) +
                                 " was abandoned for a newer cut")));
          it = waiting.erase(it);
        }
        return CheckpointGeneration{*g};
      },
      [=](const RankSaved& saved) -> caf::typed_response_promise<CheckpointCommitted> {
        const ActorTurn turn(saved);
        auto rp = self->make_response_promise<CheckpointCommitted>();
        auto m = self->state.core->rank_saved(saved, self->state.options.clock->unix_ms());
        if (!m.is_ok()) {
          rp.deliver(to_error(m.status()));
          return rp;
        }
        self->state.waiting.emplace_back(saved.generation, rp);
        if (m->has_value() && saved.dir.empty()) {
          // A cut without a directory (Loader::state()): every rank gets the whole cut.
          const std::string state = self->state.core->pending_state(**m);
          self->state.core->save_finished();
          for (auto& [gen, waiting] : self->state.waiting)
            waiting.deliver(CheckpointCommitted{gen, state});
          self->state.waiting.clear();
        } else if (m->has_value()) {
          // Every rank's file is durable: write CHECKPOINT off the coordinator's thread.
          self->spawn<caf::detached>(commit_fn, coordinator_actor{self}, self->state.options.fs,
                                     saved.dir, std::move(**m));
        }
        return rp;
      },
      [=](const RankSaveFailed& failed) {
        const ActorTurn turn(failed);
        Status error = self->state.core->save_failed(failed);
        if (error.is_ok()) return;  // not the pending cut
        // Every rank waiting for this cut's commit learns now, not at its timeout.
        auto& waiting = self->state.waiting;
        for (auto it = waiting.begin(); it != waiting.end();) {
          if (it->first != failed.generation) {
            ++it;
            continue;
          }
          it->second.deliver(to_error(error));
          it = waiting.erase(it);
        }
      },
      [=](const CommitOutcome& outcome) {
        const ActorTurn turn(outcome);
        self->state.core->save_finished();
        auto& waiting = self->state.waiting;
        for (auto& [gen, rp] : waiting) {
          if (outcome.ok && gen == outcome.generation) {
            rp.deliver(CheckpointCommitted{gen, {}});
          } else {
            rp.deliver(to_error(io_error("checkpoint generation " + std::to_string(gen) +
                                         " was not committed: " + outcome.error)));
          }
        }
        waiting.clear();
      },
      [=](const ResumeOffer& offer) -> caf::result<ResumeGrant> {
        const ActorTurn turn(offer);
        auto& st = self->state;
        auto all = st.core->offer(offer);
        if (!all.is_ok()) {
          fail_all(self);
          return to_error(all.status());
        }
        if (!*all) {
          auto rp = self->make_response_promise<ResumeGrant>();
          st.offering.emplace_back(offer.rank, rp);
          return rp;
        }
        for (auto& [rank, rp] : st.offering) {
          auto g = st.core->grant(rank);
          if (g.is_ok()) {
            rp.deliver(std::move(g).value());
          } else {
            rp.deliver(to_error(g.status()));
          }
        }
        st.offering.clear();
        auto g = st.core->grant(offer.rank);
        if (!g.is_ok()) return to_error(g.status());
        return std::move(g).value();
      },
      [=](const RankLeave& leave) -> caf::result<LeaveAck> {
        const ActorTurn turn(leave);
        auto& st = self->state;
        st.core->leave(leave);
        if (auto it = st.agents.find(leave.rank); it != st.agents.end()) {
          self->demonitor(it->second.address());
          st.agents.erase(it);
        }
        if (!st.core->failure().is_ok()) {
          fail_all(self);
        } else if (st.core->all_left()) {
          for (auto& rp : st.awaiting) rp.deliver(LeaveAck{});
          st.awaiting.clear();
        }
        return LeaveAck{};
      },
      [=](const AwaitLeaves& msg) -> caf::result<LeaveAck> {
        const ActorTurn turn(msg);
        auto& st = self->state;
        if (!st.core->failure().is_ok()) return to_error(st.core->failure());
        if (st.core->all_left()) return LeaveAck{};
        auto rp = self->make_response_promise<LeaveAck>();
        st.awaiting.push_back(rp);
        return rp;
      },
      [=](const SnapshotRequest& msg) -> ActorSnapshot {
        const ActorTurn turn(msg);
        ActorSnapshot s = self->state.core->snapshot();
        s.pid = static_cast<uint32_t>(::getpid());
        s.node = host_name();
        return s;
      },
      [=](const JobInfoRequest& msg) -> caf::result<JobInfo> {
        const ActorTurn turn(msg);
        if (!self->state.core->has_job())
          return to_error(unavailable("no rank has joined the job yet"));
        return self->state.core->job();
      },
      // The whole job's status for a monitor: every joined rank's loader actor is asked for
      // its RankReport (in whatever process it lives), each within kReportTimeout; a rank
      // that does not answer in time shows as unresponsive. The reply never waits longer.
      [=](const RankReportRequest& msg) -> caf::result<RankReport> {
        const ActorTurn turn(msg);
        auto rp = self->make_response_promise<RankReport>();
        auto gathered = std::make_shared<Gathered>();
        gathered->pending = self->state.agents.size();
        gathered->rp = rp;
        if (gathered->pending == 0) {
          rp.deliver(RankReport{});
          return rp;
        }
        for (const auto& [rank, agent] : self->state.agents) {
          const uint32_t r = rank;
          self->request(caf::actor_cast<loader_actor>(agent), kReportTimeout, RankReportRequest{})
              .then(
                  [=](RankReport& report) {
                    const ActorTurn turn(report);
                    gathered->add(std::move(report));
                  },
                  [=](caf::error& err) {
                    const ActorTurn turn;
                    gathered->add(unresponsive(r, self->system().render(err)));
                  });
        }
        return rp;
      },
      [=](const ShutdownRequest& msg) -> ShutdownAck {
        const ActorTurn turn(msg);
        auto& st = self->state;
        st.core->abort(cancelled("the coordinator shut down"));
        st.told_abort = true;  // the owner stops the ranks itself
        fail_all(self);
        st.agents.clear();
        self->quit();
        return ShutdownAck{"coordinator", 0, 0};
      },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys, CoordinatorState core,
                                    CoordinatorOptions options) {
  return sys.spawn(coordinator_fn, std::move(core), std::move(options));
}

}  // namespace shardyard::actors
