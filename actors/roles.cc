#include "actors/roles.h"

#include <chrono>
#include <optional>

#include "actors/state/coordinator_state.h"
#include "actors/state/dispatcher_state.h"
#include "actors/state/status_board.h"
#include "actors/state/worker_core.h"
#include "io/persist/checkpoint_store.h"

namespace shardyard::actors {

// The Status travels as sec::runtime_error with (code, message) as context, so the code
// survives a hop between actors (and between processes).
caf::error to_error(const Status& st) {
  auto err =
      caf::make_error(caf::sec::runtime_error, static_cast<int32_t>(st.code()), st.message());
  release_at(err.context().cvals().get());  // see actors/state/mailbox_order.h
  return err;
}

Status from_error(const caf::error& err) {
  if (!err) return Status::ok();
  const caf::message& ctx = err.context();
  acquire_at(ctx.cvals().get());
  if (ctx.match_elements<int32_t, std::string>()) {
    auto code = ctx.get_as<int32_t>(0);
    if (code > 0 && code <= static_cast<int32_t>(StatusCode::kUnavailable))
      return Status(static_cast<StatusCode>(code), ctx.get_as<std::string>(1));
  }
  return unavailable(caf::to_string(err));
}

Status request_failed(const caf::error& err, const std::string& actor, const char* message,
                      std::chrono::milliseconds timeout) {
  if (err == caf::sec::request_timeout)
    return unavailable("no reply from " + actor + " to " + message + " within " +
                       std::to_string(timeout.count()) + " ms");
  return from_error(err);
}

namespace {

// ---- worker ------------------------------------------------------------------------------

// A unit's outcome (a worker's or the dispatcher's feed) as its WorkerDone.
void record_outcome(const Result<UnitStats>& r, WorkerDone* done) {
  if (r.is_ok()) {
    done->items = r->items;
    done->bytes = r->bytes;
  } else {
    done->ok = false;
    done->error = r.status().to_string();
  }
}

struct WorkerActorState {
  std::shared_ptr<UnitRunner> core;
  uint32_t rank = 0, worker = 0, epoch = 0;
  uint64_t items = 0, bytes = 0;
  std::string state = "idle";
  std::shared_ptr<RoleStats> stats;  // what the monitor sees (null without a StatusBoard)
  AfterTurns after_turns;            // last: destroyed first
  static inline const char* name = "shardyard.worker";
};

// What the monitor sees of a role: its live stats when the process has a StatusBoard.
std::shared_ptr<RoleStats> role_stats(const JobData& job, const char* role, uint32_t rank,
                                      uint32_t worker = 0) {
  return job.status ? job.status->role(role, rank, worker) : nullptr;
}

worker_actor::behavior_type worker_fn(worker_actor::stateful_pointer<WorkerActorState> self,
                                      std::shared_ptr<const JobData> job, uint32_t rank,
                                      uint32_t worker, std::shared_ptr<UnitRunner> runner) {
  const ActorTurn turn;
  self->state.rank = rank;
  self->state.worker = worker;
  self->state.core = runner ? std::move(runner) : std::make_shared<WorkerCore>(job, rank, worker);
  self->state.core->prepare();  // on the actor's own thread (it is detached)
  self->state.stats = role_stats(*job, "worker", rank, worker);
  return {
      // Detached actor: the unit blocks this actor's own thread, nobody else's. It accepts the
      // unit at once and reports its end to the dispatcher that sent it.
      [=](const WorkUnit& unit) -> caf::typed_response_promise<UnitAccepted> {
        const ActorTurn turn(unit);
        auto rp = self->make_response_promise<UnitAccepted>();
        rp.deliver(UnitAccepted{unit.rank, unit.worker, unit.epoch});
        auto dispatcher = caf::actor_cast<dispatcher_actor>(self->current_sender());
        auto& st = self->state;
        st.epoch = unit.epoch;
        st.state = "running";
        if (st.stats) {
          st.stats->set_epoch(unit.epoch);
          st.stats->set_state(RoleState::kRunning);
        }
        WorkerDone done{unit.rank, unit.worker, unit.epoch, 0, 0, true, {}};
        auto channel = job->data_plane->attach(unit.channel);
        if (!channel) {
          done.ok = false;
          done.error =
              "worker " + std::to_string(worker) + ": no data-plane channel '" + unit.channel + "'";
        } else {
          record_outcome(st.core->run(unit, *channel), &done);
        }
        st.items += done.items;
        st.bytes += done.bytes;
        st.state = done.ok ? "idle" : "failed";
        if (st.stats) {
          st.stats->set_state(done.ok ? RoleState::kIdle : RoleState::kFailed);
          st.stats->set_detail(done.error);
        }
        if (dispatcher) self->send(dispatcher, done);
        return rp;
      },
      [=](const SnapshotRequest& msg) -> ActorSnapshot {
        const ActorTurn turn(msg);
        auto& st = self->state;
        if (st.stats) return job->status->snapshot(*st.stats);
        ActorSnapshot s;
        s.role = "worker";
        s.rank = st.rank;
        s.worker = st.worker;
        s.state = st.state;
        s.epoch = st.epoch;
        s.items = st.items;
        s.bytes = st.bytes;
        return s;
      },
      [=](const ShutdownRequest& msg) -> ShutdownAck {
        const ActorTurn turn(msg);
        auto ack = ShutdownAck{"worker", self->state.rank, self->state.worker};
        if (self->state.stats) self->state.stats->set_state(RoleState::kStopped);
        self->state.core.reset();
        self->quit();
        return ack;
      },
  };
}

// ---- dispatcher --------------------------------------------------------------------------

// The dispatcher's feed of one epoch (dispatch modes): reads the rank's shards, runs the
// non-replicable stages and routes their output, on its own thread (it blocks on reads and
// on the loader's credit), then reports to the dispatcher like a worker does.
void feed_fn(caf::blocking_actor* self, dispatcher_actor dispatcher,
             std::shared_ptr<const JobData> job, uint32_t rank, WorkUnit unit) {
  WorkerDone done{rank, unit.worker, unit.epoch, 0, 0, true, {}};
  if (auto route = job->data_plane->attach_route(unit.route)) {
    DispatchCore core(job, rank);
    record_outcome(core.run(unit, *route), &done);
  } else {
    done.ok = false;
    done.error = "dispatcher of rank " + std::to_string(rank) + ": no route '" + unit.route + "'";
  }
  self->send(dispatcher, done);
}

struct DispatcherActorState {
  std::unique_ptr<DispatcherState> core;
  coordinator_actor coordinator;
  std::vector<worker_actor> workers;
  // By worker: the epoch of the unit it runs (accepted or sent), until its WorkerDone; so a
  // worker that stops while it runs one fails that unit.
  std::vector<std::optional<uint32_t>> running;
  loader_actor loader;
  // Epoch starts waiting for the coordinator's key: a request to a coordinator whose
  // process died is never answered, so its loss answers them.
  std::vector<std::pair<uint64_t, caf::typed_response_promise<EpochTicket>>> starting;
  uint64_t next_start = 0;
  std::shared_ptr<RoleStats> stats;  // what the monitor sees (null without a StatusBoard)
  AfterTurns after_turns;            // last: destroyed first
  static inline const char* name = "shardyard.dispatcher";
  // Shows the core's state (units out, done, failed) to the monitor.
  void publish() {
    if (!stats) return;
    ActorSnapshot s = core->snapshot();
    stats->set_epoch(s.epoch);
    stats->set_state(s.state == "failed"    ? RoleState::kFailed
                     : s.state == "running" ? RoleState::kRunning
                                            : RoleState::kIdle);
    stats->set_detail(s.detail);
  }
};

dispatcher_actor::behavior_type dispatcher_fn(
    dispatcher_actor::stateful_pointer<DispatcherActorState> self,
    std::shared_ptr<const JobData> job, uint32_t rank, coordinator_actor coordinator,
    std::vector<worker_actor> workers, loader_actor loader) {
  const ActorTurn turn;
  self->state.core = std::make_unique<DispatcherState>(job, rank);
  self->state.stats = role_stats(*job, "dispatcher", rank);
  self->state.coordinator = coordinator;
  self->state.workers = std::move(workers);
  self->state.running.resize(self->state.workers.size());
  self->state.loader = loader;
  const uint32_t w_count = static_cast<uint32_t>(self->state.workers.size());
  // A unit's end, from a worker (forwarded to the loader actor) or from the feed (worker W).
  auto unit_done = [=](const WorkerDone& done) {
    if (done.worker < w_count) {
      auto& running = self->state.running[done.worker];
      if (running && *running == done.epoch) running.reset();
      self->send(self->state.loader, done);
    }
    self->state.core->unit_done(done);
    self->state.publish();
  };
  auto unit_failed = [=](const WorkUnit& unit, const Status& why) {
    unit_done(WorkerDone{unit.rank, unit.worker, unit.epoch, 0, 0, false, why.to_string()});
  };
  for (auto& w : self->state.workers) self->monitor(w);
  // Epoch starts wait for the coordinator's key: a request to a coordinator whose process
  // died is never answered, so its loss answers them.
  self->monitor(self->state.coordinator);
  self->set_down_handler([=](caf::down_msg& down) {
    const ActorTurn down_turn;
    auto& st = self->state;
    for (uint32_t w = 0; w < w_count; ++w) {
      if (st.workers[w].address() != down.source || !st.running[w]) continue;
      const uint32_t epoch = *st.running[w];
      unit_done(WorkerDone{rank, w, epoch, 0, 0, false,
                           "worker " + std::to_string(w) + " of rank " + std::to_string(rank) +
                               " stopped while it ran its unit of epoch " + std::to_string(epoch) +
                               ": " + caf::to_string(down.reason)});
    }
    if (down.source == st.coordinator.address()) {
      for (auto& [token, rp] : st.starting)
        rp.deliver(
            to_error(unavailable("rank " + std::to_string(rank) + " lost the job's coordinator (" +
                                 self->system().render(down.reason) + ")")));
      st.starting.clear();
    }
  });
  return {
      [=](const EpochStart& start) -> caf::typed_response_promise<EpochTicket> {
        const ActorTurn turn(start);
        auto rp = self->make_response_promise<EpochTicket>();
        const uint64_t token = ++self->state.next_start;
        self->state.starting.emplace_back(token, rp);
        // True for the first of the key's answer and the coordinator's loss, which answers.
        auto settled = [=]() {
          auto& v = self->state.starting;
          for (auto it = v.begin(); it != v.end(); ++it)
            if (it->first == token) {
              v.erase(it);
              return true;
            }
          return false;
        };
        self->request(self->state.coordinator, kReplyTimeout, EpochKeyRequest{start.epoch})
            .then(
                [=](const EpochKey& key) mutable {
                  const ActorTurn turn(key);
                  if (!settled()) return;
                  auto a = self->state.core->start_epoch(start, key);
                  self->state.publish();
                  if (!a.is_ok()) {
                    rp.deliver(to_error(a.status()));
                    return;
                  }
                  for (auto& unit : a->units) {
                    self->state.running[unit.worker] = unit.epoch;
                    self->request(self->state.workers[unit.worker], kReplyTimeout, unit)
                        .then([=](const UnitAccepted& accepted) { const ActorTurn turn(accepted); },
                              [=](const caf::error& err) {
                                const ActorTurn turn;
                                self->state.running[unit.worker].reset();
                                unit_failed(unit,
                                            request_failed(err,
                                                           "worker " + std::to_string(unit.worker) +
                                                               " of rank " + std::to_string(rank),
                                                           "WorkUnit", kReplyTimeout));
                              });
                  }
                  if (a->feed)
                    self->spawn<caf::detached>(feed_fn, dispatcher_actor{self}, job, rank,
                                               std::move(*a->feed));
                  rp.deliver(a->ticket);
                },
                [=](const caf::error& err) mutable {
                  const ActorTurn turn;
                  if (settled())
                    rp.deliver(to_error(
                        request_failed(err, "the coordinator", "EpochKeyRequest", kReplyTimeout)));
                });
        return rp;
      },
      [=](const ResumeGrant& grant) -> ResumeAck {
        const ActorTurn turn(grant);
        self->state.core->set_resume(grant);
        return ResumeAck{};
      },
      [=](const WorkerDone& done) {
        const ActorTurn turn(done);
        unit_done(done);
      },
      [=](const SnapshotRequest& msg) -> ActorSnapshot {
        const ActorTurn turn(msg);
        if (self->state.stats) return job->status->snapshot(*self->state.stats);
        return self->state.core->snapshot();
      },
      [=](const ShutdownRequest& msg) -> ShutdownAck {
        const ActorTurn turn(msg);
        if (self->state.stats) self->state.stats->set_state(RoleState::kStopped);
        for (auto& w : self->state.workers) self->demonitor(w.address());
        self->state.workers.clear();
        self->state.coordinator = nullptr;
        self->state.loader = nullptr;
        self->quit();
        return ShutdownAck{"dispatcher", rank, 0};
      },
  };
}

// ---- loader ------------------------------------------------------------------------------

struct LoaderActorState {
  uint32_t rank = 0;
  coordinator_actor coordinator;
  std::function<void(Status)> on_abort;
  StepReport cursor;
  uint64_t produced = 0, bytes = 0;
  uint32_t failures = 0;
  std::string state = "idle";
  bool aborted = false;
  std::shared_ptr<StatusBoard> status;
  AfterTurns after_turns;  // last: destroyed first
  static inline const char* name = "shardyard.loader";
};

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const JobData> job, uint32_t rank,
                          uint32_t worker, std::shared_ptr<UnitRunner> runner) {
  return sys.spawn<caf::detached>(worker_fn, std::move(job), rank, worker, std::move(runner));
}

dispatcher_actor spawn_dispatcher(caf::actor_system& sys, std::shared_ptr<const JobData> job,
                                  uint32_t rank, coordinator_actor coordinator,
                                  std::vector<worker_actor> workers, loader_actor loader) {
  return sys.spawn(dispatcher_fn, std::move(job), rank, std::move(coordinator), std::move(workers),
                   std::move(loader));
}

namespace {
void abort_rank(loader_actor::stateful_pointer<LoaderActorState> self, Status why) {
  auto& st = self->state;
  if (st.aborted) return;
  st.aborted = true;
  st.state = "failed";
  if (st.on_abort) st.on_abort(std::move(why));
}

loader_actor::behavior_type loader_fn(loader_actor::stateful_pointer<LoaderActorState> self,
                                      uint32_t rank, coordinator_actor coordinator,
                                      LoaderActorOptions options) {
  const ActorTurn turn;
  self->state.rank = rank;
  self->state.coordinator = coordinator;
  self->state.on_abort = options.on_abort;
  self->state.status = options.status;
  // The coordinator is this rank's lifeline: when it goes (its process died, its connection
  // broke, or it stopped answering heartbeats), the rank cannot go on.
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    const ActorTurn turn;
    if (dm.source != self->state.coordinator.address()) return;
    abort_rank(self, unavailable("rank " + std::to_string(rank) + " lost the job's coordinator (" +
                                 self->system().render(dm.reason) + ")"));
  });
  return {
      // The owner's join goes through this actor, so that the coordinator monitors it.
      [=](const JoinRequest& req) -> caf::typed_response_promise<JobInfo> {
        const ActorTurn turn(req);
        auto rp = self->make_response_promise<JobInfo>();
        const std::chrono::milliseconds timeout(options.join_timeout_ms);
        self->request(self->state.coordinator, timeout, req)
            .then(
                [=](const JobInfo& job) mutable {
                  const ActorTurn turn(job);
                  rp.deliver(job);
                },
                [=](caf::error& err) mutable {
                  const ActorTurn turn;
                  rp.deliver(to_error(
                      request_failed(err, "the job's coordinator", "JoinRequest", timeout)));
                });
        return rp;
      },
      [=](const JobAborted& aborted) {
        const ActorTurn turn(aborted);
        abort_rank(self, unavailable("the job stopped: " + aborted.reason));
      },
      [=](const StepReport& r) {
        const ActorTurn turn(r);
        self->state.state = "running";
        self->state.cursor = r;
      },
      [=](const RankEpochDone& done) {
        const ActorTurn turn(done);
        self->state.state = "idle";
        self->send(self->state.coordinator, done);
      },
      [=](const WorkerDone& done) {
        const ActorTurn turn(done);
        self->state.produced += done.items;
        self->state.bytes += done.bytes;
        if (!done.ok) ++self->state.failures;
      },
      [=](const SnapshotRequest& msg) -> ActorSnapshot {
        const ActorTurn turn(msg);
        auto& st = self->state;
        ActorSnapshot s;
        s.role = "loader";
        s.rank = st.rank;
        s.state = st.state;
        s.epoch = st.cursor.epoch;
        s.steps = st.cursor.step;
        s.items = st.cursor.items;
        s.bytes = st.bytes;
        s.detail = std::to_string(st.produced) + " items produced by workers, " +
                   std::to_string(st.failures) + " failed units";
        return s;
      },
      // The coordinator's monitor asks every rank: this rank's status and, from the lowest
      // rank of the process, the process's metric samples (so a process hosting several
      // ranks counts them once). Read from the StatusBoard, never from another actor.
      [=](const RankReportRequest& msg) -> RankReport {
        const ActorTurn turn(msg);
        auto& st = self->state;
        RankReport report;
        if (!st.status) return report;
        report.ranks.push_back(st.status->collect_rank(st.rank));
        const auto hosted = st.status->ranks();
        if (hosted.empty() || hosted.front() == st.rank)
          report.metrics = st.status->metrics().collect();
        return report;
      },
      [=](const ShutdownRequest& msg) -> ShutdownAck {
        const ActorTurn turn(msg);
        self->demonitor(self->state.coordinator.address());
        self->state.coordinator = nullptr;
        self->state.on_abort = nullptr;
        self->quit();
        return ShutdownAck{"loader", rank, 0};
      },
  };
}
}  // namespace

loader_actor spawn_loader_actor(caf::actor_system& sys, uint32_t rank,
                                coordinator_actor coordinator, LoaderActorOptions options) {
  return sys.spawn(loader_fn, rank, std::move(coordinator), std::move(options));
}

}  // namespace shardyard::actors
