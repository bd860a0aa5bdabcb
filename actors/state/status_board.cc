#include "actors/state/status_board.h"

#include <unistd.h>

#include <algorithm>

#include "io/remote/http_client.h"

namespace shardyard::actors {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

namespace {

MetricLabels rank_label(uint32_t rank) { return {{"rank", std::to_string(rank)}}; }

// "r0/e3/w1" -> "w1": the queue label, without the rank and epoch (labels of their own).
std::string queue_label(const std::string& name) {
  const auto slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

MetricFamily family(std::string name, std::string help, MetricType type) {
  return MetricFamily{std::move(name), std::move(help), type, {}, {}};
}

// A counter's or a gauge's point.
MetricPoint point(MetricLabels labels, double value) {
  return MetricPoint{std::move(labels), value, {}, 0, 0};
}

QueueStatus read_queue(const QueueRef& q) {
  QueueStatus s{q.name, 0, q.capacity, 0};
  if (auto c = q.channel.lock()) {
    s.depth = c->depth();
    s.bytes = c->queued_bytes();
  } else if (auto r = q.route.lock()) {
    s.depth = r->depth();
  }
  return s;
}

}  // namespace

// ---- rank board --------------------------------------------------------------------------

RankBoard::RankBoard(uint32_t rank, MetricsRegistry& m)
    : batches(m.counter("shardyard_batches_total", "Batches the trainer took from next().",
                        rank_label(rank))),
      saves(m.counter("shardyard_checkpoint_saves_total",
                      "Checkpoints this rank saved (committed cuts).", rank_label(rank))),
      next_wait(m.histogram("shardyard_next_wait_seconds",
                            "Time the trainer waited inside Loader::next() for a batch.",
                            duration_buckets(), rank_label(rank))),
      step_time(m.histogram("shardyard_step_seconds",
                            "Time between two Loader::next() calls: the trainer's step.",
                            duration_buckets(), rank_label(rank))),
      save_time(m.histogram("shardyard_checkpoint_save_seconds",
                            "Time a Loader::save() took, the barrier of every rank included.",
                            duration_buckets(), rank_label(rank))),
      rank_(rank) {
  status_.rank = rank;
}

void RankBoard::open_epoch(const EpochTicket& ticket, std::vector<QueueRef> queues,
                           uint32_t prefetch) {
  MutexLock lock(&mu_);
  status_.epoch = ticket.epoch;
  status_.epoch_open = true;
  status_.steps = ticket.steps;
  status_.step = ticket.first_step;
  status_.items = 0;
  status_.shards = ticket.shards;
  status_.take = ticket.take;
  status_.consumed = ticket.consumed;
  if (status_.consumed.size() != status_.shards.size())
    status_.consumed.assign(status_.shards.size(), 0);
  queues_ = std::move(queues);
  prefetch_ = prefetch;
  ready_.store(0, std::memory_order_relaxed);
}

void RankBoard::set_cursor(uint64_t step, uint64_t items, const std::vector<uint64_t>& consumed) {
  MutexLock lock(&mu_);
  status_.step = step;
  status_.items = items;
  if (consumed.size() == status_.shards.size()) status_.consumed = consumed;
}

void RankBoard::close_epoch() {
  MutexLock lock(&mu_);
  status_.epoch_open = false;
  queues_.clear();
  ready_.store(0, std::memory_order_relaxed);
}

void RankBoard::checkpoint_committed(uint64_t generation) {
  MutexLock lock(&mu_);
  ++status_.checkpoint_saves;
  status_.checkpoint_generation = generation;
  auto& g = status_.checkpoint_generations;
  g.push_back(generation);
  if (g.size() > 16) g.erase(g.begin());
}

void RankBoard::checkpoint_restored(uint64_t generation) {
  MutexLock lock(&mu_);
  status_.restored_generation = generation;
  status_.checkpoint_generation = generation;
}

RankStatus RankBoard::collect() const {
  MutexLock lock(&mu_);
  RankStatus s = status_;
  for (const auto& q : queues_) s.queues.push_back(read_queue(q));
  return s;
}

QueueStatus RankBoard::worker_queue(uint32_t worker) const {
  MutexLock lock(&mu_);
  const QueueRef* shared = nullptr;
  for (const auto& q : queues_) {
    if (!q.route.expired() || q.name.empty()) continue;
    if (q.worker == static_cast<int32_t>(worker)) return read_queue(q);
    if (q.worker == -1) shared = &q;
  }
  return shared ? read_queue(*shared) : QueueStatus{};
}

QueueStatus RankBoard::route_queue() const {
  MutexLock lock(&mu_);
  for (const auto& q : queues_)
    if (!q.route.expired()) return read_queue(q);
  return QueueStatus{};
}

QueueStatus RankBoard::batch_queue() const {
  MutexLock lock(&mu_);
  return QueueStatus{"batches", ready_.load(std::memory_order_relaxed), prefetch_, 0};
}

// ---- status board ------------------------------------------------------------------------

StatusBoard::StatusBoard()
    : node_(host_name()),
      pid_(static_cast<uint32_t>(getpid())),
      metrics_(MetricLabels{{"node", node_}}) {
  metrics_.add_collector([this](MetricsSnapshot* out) { collect_metrics(out); });
}

std::shared_ptr<RoleStats> StatusBoard::role(const std::string& role, uint32_t rank,
                                             uint32_t worker) {
  MutexLock lock(&mu_);
  for (const auto& r : roles_)
    if (r->role() == role && r->rank() == rank && r->worker() == worker) return r;
  roles_.push_back(std::make_shared<RoleStats>(role, rank, worker));
  if (role == "worker")  // the series exists from the start (restarts come with processes)
    metrics_.counter("shardyard_worker_restarts_total",
                     "Times a worker was restarted after it failed (none in one process).",
                     {{"rank", std::to_string(rank)}, {"worker", std::to_string(worker)}});
  return roles_.back();
}

RankBoard& StatusBoard::rank(uint32_t rank) {
  MutexLock lock(&mu_);
  auto& board = ranks_[rank];
  if (!board) board = std::make_unique<RankBoard>(rank, metrics_);
  return *board;
}

std::vector<uint32_t> StatusBoard::ranks() const {
  MutexLock lock(&mu_);
  std::vector<uint32_t> out;
  for (const auto& [r, b] : ranks_) out.push_back(r);
  return out;
}

ActorSnapshot StatusBoard::snapshot(const RoleStats& stats) const {
  ActorSnapshot a = stats.snapshot();
  a.node = node_;
  a.pid = pid_;
  return a;
}

RankStatus StatusBoard::collect_rank(uint32_t rank) const {
  std::vector<std::shared_ptr<RoleStats>> roles;
  const RankBoard* board = nullptr;
  {
    MutexLock lock(&mu_);
    for (const auto& r : roles_)
      if (r->rank() == rank) roles.push_back(r);
    auto it = ranks_.find(rank);
    if (it != ranks_.end()) board = it->second.get();
  }
  RankStatus s = board ? board->collect() : RankStatus{};
  s.rank = rank;
  s.node = node_;
  s.pid = pid_;
  // Dispatcher, workers, loader, checkpoint: the order of the data's path.
  static const char* order[] = {"dispatcher", "worker", "loader", "checkpoint"};
  for (const char* role : order)
    for (const auto& r : roles) {
      if (r->role() != role) continue;
      ActorSnapshot a = snapshot(*r);
      if (board) {
        QueueStatus q;
        if (a.role == "worker") q = board->worker_queue(a.worker);
        if (a.role == "dispatcher") q = board->route_queue();
        if (a.role == "loader") q = board->batch_queue();
        a.queue_depth = q.depth;
        a.queue_capacity = q.capacity;
      }
      s.actors.push_back(std::move(a));
    }
  return s;
}

RankReport StatusBoard::collect_report() const {
  RankReport report;
  for (uint32_t r : ranks()) report.ranks.push_back(collect_rank(r));
  report.metrics = metrics_.collect();
  return report;
}

void StatusBoard::collect_metrics(MetricsSnapshot* out) const {
  std::vector<std::shared_ptr<RoleStats>> roles;
  std::vector<const RankBoard*> boards;
  {
    MutexLock lock(&mu_);
    roles = roles_;
    for (const auto& [r, b] : ranks_) boards.push_back(b.get());
  }
  MetricFamily items = family("shardyard_items_total",
                              "Items a role has handled: produced (worker, dispatcher) or "
                              "delivered to the trainer (loader).",
                              MetricType::kCounter);
  MetricFamily bytes =
      family("shardyard_bytes_total", "Payload bytes of those items.", MetricType::kCounter);
  MetricFamily waits = family("shardyard_wait_seconds_total",
                              "Time a role was blocked waiting for input or for its consumer "
                              "(output).",
                              MetricType::kCounter);
  for (const auto& r : roles) {
    MetricLabels labels{{"role", r->role()}, {"rank", std::to_string(r->rank())}};
    if (r->role() == "worker") labels.emplace_back("worker", std::to_string(r->worker()));
    if (r->role() != "checkpoint") {
      items.points.push_back(point(labels, static_cast<double>(r->items())));
      bytes.points.push_back(point(labels, static_cast<double>(r->bytes())));
    }
    for (bool input : {true, false}) {
      MetricLabels l = labels;
      l.emplace_back("direction", input ? "input" : "output");
      waits.points.push_back(point(l, r->waited_s(input)));
    }
  }
  MetricFamily depth = family("shardyard_queue_depth",
                              "Entries queued: packets (channels to the loader), deliveries "
                              "(the route to the workers) or batches ready for the trainer.",
                              MetricType::kGauge);
  MetricFamily capacity = family("shardyard_queue_capacity",
                                 "Entries a queue holds before its producer blocks (0: unbounded).",
                                 MetricType::kGauge);
  MetricFamily held = family("shardyard_data_plane_bytes",
                             "Payload bytes queued in a data-plane channel.", MetricType::kGauge);
  MetricFamily epoch =
      family("shardyard_epoch", "The epoch the rank's trainer is in.", MetricType::kGauge);
  MetricFamily step =
      family("shardyard_step", "Batches the trainer took in the epoch.", MetricType::kGauge);
  MetricFamily steps =
      family("shardyard_epoch_steps", "Batches in the rank's epoch.", MetricType::kGauge);
  MetricFamily shards = family("shardyard_logical_shards",
                               "The rank's logical shards in the epoch by progress: done, "
                               "partial or unseen.",
                               MetricType::kGauge);
  for (const RankBoard* b : boards) {
    const std::string rank = std::to_string(b->rank());
    RankStatus s = b->collect();
    s.queues.push_back(b->batch_queue());
    for (const auto& q : s.queues) {
      MetricLabels l{{"rank", rank}, {"queue", queue_label(q.name)}};
      depth.points.push_back(point(l, static_cast<double>(q.depth)));
      capacity.points.push_back(point(l, static_cast<double>(q.capacity)));
      if (q.name != "batches" && q.capacity > 0)
        held.points.push_back(point(l, static_cast<double>(q.bytes)));
    }
    epoch.points.push_back(point({{"rank", rank}}, double(s.epoch)));
    step.points.push_back(point({{"rank", rank}}, double(s.step)));
    steps.points.push_back(point({{"rank", rank}}, double(s.steps)));
    uint64_t n[3] = {0, 0, 0};  // done, partial, unseen
    for (size_t k = 0; k < s.shards.size(); ++k)
      ++n[s.consumed[k] >= s.take[k] ? 0 : s.consumed[k] == 0 ? 2 : 1];
    const char* names[3] = {"done", "partial", "unseen"};
    for (int i = 0; i < 3; ++i)
      shards.points.push_back(point({{"rank", rank}, {"state", names[i]}}, double(n[i])));
  }
  MetricFamily retries =
      family("shardyard_remote_read_retries_total",
             "Retries of HTTP(S) and S3 requests in this process.", MetricType::kCounter);
  retries.points.push_back(point({}, double(io::remote_read_retries())));
  for (auto* f :
       {&items, &bytes, &waits, &depth, &capacity, &held, &epoch, &step, &steps, &shards, &retries})
    out->families.push_back(std::move(*f));
}

}  // namespace shardyard::actors
