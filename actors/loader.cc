#include "actors/loader.h"

#include "actors/cluster_impl.h"

namespace shardyard {

// ---- loader ------------------------------------------------------------------------------

// One epoch in progress: the merger, and the threads that collate batches ahead. Taking a
// step's items from the workers is sequential (under take_mu); copying them into the batch
// columns runs on up to two collator threads at once; batches are handed out in step order.
// The collators wait until the trainer is seen to be busy between batches (`ahead`); until
// then next() takes and collates each step itself. With a device, the collators build
// columns in pinned memory from the start and a DevicePrefetcher takes the batches in
// order, queues their copies, and hands them to next().
// Where collating reads the batch's large members from their files (`together`), the two
// collators build one batch at a time, each reading part of its items: a batch is ready
// sooner, and the rank holds the columns of the batches ahead and of the trainer's, not one
// more for a second batch being built.
struct Loader::Epoch {
  uint32_t epoch = 0;
  uint32_t rank = 0;
  uint64_t steps = 0;
  std::unique_ptr<RankMerger> merger;
  std::vector<std::thread> collators;
  Mutex take_mu;  // serialises merger->take_step()
  Mutex mu;
  CondVar room;     // collators wait here for room to build another batch
  CondVar arrived;  // the trainer waits here for the next step's batch
  struct Ready {
    Result<std::optional<Batch>> batch;
    StepProgress progress;  // applied to `cursor` when the trainer takes the batch
  };
  std::map<uint64_t, Ready> ready SY_GUARDED_BY(mu);  // by step
  size_t building SY_GUARDED_BY(mu) = 0;
  bool taken_all SY_GUARDED_BY(mu) = false;
  bool stop SY_GUARDED_BY(mu) = false;
  size_t depth = 2;  // set before the collators start; then read-only
  // The collators build ahead (set once, by the trainer's take() or at the start); until
  // then take() collates each step in the caller's thread.
  bool ahead SY_GUARDED_BY(mu) = false;
  // Kept by the thread that calls take() while the collators wait: what collating the last
  // step took, and how many steps in a row the trainer spent longer than that on its own.
  std::chrono::nanoseconds last_collate{0};
  uint32_t busy_steps = 0;
  bool taking_ahead = false;  // the caller's copy of `ahead`
  uint64_t next_step = 0;     // the number of the next batch next() returns
  // The number of the next batch take() returns: the trainer's, or the prefetcher's copy
  // thread's (only one of them takes).
  uint64_t taken_step SY_GUARDED_BY(mu) = 0;
  BufferPool* columns = nullptr;  // the job's pool, or the device's pinned one
  // The batch the collators build together (`together`): its builder, the items handed out
  // to fill and those filled, and the first fill that failed.
  struct Shared {
    explicit Shared(BatchBuilder b) : builder(std::move(b)), n(builder.size()) {}
    BatchBuilder builder;
    // The batch's items. Fixed here: a helper that comes late must not look at the items,
    // which the builder reuses for the next step once every piece is filled.
    const size_t n;
    size_t next = 0, filled = 0;  // guarded by Epoch::mu
    Status error;                 // guarded by Epoch::mu
  };
  bool together = false;                             // set before the collators start
  std::shared_ptr<Shared> shared SY_GUARDED_BY(mu);  // the batch being built together
  CondVar all_filled;                                // its builder waits here for the helper
  std::unique_ptr<gpu::DevicePrefetcher> prefetcher;
  // Progress of batches taken by the prefetcher, until next() hands them out.
  std::map<uint64_t, StepProgress> prefetched SY_GUARDED_BY(mu);
  uint64_t delivered_items = 0;
  RankCursor cursor;  // what the trainer consumed: the checkpoint state of this rank
  bool finished = false;
  Status error;
  int64_t last_report_ns = INT64_MIN / 2;  // Clock::steady_ns() of the last StepReport
  // This rank's loader actor, which keeps the cursor: by its address, so that a Loader that
  // outlives Cluster::shutdown does not keep the actor (the shutdown of a networked process
  // waits for its roles to be gone).
  caf::actor_addr cursor_actor;
  RankBoard* board = nullptr;  // what the monitor sees of the rank (the cluster's)
  RoleStats* stats = nullptr;  // ... and of its loader

  void collate() {
    if (together) return collate_together();
    std::vector<Item> items;
    for (;;) {
      {
        MutexLock lock(&mu);
        while (!stop && !taken_all && (!ahead || ready.size() + building >= depth)) room.wait(&mu);
        if (stop || taken_all) return;
        ++building;
      }
      uint64_t step = 0;
      StepProgress progress;
      Result<std::optional<Batch>> out = take_and_build(items, &step, &progress);
      hand_in(step, std::move(out), std::move(progress));
    }
  }

  // Puts a built step (a batch, the end, or an error) where take() finds it.
  void hand_in(uint64_t step, Result<std::optional<Batch>> out, StepProgress progress)
      SY_EXCLUDES(mu) {
    const bool last = !out.is_ok() || !out->has_value();
    {
      MutexLock lock(&mu);
      --building;
      if (last) taken_all = true;
      ready.emplace(step, Ready{std::move(out), std::move(progress)});
      board->set_ready_batches(ready.size());
    }
    // Wake only who can act: the trainer, and, at the end, the other collator so it exits.
    arrived.notify_one();
    if (last) room.notify_all();
  }

  // A collator of `together`: it helps fill the batch being built while part of it is left,
  // else takes the next step when there is room for it (one batch built at a time).
  void collate_together() {
    std::vector<Item> items;
    for (;;) {
      std::shared_ptr<Shared> help;
      {
        MutexLock lock(&mu);
        for (;;) {
          if (stop) return;
          if (shared && shared->next < shared->n) {
            help = shared;
            break;
          }
          if (taken_all) return;
          if (building == 0 && ready.size() < depth) break;
          room.wait(&mu);
        }
        if (!help) ++building;
      }
      if (help) {
        fill_part(*help);
        continue;
      }
      uint64_t step = 0;
      StepProgress progress;
      Result<bool> got = false;
      {
        MutexLock take(&take_mu);
        got = merger->take_step(&items, &step, &progress);
      }
      if (!got.is_ok()) {
        hand_in(step, got.status(), std::move(progress));
        continue;
      }
      if (!*got) {  // the end of the epoch
        hand_in(step, std::optional<Batch>(), std::move(progress));
        continue;
      }
      auto s = std::make_shared<Shared>(BatchBuilder(items, epoch, step, rank, *columns));
      {
        MutexLock lock(&mu);
        shared = s;
      }
      room.notify_all();  // the other collator comes to help
      fill_part(*s);
      {
        MutexLock lock(&mu);
        while (s->filled < s->n) all_filled.wait(&mu);
        shared.reset();
      }
      Result<std::optional<Batch>> out = std::optional<Batch>();
      if (s->error.is_ok()) {
        out = std::optional<Batch>(s->builder.finish());
      } else {
        out = s->error;
      }
      items.clear();
      hand_in(step, std::move(out), std::move(progress));
    }
  }

  // Fills pieces of `s` (about a sixteenth of its items each) until none is left.
  void fill_part(Shared& s) SY_EXCLUDES(mu) {
    const size_t n = s.n, piece = std::max<size_t>(1, n / 16);
    for (;;) {
      size_t begin = 0, end = 0;
      {
        MutexLock lock(&mu);
        if (s.next >= n) return;
        begin = s.next;
        end = s.next = std::min(n, begin + piece);
      }
      Status st = s.builder.fill(begin, end);
      bool done = false;
      {
        MutexLock lock(&mu);
        if (!st.is_ok() && s.error.is_ok()) s.error = std::move(st);
        s.filled += end - begin;
        done = s.filled == n;
      }
      if (done) all_filled.notify_all();
    }
  }

  Result<Batch> build(std::vector<Item>& items, uint64_t step) const {
    return build_batch(items, epoch, step, rank, *columns);
  }

  // The next step's items from the merger (one taker at a time), built into its batch;
  // nullopt at the end of the epoch. `items` is scratch, left empty.
  Result<std::optional<Batch>> take_and_build(std::vector<Item>& items, uint64_t* step,
                                              StepProgress* progress) {
    Result<bool> got = false;
    {
      MutexLock take(&take_mu);
      got = merger->take_step(&items, step, progress);
    }
    if (!got.is_ok()) return got.status();
    if (!*got) return std::optional<Batch>();
    Result<Batch> built = build(items, *step);
    items.clear();
    if (!built.is_ok()) return built.status();
    return std::optional<Batch>(std::move(built).value());
  }

  // The next batch in step order (from the collators, or collated here while they wait),
  // and what it consumed. Called by the trainer, or by the prefetcher's copy thread.
  // `trainer_time`: how long the trainer spent since it was handed the last batch.
  Result<std::optional<Batch>> take(StepProgress* progress, std::chrono::nanoseconds trainer_time)
      SY_EXCLUDES(mu) {
    if (depth == 0) return take_here(progress);
    if (!taking_ahead) {
      // The trainer asks for each batch as soon as it has the last one: collating here
      // costs it nothing it would not wait for anyway. Once it spends longer on its own
      // than a batch takes to collate, three steps in a row, the collators build ahead.
      busy_steps = trainer_time > last_collate ? busy_steps + 1 : 0;
      const auto began = std::chrono::steady_clock::now();
      auto b = take_here(progress);
      last_collate = std::chrono::steady_clock::now() - began;
      if (busy_steps >= 3 && b.is_ok() && b->has_value()) {
        taking_ahead = true;
        {
          MutexLock lock(&mu);
          ahead = true;
        }
        room.notify_all();
      }
      return b;
    }
    Result<std::optional<Batch>> b = std::optional<Batch>();
    {
      MutexLock lock(&mu);
      // A collator always hands in the next step (a batch, the end, or an error) unless the
      // epoch is stopped.
      while (!stop && ready.count(taken_step) == 0) arrived.wait(&mu);
      if (stop) return cancelled("the epoch was stopped");
      auto it = ready.find(taken_step);
      b = std::move(it->second.batch);
      *progress = std::move(it->second.progress);
      ready.erase(it);
      board->set_ready_batches(ready.size());
      if (b.is_ok() && b->has_value()) ++taken_step;
    }
    room.notify_one();
    return b;
  }

  // The next step, taken and collated in the caller's thread; at the end of the epoch (or
  // an error) the waiting collators are told to exit.
  Result<std::optional<Batch>> take_here(StepProgress* progress) SY_EXCLUDES(mu) {
    std::vector<Item> items;
    uint64_t step = 0;
    Result<std::optional<Batch>> out = take_and_build(items, &step, progress);
    const bool last = !out.is_ok() || !out->has_value();
    {
      MutexLock lock(&mu);
      if (out.is_ok() && out->has_value()) ++taken_step;
      if (last) taken_all = true;
    }
    if (last) room.notify_all();
    return out;
  }

  // The prefetcher's source: take() on its copy thread, keeping the progress for next().
  Result<std::optional<Batch>> take_for_device() SY_EXCLUDES(mu) {
    StepProgress progress;
    auto b = take(&progress, std::chrono::nanoseconds::zero());
    if (b.is_ok() && b->has_value()) {
      MutexLock lock(&mu);
      prefetched[(*b)->step()] = std::move(progress);
    }
    return b;
  }
};

// What restore() granted: the epoch that resumes, and the stage states its workers start
// from (this rank's own, when the topology is unchanged), which are the cursor's until a
// worker's next item is consumed.
struct Loader::Restored {
  ResumePoint point;
  bool started = false;
  std::vector<std::shared_ptr<const std::string>> states;  // by worker
  // This rank's own dispatcher and loader states (when the number of ranks is the same),
  // which the cursor keeps until the next consumed item; the loader states its post stages
  // restore from.
  std::shared_ptr<const std::string> dispatcher_state, loader_state;
  std::vector<std::string> loader_states;
  bool ranks_changed = false;
};

Loader::Loader(std::shared_ptr<Cluster> cluster, uint32_t rank)
    : cluster_(std::move(cluster)), rank_(rank) {}

Loader::~Loader() {
  stop_epoch();
  MutexLock lock(&cluster_->impl_->mu);
  auto it = cluster_->impl_->ranks.find(rank_);
  if (it != cluster_->impl_->ranks.end()) it->second.loader_open = false;
}

const Manifest& Loader::manifest() const { return cluster_->manifest(); }

uint64_t Loader::steps_per_epoch() const { return epoch_ ? epoch_->steps : 0; }

Result<std::unique_ptr<Loader>> Loader::open(const LoaderOptions& options) {
  SY_ASSIGN_OR_RETURN(auto cluster, Cluster::start(options, {options.rank}));
  return cluster->loader(options.rank);
}

void Loader::stop_epoch() {
  if (!epoch_) return;
  epoch_->board->close_epoch();
  epoch_->stats->end_wait(false, RoleState::kIdle);
  epoch_->merger->cancel();  // unblocks workers and the collator
  {
    MutexLock lock(&epoch_->mu);
    epoch_->stop = true;
  }
  epoch_->room.notify_all();
  epoch_->arrived.notify_all();
  epoch_->prefetcher.reset();  // its take() returned once `stop` was set
  for (auto& t : epoch_->collators) t.join();
  epoch_.reset();
}

Status Loader::start_epoch(uint32_t epoch) {
  stop_epoch();
  auto& d = *cluster_->impl_;
  SY_ASSIGN_OR_RETURN(auto system, d.running());
  if (Status why = d.job_failure(); !why.is_ok()) return failed(why);
  const RankRoles roles = d.roles_of(rank_);
  const auto& job = *d.job;
  const uint32_t w_count = job.topology.workers;
  const bool exact = d.options.order == Order::kExact;
  const uint32_t queued = d.prefetch_packets();

  // Channels (and the route) first, so workers find them when their units arrive.
  std::vector<std::shared_ptr<io::Channel>> channels;
  std::shared_ptr<io::Route> route;
  EpochStart start{rank_, epoch, {}, {}};
  std::string base = "r" + std::to_string(rank_) + "/e" + std::to_string(epoch) + "/";
  if (job.dispatch != Dispatch::kNone) {
    // Routed items come back on one channel and are put in order by position; the window
    // covers every worker's queued packets plus the packets being filled.
    const auto window = static_cast<uint32_t>(
        std::max<uint64_t>(1024, uint64_t{job.packet_items} * w_count * (queued + 2)));
    start.route = base + "route";
    route = job.data_plane->open_route(start.route, job.dispatch, w_count, window);
    start.channels.push_back(base + "all");
    channels.push_back(job.data_plane->open_channel(start.channels.back(), w_count,
                                                    static_cast<size_t>(queued) * w_count));
  } else if (exact) {
    for (uint32_t w = 0; w < w_count; ++w) {
      start.channels.push_back(base + "w" + std::to_string(w));
      channels.push_back(job.data_plane->open_channel(start.channels.back(), 1, queued));
    }
  } else {
    start.channels.push_back(base + "all");
    channels.push_back(job.data_plane->open_channel(start.channels.back(), w_count,
                                                    static_cast<size_t>(queued) * w_count));
  }

  Result<EpochTicket> ticket = internal_error("no answer from the dispatcher");
  {
    caf::scoped_actor self{system->sys};
    self->request(roles.dispatcher, kEpochStartTimeout, start)
        .receive(
            [&](EpochTicket& t) {
              received(t);
              ticket = std::move(t);
            },
            [&](const caf::error& err) {
              ticket = request_failed(err, "the dispatcher of rank " + std::to_string(rank_),
                                      "EpochStart", kEpochStartTimeout);
            });
  }
  if (!ticket.is_ok()) {
    for (auto& c : channels) c->cancel();
    if (route) route->cancel();
    return failed(ticket.status());
  }
  {
    MutexLock lock(&d.mu);
    auto& registered = d.ranks.at(rank_);
    registered.channels.assign(channels.begin(), channels.end());
    registered.route = route;
    if (d.stopped) {  // shut down while the epoch was starting
      for (auto& c : channels) c->cancel();
      if (route) route->cancel();
    }
  }

  epoch_ = std::make_unique<Epoch>();
  auto& e = *epoch_;
  e.epoch = epoch;
  e.rank = rank_;
  e.cursor_actor = caf::actor_cast<caf::actor_addr>(roles.loader);
  e.board = &d.job->status->rank(rank_);
  e.stats = d.job->status->role("loader", rank_).get();  // the board keeps it
  e.stats->set_epoch(epoch);
  e.stats->set_state(RoleState::kRunning);
  e.steps = ticket->steps;
  e.depth = d.options.prefetch_batches;
  std::vector<std::shared_ptr<const std::string>> states;
  std::vector<std::string> loader_states;
  std::shared_ptr<const std::string> dispatcher_state, loader_state;
  bool ranks_changed = false;
  if (restored_ && !restored_->started && restored_->point.epoch == epoch) {
    restored_->started = true;
    states = restored_->states;
    dispatcher_state = restored_->dispatcher_state;
    loader_state = restored_->loader_state;
    loader_states = restored_->loader_states;
    ranks_changed = restored_->ranks_changed;
  }
  auto post = StageRunner::open(job, job.cut.merge_at, job.cut.size,
                                loader_identity(job, rank_, epoch), loader_states, ranks_changed);
  if (!post.is_ok()) {
    for (auto& c : channels) c->cancel();
    if (route) route->cancel();
    return post.status();
  }
  e.cursor = RankCursor(*ticket, w_count, std::move(states), std::move(dispatcher_state),
                        std::move(loader_state));
  e.next_step = ticket->first_step;
  {
    MutexLock lock(&e.mu);
    e.taken_step = ticket->first_step;
  }
  {
    std::vector<QueueRef> queues;
    for (size_t k = 0; k < channels.size(); ++k)
      queues.push_back(
          QueueRef{start.channels[k],
                   channels[k],
                   {},
                   channels.size() == w_count && exact && !route ? uint64_t{queued}
                                                                 : uint64_t{queued} * w_count,
                   channels.size() == w_count && exact && !route ? static_cast<int32_t>(k) : -1});
    if (route) queues.push_back(QueueRef{start.route, {}, route, 0, -1});
    e.board->open_epoch(*ticket, std::move(queues), e.depth);
  }
  e.merger = std::make_unique<RankMerger>(d.job, rank_, std::move(ticket).value(), channels, exact,
                                          route, std::move(post).value());
  e.columns = d.device ? d.device->columns.get() : job.pool.get();  // before any collator runs
  // The collators build ahead from the start where asked to, for the device's prefetcher
  // (which takes batches on a thread of its own), and where collating is where the bytes
  // are read (large members read into the batch): two collators then read at once, which a
  // trainer that only waits for batches would otherwise do alone.
  if (d.device || d.options.prefetch_eager || job.collates_from_files()) {
    MutexLock lock(&e.mu);
    e.ahead = true;
    e.taking_ahead = true;
  }
  // Two collators read the batch's members from their files together, whatever the depth.
  e.together = job.collates_from_files() && !d.device && e.depth > 0;
  const size_t threads = e.together ? 2 : std::min<size_t>(e.depth, 2);
  for (size_t t = 0; t < threads; ++t) e.collators.emplace_back([&e] { e.collate(); });
  if (d.device) {
    auto prefetcher = gpu::DevicePrefetcher::start(
        d.device->blocks, [&e] { return e.take_for_device(); }, d.device->prefetch);
    if (!prefetcher.is_ok()) {
      stop_epoch();
      return prefetcher.status();
    }
    e.prefetcher = std::move(prefetcher).value();
  }
  return Status::ok();
}

Status Loader::failed(Status st) {
  auto& d = *cluster_->impl_;
  // A job that stopped under this rank (a rank lost, the coordinator gone) is why its epoch
  // was cancelled: say that, not "cancelled".
  if (Status why = d.job_failure(); !why.is_ok()) st = why;
  MutexLock lock(&d.mu);
  d.rank_errors.emplace(rank_, st);
  return st;
}

Result<std::optional<Batch>> Loader::next() {
  if (!epoch_) return invalid_argument("next() before start_epoch()");
  auto& e = *epoch_;
  if (!e.error.is_ok()) return e.error;  // a failed epoch stays failed
  if (e.finished) return std::optional<Batch>();
  // Since the last batch was handed out, the trainer was busy (its step); from here on it
  // waits for the next batch.
  const auto step_time = e.stats->end_wait(false, RoleState::kRunning);
  if (step_time.count() > 0)
    e.board->step_time.observe(std::chrono::duration<double>(step_time).count());
  e.stats->begin_wait(true);
  Result<std::optional<Batch>> b = std::optional<Batch>();
  StepProgress progress;
  if (e.prefetcher) {
    b = e.prefetcher->next();
    if (b.is_ok() && b->has_value()) {
      MutexLock lock(&e.mu);
      auto it = e.prefetched.find((*b)->step());
      if (it != e.prefetched.end()) {
        progress = std::move(it->second);
        e.prefetched.erase(it);
      } else {
        b = internal_error("the device prefetcher returned step " + std::to_string((*b)->step()) +
                           ", which the loader never gave it");
      }
    }
  } else {
    b = e.take(&progress, std::chrono::duration_cast<std::chrono::nanoseconds>(step_time));
  }
  // A shard cut short under a memory mapping reads as zeros from then on
  // (io/fs/mapping_guard.h): no batch goes out after that, and the error names the shard
  // rather than what the zeros broke downstream.
  if (Status fault = io::mapping_fault(); !fault.is_ok()) b = fault;
  const bool more = b.is_ok() && b->has_value();
  const auto waited = e.stats->end_wait(true, more        ? RoleState::kRunning
                                              : b.is_ok() ? RoleState::kIdle
                                                          : RoleState::kFailed);
  e.board->next_wait.observe(std::chrono::duration<double>(waited).count());
  if (!b.is_ok()) {
    e.error = failed(b.status());
    e.stats->set_detail(e.error.to_string());
    return e.error;
  }
  if (!b->has_value()) {
    e.finished = true;
    e.board->set_cursor(e.next_step, e.delivered_items, e.cursor.consumed());
    return b;
  }
  ++e.next_step;
  e.delivered_items += (*b)->size();
  e.cursor.apply(progress);
  e.stats->add((*b)->size(), (*b)->payload_bytes());
  e.stats->add_steps(1);
  e.board->batches.add();
  e.stats->begin_wait(false);  // the trainer has the batch
  // The loader actor keeps the cursor for the monitor. A message per batch would wake an
  // actor thousands of times a second, so report at most every 20 ms (and at the end); the
  // exact cursor stays with this object.
  const int64_t now = cluster_->impl_->job->clock->steady_ns();
  const bool last = e.next_step == e.steps;
  if (now - e.last_report_ns >= 20'000'000 || last) {
    e.last_report_ns = now;
    // Gone only after a shutdown, which ended the epoch anyway.
    if (auto cursor = caf::actor_cast<loader_actor>(e.cursor_actor)) {
      caf::anon_send(cursor, StepReport{rank_, e.epoch, e.next_step, e.delivered_items});
      if (last)
        caf::anon_send(cursor, RankEpochDone{rank_, e.epoch, e.next_step, e.delivered_items});
    }
    e.board->set_cursor(e.next_step, e.delivered_items, e.cursor.consumed());
  }
  return b;
}

// ---- checkpoints -------------------------------------------------------------------------

Status Loader::save(const std::string& dir) {
  if (dir.empty())
    return invalid_argument("save() needs a directory; state() returns the cut as bytes");
  return save_cut(dir).status();
}

Result<std::string> Loader::state() {
  SY_ASSIGN_OR_RETURN(std::string bytes, save_cut(""));
  return bytes;
}

Result<std::string> Loader::save_cut(const std::string& dir) {
  if (!epoch_) return invalid_argument("save() needs a started epoch: call start_epoch() first");
  auto& e = *epoch_;
  if (!e.error.is_ok())
    return Status(e.error.code(), "cannot save a failed epoch: " + e.error.message());
  auto& d = *cluster_->impl_;
  SY_ASSIGN_OR_RETURN(auto system, d.running());
  if (Status why = d.job_failure(); !why.is_ok()) return why;
  if (d.job->dispatch != Dispatch::kNone && d.options.order != Order::kExact)
    return invalid_argument(
        "a checkpoint needs order=exact when a dispatcher routes items: with as_completed "
        "the consumed items of a logical shard are not a prefix of its order");
  const checkpoint_actor keeper = d.roles_of(rank_).checkpoint;
  const EpochTicket& t = e.merger->ticket();
  SaveRequest req;
  req.dir = dir;
  req.epoch = e.epoch;
  req.step = e.next_step;
  req.steps = t.steps;
  req.layout_step0 = t.layout_step0;
  req.epoch_complete = e.next_step == t.steps;
  req.shards = t.shards;
  req.take = t.take;
  req.consumed = e.cursor.consumed();
  req.layout_offset = t.layout_offset;
  req.layout_items = t.layout_items;
  req.worker_states = e.cursor.worker_states();
  req.dispatcher_state = e.cursor.dispatcher_state();
  req.loader_state = e.cursor.loader_state();
  Status result = internal_error("no answer from the checkpoint actor");
  std::string state;
  const auto t0 = std::chrono::steady_clock::now();
  caf::scoped_actor self{system->sys};
  const std::chrono::milliseconds timeout{d.options.checkpoint_timeout_ms};
  const std::string where = dir.empty() ? "its loader state" : dir;
  self->request(keeper, timeout, std::move(req))
      .receive(
          [&](SaveDone& msg) {
            received(msg);
            result = Status::ok();
            state = std::move(msg.state);
          },
          [&](const caf::error& err) {
            result = request_failed(err, "the checkpoint actor of rank " + std::to_string(rank_),
                                    "SaveRequest", timeout);
            if (err == caf::sec::request_timeout)
              result = unavailable(
                  "checkpoint of rank " + std::to_string(rank_) + " into " + where +
                  " timed out: " + result.message() + "; every rank must call " +
                  (dir.empty() ? "state()" : "save()") + " at step " + std::to_string(e.next_step));
          });
  if (!result.is_ok()) {
    if (Status why = d.job_failure(); !why.is_ok()) result = why;
    return result;
  }
  e.board->save_time.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return state;
}

Result<ResumePoint> Loader::restore(const std::string& dir) {
  if (dir.empty()) return invalid_argument("restore() needs a directory; load_state() takes bytes");
  return restore_from(RestoreRequest{dir, {}});
}

Result<ResumePoint> Loader::load_state(const std::string& bytes) {
  if (bytes.empty()) return invalid_argument("load_state() was given no bytes");
  return restore_from(RestoreRequest{{}, bytes});
}

Result<ResumePoint> Loader::restore_from(const RestoreRequest& request) {
  if (epoch_ || (restored_ && restored_->started))
    return invalid_argument("restore() must come before the first start_epoch()");
  auto& d = *cluster_->impl_;
  SY_ASSIGN_OR_RETURN(auto system, d.running());
  const checkpoint_actor keeper = d.roles_of(rank_).checkpoint;
  Result<ResumeGrant> grant = internal_error("no answer from the checkpoint actor");
  caf::scoped_actor self{system->sys};
  const std::chrono::milliseconds timeout{d.options.checkpoint_timeout_ms};
  self->request(keeper, timeout, request)
      .receive(
          [&](ResumeGrant& g) {
            received(g);
            grant = std::move(g);
          },
          [&](const caf::error& err) {
            grant = request_failed(err, "the checkpoint actor of rank " + std::to_string(rank_),
                                   "RestoreRequest", timeout);
          });
  if (!grant.is_ok()) {
    if (Status why = d.job_failure(); !why.is_ok()) return why;
    return grant.status();
  }
  auto r = std::make_unique<Restored>();
  r->point = ResumePoint{grant->epoch, grant->partial ? grant->step : 0, grant->generation,
                         grant->rescaled};
  auto shared = [](std::string s) {
    return s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s));
  };
  if (!grant->rescaled)
    for (auto& s : grant->worker_states) r->states.push_back(shared(std::move(s)));
  if (!grant->ranks_changed) {
    if (!grant->dispatcher_states.empty())
      r->dispatcher_state = shared(grant->dispatcher_states[0]);
    if (!grant->loader_states.empty()) r->loader_state = shared(grant->loader_states[0]);
  }
  r->ranks_changed = grant->ranks_changed;
  r->loader_states = grant->loader_states;
  restored_ = std::move(r);
  return restored_->point;
}

}  // namespace shardyard
