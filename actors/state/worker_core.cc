#include "actors/state/worker_core.h"

#include <dlfcn.h>

#include <deque>
#include <future>
// glibc's malloc_trim, except under a sanitizer, whose allocator replaces glibc's (trimming
// glibc's unused arenas there reads memory that was never set up).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SY_SANITIZED_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SY_SANITIZED_ALLOCATOR 1
#endif
#if defined(__GLIBC__) && !defined(SY_SANITIZED_ALLOCATOR)
#define SY_TRIM_MALLOC 1
#include <malloc.h>
#endif

#include "actors/state/shard_stream.h"
#include "actors/state/status_board.h"
#include "runtime/checkpoint.h"

namespace shardyard::actors {

// ---- stages ------------------------------------------------------------------------------

Result<StageRunner> StageRunner::open(const JobData& job, size_t begin, size_t end,
                                      const WorkerInfo& identity,
                                      const std::vector<std::string>& saved_states, bool rescaled) {
  StageRunner r;
  SY_ASSIGN_OR_RETURN(r.stages_, build_stages(job.pipeline, begin, end));
  for (auto& s : r.stages_) SY_RETURN_IF_ERROR(s->open(identity));
  for (auto& s : r.stages_)
    if (s->has_state()) r.stateful_.push_back(s.get());
  r.scratch_.resize(r.stateful_.size());
  if (saved_states.empty()) return r;
  // Each saved state lists its stateful stages in order; stage i gets entry i of every
  // saved state (one without a rescale).
  std::vector<std::vector<std::string>> per_stage(r.stateful_.size());
  for (const auto& blob : saved_states) {
    if (blob.empty()) continue;
    SY_ASSIGN_OR_RETURN(auto saved, decode_stage_states(blob));
    if (saved.size() != r.stateful_.size())
      return invalid_argument("the checkpoint holds state for " + std::to_string(saved.size()) +
                              " stateful stages; this pipeline has " +
                              std::to_string(r.stateful_.size()));
    for (size_t i = 0; i < saved.size(); ++i) per_stage[i].push_back(std::move(saved[i]));
  }
  for (size_t i = 0; i < r.stateful_.size(); ++i)
    if (!per_stage[i].empty())
      SY_RETURN_IF_ERROR(r.stateful_[i]->restore_state(per_stage[i], rescaled));
  return r;
}

Status StageRunner::process(Item& item, const WorkerInfo& identity, uint64_t epoch_key) {
  StageContext ctx{identity, ItemRng(hash_combine(epoch_key, item.id))};
  for (auto& s : stages_) {
    Status st = s->process(item, ctx);
    if (!st.is_ok())
      return Status(st.code(), "stage failed on item '" + item.key + "' (item " +
                                   std::to_string(item.id) + "): " + st.message());
  }
  return Status::ok();
}

std::shared_ptr<const std::string> StageRunner::state() const {
  for (size_t i = 0; i < stateful_.size(); ++i) scratch_[i] = stateful_[i]->save_state();
  return std::make_shared<const std::string>(encode_stage_states(scratch_));
}

// ---- worker ------------------------------------------------------------------------------

namespace {
// Gathers items into packets for a channel; a push into a full channel is a wait for output,
// and the items count for the monitor as they are produced.
class Packer {
 public:
  Packer(const JobData& job, io::Channel& channel, RoleStats* stats)
      : job_(job), channel_(channel), stats_(stats) {}
  Status add(Item item, UnitStats* stats) {
    const uint64_t bytes = item.payload_bytes();
    stats->bytes += bytes;
    ++stats->items;
    bytes_ += bytes;
    if (stats_) stats_->add(1, bytes);
    packet_.items.push_back(std::move(item));
    if (packet_.items.size() >= job_.packet_items || bytes_ >= job_.packet_bytes) return flush();
    return Status::ok();
  }
  Status flush() {
    if (packet_.items.empty()) return Status::ok();
    packet_.bytes = bytes_;
    const size_t sent = packet_.items.size();
    Status st;
    {
      WaitScope pushing(stats_, false);
      st = channel_.push(std::move(packet_));
    }
    // The next packet is sized like this one: growing it item by item moved every item
    // of a packet some seven times over (a packet holds up to job_.packet_items).
    packet_ = io::Packet{};
    packet_.items.reserve(sent);
    bytes_ = 0;
    return st;
  }

 private:
  const JobData& job_;
  io::Channel& channel_;
  RoleStats* stats_;
  io::Packet packet_;
  uint64_t bytes_ = 0;
};
}  // namespace

WorkerCore::WorkerCore(std::shared_ptr<const JobData> job, uint32_t rank, uint32_t worker)
    : job_(std::move(job)), reader_(*job_->fs, job_->manifest, job_->pool, job_->reader) {
  if (job_->status) stats_ = job_->status->role("worker", rank, worker);
  identity_.rank = rank;
  identity_.world_size = job_->topology.ranks;
  identity_.worker = worker;
  identity_.num_workers = job_->topology.workers;
  identity_.global_worker = rank * job_->topology.workers + worker;
  identity_.seed = job_->plan.seed;
}

Result<UnitStats> WorkerCore::run(const WorkUnit& unit, io::Channel& channel) {
  std::shared_ptr<io::Route> route;
  if (!unit.route.empty()) route = job_->data_plane->attach_route(unit.route);
  return run(unit, channel, route.get());
}

Result<UnitStats> WorkerCore::run(const WorkUnit& unit, io::Channel& channel, io::Route* route) {
  UnitStats stats;
  Status st;
  if (unit.route.empty()) {
    st = produce(unit, channel, &stats);
  } else if (route) {
    st = consume(unit, *route, channel, &stats);
  } else {
    st =
        internal_error("worker " + std::to_string(unit.worker) + ": no route '" + unit.route + "'");
  }
  channel.finish(st);
  if (!st.is_ok()) return st;
  return stats;
}

Status WorkerCore::produce(const WorkUnit& unit, io::Channel& channel, UnitStats* stats) {
  identity_.epoch = unit.epoch;
  ScopedWorkerInfo scoped(&identity_);
  const auto& job = *job_;
  SY_ASSIGN_OR_RETURN(auto stages, StageRunner::open(job, 0, job.cut.merge_at, identity_,
                                                     unit.stage_states, unit.rescaled));
  // Chunks are read where the channel takes them without a copy, when it can (a worker
  // process's data arena), and large members are left for the batch to read when the job
  // and the channel allow it; the reader forgets both with the unit.
  reader_.set_chunk_allocator(channel.chunk_allocator());
  reader_.set_unread_field_bytes(channel.takes_unread_fields() ? job.unread_field_bytes : 0);
  struct Forget {
    io::SampleReader& reader;
    ~Forget() {
      reader.set_chunk_allocator(nullptr);
      reader.set_unread_field_bytes(0);
    }
  } forget{reader_};
  ShardStreams streams(job, unit, reader_, stats_.get());
  InterleaveCursor order(unit.take, unit.consumed);
  Packer packer(job, channel, stats_.get());
  while (!order.done()) {
    SY_ASSIGN_OR_RETURN(Item item, streams.next(order.next()));
    if (on_item_) on_item_(item);
    if (!stages.empty()) {
      SY_RETURN_IF_ERROR(stages.process(item, identity_, unit.epoch_key));
      if (stages.stateful()) item.stage_state = stages.state();  // the state right after it
    }
    item.worker = unit.worker;
    SY_RETURN_IF_ERROR(packer.add(std::move(item), stats));
  }
  return packer.flush();
}

Status WorkerCore::consume(const WorkUnit& unit, io::Route& route, io::Channel& channel,
                           UnitStats* stats) {
  identity_.epoch = unit.epoch;
  ScopedWorkerInfo scoped(&identity_);
  const auto& job = *job_;
  SY_ASSIGN_OR_RETURN(auto stages, StageRunner::open(job, job.cut.dispatcher_end, job.cut.merge_at,
                                                     identity_, unit.stage_states, unit.rescaled));
  Packer packer(job, channel, stats_.get());
  auto emit = [&](Item item) -> Status {
    if (on_item_) on_item_(item);
    if (!stages.empty()) {
      SY_RETURN_IF_ERROR(stages.process(item, identity_, unit.epoch_key));
      if (stages.stateful()) item.stage_state = stages.state();
    }
    item.worker = unit.worker;
    return packer.add(std::move(item), stats);
  };
  const uint32_t w_count = job.topology.workers;
  const bool contiguous = job.plan.worker_strategy == "contiguous";
  for (;;) {
    SY_ASSIGN_OR_RETURN(io::Delivery d, route.receive(unit.worker, false));
    if (d.kind == io::Delivery::Kind::kItems && d.items.empty()) {
      // Nothing queued: hand the loader what this worker holds before waiting.
      SY_RETURN_IF_ERROR(packer.flush());
      WaitScope waiting(stats_.get(), true);
      SY_ASSIGN_OR_RETURN(d, route.receive(unit.worker, true));
    }
    switch (d.kind) {
      case io::Delivery::Kind::kEnd:
        return packer.flush();
      case io::Delivery::Kind::kItems:
        for (auto& item : d.items) SY_RETURN_IF_ERROR(emit(std::move(item)));
        break;
      case io::Delivery::Kind::kShard: {
        // The WORKER level on the loaded shard's item indices: this worker's part.
        const auto& shard = *d.shard;
        const ShardPart part = shard_part(shard.size(), unit.worker, w_count, contiguous);
        const uint64_t window = route.window();
        for (uint64_t i = part.begin; i < part.end; i += part.step) {
          const uint64_t position = shard.first_position + i;
          if (position < skip_below_) continue;
          // Every worker produces positions of the same shard: in exact order none runs
          // more than the window ahead of the loader, which bounds the loader's reorder
          // buffer (as completed, the channel's capacity is the only bound needed).
          if (job.exact_order && position >= route.consumed_position() + window) {
            SY_RETURN_IF_ERROR(packer.flush());
            WaitScope credit(stats_.get(), false);
            SY_RETURN_IF_ERROR(route.wait_consumed(position + 1 - window));
          }
          // A copy of the views (the bytes stay shared), or decoded from an image.
          SY_ASSIGN_OR_RETURN(Item item, shard.item(i));
          item.position = position;
          SY_RETURN_IF_ERROR(emit(std::move(item)));
        }
        break;
      }
    }
  }
}

ShardPart shard_part(uint64_t items, uint32_t worker, uint32_t workers, bool contiguous) {
  if (contiguous) return ShardPart{items * worker / workers, 1, items * (worker + 1) / workers};
  return ShardPart{worker, workers, items};
}

// ---- dispatcher --------------------------------------------------------------------------

namespace {
// Hands the allocator's free pages back to the system. The shardyard executable allocates
// with jemalloc (tools/CMakeLists.txt), as may a trainer that links or preloads it: then its
// purge of every arena (MALLCTL_ARENAS_ALL is 4096), found at run time so that this library
// needs no jemalloc to build; else glibc's malloc_trim.
void release_free_memory() {
#if !defined(SY_SANITIZED_ALLOCATOR)
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  static const auto mallctl = reinterpret_cast<Mallctl>(::dlsym(RTLD_DEFAULT, "mallctl"));
  if (mallctl != nullptr) {
    (void)mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
    return;
  }
#endif
#if defined(SY_TRIM_MALLOC)
  malloc_trim(0);
#endif
}
}  // namespace

DispatchCore::DispatchCore(std::shared_ptr<const JobData> job, uint32_t rank)
    : job_(std::move(job)), reader_(*job_->fs, job_->manifest, job_->pool, job_->reader) {
  identity_.rank = rank;
  identity_.world_size = job_->topology.ranks;
  identity_.num_workers = job_->topology.workers;
  identity_.global_worker = rank * job_->topology.workers;
  identity_.seed = job_->plan.seed;
  identity_.dispatcher = true;
  if (job_->status) stats_ = job_->status->role("dispatcher", rank);
}

Result<UnitStats> DispatchCore::run(const WorkUnit& unit, io::Route& route) {
  UnitStats stats;
  identity_.epoch = unit.epoch;
  ScopedWorkerInfo scoped(&identity_);
  Status st = route.mode() == Dispatch::kBroadcast ? broadcast(unit, route, &stats)
                                                   : route_items(unit, route, &stats);
  route.finish(st);
  if (!st.is_ok()) return st;
  return stats;
}

Status DispatchCore::route_items(const WorkUnit& unit, io::Route& route, UnitStats* stats) {
  const auto& job = *job_;
  SY_ASSIGN_OR_RETURN(auto stages, StageRunner::open(job, 0, job.cut.dispatcher_end, identity_,
                                                     unit.stage_states, unit.rescaled));
  ShardStreams streams(job, unit, reader_, stats_.get());
  InterleaveCursor order(unit.take, unit.consumed);
  uint64_t position = 0;
  for (auto c : unit.consumed) position += c;
  const uint64_t window = route.window();
  while (!order.done()) {
    if (position >= route.consumed_position() + window) {
      WaitScope credit(stats_.get(), false);
      SY_RETURN_IF_ERROR(route.wait_consumed(position + 1 - window));
    }
    SY_ASSIGN_OR_RETURN(Item item, streams.next(order.next()));
    item.position = position++;
    if (!stages.empty()) {
      SY_RETURN_IF_ERROR(stages.process(item, identity_, unit.epoch_key));
      if (stages.stateful()) item.dispatch_state = stages.state();
    }
    if (route.mode() == Dispatch::kByKey) {
      std::string_view key = item.key;
      if (!job.route_key_field.empty()) {
        const Field* f = item.field(job.route_key_field);
        if (f == nullptr)
          return invalid_argument("item '" + item.key + "' has no field '" + job.route_key_field +
                                  "' to route by");
        key = f->view();
      }
      Hasher h;
      h.add(key);
      item.worker = static_cast<uint32_t>(h.digest() % job.topology.workers);
    }
    const uint64_t bytes = item.payload_bytes();
    stats->bytes += bytes;
    ++stats->items;
    SY_RETURN_IF_ERROR(route.send(std::move(item)));
    if (stats_) stats_->add(1, bytes);
  }
  return Status::ok();
}

Status DispatchCore::broadcast(const WorkUnit& unit, io::Route& route, UnitStats* stats) {
  const auto& job = *job_;
  if (job.cut.dispatcher_end != 0)
    return internal_error("broadcast dispatch cannot run item stages in the dispatcher");
  const size_t count = unit.shards.size();
  std::vector<uint64_t> first(count + 1, 0);  // rank position where each shard starts
  for (auto c : unit.consumed) first[0] += c;
  for (size_t k = 0; k < count; ++k) first[k + 1] = first[k] + (unit.take[k] - unit.consumed[k]);
  // Shard k loads while the workers use the shards before it, once the loader has consumed
  // everything before shard k - N: at most N + 1 shards are held (the one in use + N ahead).
  const size_t ahead = std::max<uint32_t>(1, job.prefetch_shards);
  release_free_memory();  // what the previous epoch's shards left in the arenas
  std::deque<std::future<Result<std::shared_ptr<io::SharedShard>>>> loading;
  size_t launched = 0;
  auto launch = [&]() -> Status {
    const size_t k = launched;
    if (k > ahead && unit.take[k] > unit.consumed[k]) {  // else: consumed before a resume
      WaitScope credit(stats_.get(), false);
      SY_RETURN_IF_ERROR(route.wait_consumed(first[k - ahead]));
      // A used shard's items were freed on the threads that last held them (workers,
      // collators), into their allocator arenas; hand that memory back before loading the
      // next one, or the heap of a long run grows with every arena that kept a shard's worth.
      release_free_memory();
    }
    loading.push_back(std::async(std::launch::async, [this, &unit, &first, k]() {
      // Each load has its own reader (readers are single-owner); they share the pool.
      io::SampleReader reader(*job_->fs, job_->manifest, job_->pool, job_->reader);
      auto shard = std::make_shared<io::SharedShard>();
      shard->first_position = first[k];
      Status st = load_shard(*job_, reader, unit.shards[k], unit.consumed[k], unit.take[k],
                             unit.epoch_key, shard.get());
      if (!st.is_ok()) return Result<std::shared_ptr<io::SharedShard>>(st);
      return Result<std::shared_ptr<io::SharedShard>>(std::move(shard));
    }));
    ++launched;
    return Status::ok();
  };
  Status st;
  for (size_t k = 0; k < count && st.is_ok(); ++k) {
    if (launched == k) st = launch();
    if (!st.is_ok()) break;
    Result<std::shared_ptr<io::SharedShard>> shard = std::shared_ptr<io::SharedShard>();
    {
      WaitScope loading_wait(stats_.get(), true);
      shard = loading.front().get();
    }
    loading.pop_front();
    if (!shard.is_ok()) {
      st = shard.status();
      break;
    }
    stats->items += (*shard)->items.size();
    stats->bytes += (*shard)->bytes;
    if (stats_) stats_->add((*shard)->items.size(), (*shard)->bytes);
    if (!(*shard)->items.empty()) st = route.send_shard(std::move(shard).value());
    while (st.is_ok() && launched < count && launched <= k + ahead) st = launch();
  }
  for (auto& f : loading) f.wait();  // loads still running use `unit` and this reader's job
  return st;
}

}  // namespace shardyard::actors
