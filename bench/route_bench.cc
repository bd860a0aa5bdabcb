// Micro benchmarks of the dispatcher-to-worker hop alone: io::Route of the in-process data
// plane (io/transport/data_plane.h), without reading, stages, packets or the loader.
//
// Items look like the small benchmark dataset's samples: a short key, three fields
// ("bin", "cls", "json") viewing one shared buffer, the buffer held by `owner`. The items to
// route are built while the timer is paused; a worker drops each item it gets right away
// (timed: that frees its field vector, as the real path does once the item is batched).
// Keeping them instead would time first touches of hundreds of MiB of fresh memory, which
// on this VM cost more than the hop. What is timed is what an item costs on its way from
// the dispatcher to a worker:
//   BM_RouteSameThread      send + receive in one thread (round robin, W = 1): the lock,
//                           the deque and the item's move, no thread hand-off (the floor);
//   BM_RouteRoundRobin/W    one dispatcher thread sends 64k items, W worker threads receive
//                           (blocking) until the end: wake-ups and lock contention included;
//   BM_RouteOnRequest/W     the same with one shared queue (an idle worker takes the next);
//   BM_RouteBroadcast/W/C   one SharedShard of 1M items; each of W workers takes its part of
//                           the indices (C = 0 strided, 1 contiguous) and copies the Item
//                           (views: key string, field vector, one atomic increment of the
//                           shared owner) as WorkerCore does, then drops it;
//   BM_ItemCopy             the same Item copy and drop in one thread without a route (its
//                           floor), and BM_ItemDrop the drop alone (routed items pay it too).
// Counter: items_per_second (items that reached a worker); 1e9 / it is ns per item.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io/transport/data_plane.h"
#include "runtime/item.h"

namespace {

using namespace shardyard;

constexpr size_t kRouted = 1 << 16;        // items per iteration of the routed benchmarks
constexpr size_t kShardItems = 1'000'000;  // items of the broadcast shard

// A template item viewing `buf`, like a 4 KiB sample of the small dataset.
Item make_item(const std::shared_ptr<std::vector<uint8_t>>& buf, uint64_t i) {
  Item it;
  it.id = i;
  it.key = "s000012_" + std::to_string(1000000 + i % 1000000).substr(1);
  const uint8_t* base = buf->data();
  it.fields.push_back(Field{"bin", base + 512, 4096});
  it.fields.push_back(Field{"cls", base + 5120, 3});
  it.fields.push_back(Field{"json", base + 6144, 80});
  it.owner = buf;
  return it;
}

std::shared_ptr<std::vector<uint8_t>> make_buffer() {
  return std::make_shared<std::vector<uint8_t>>(8192, uint8_t{0x5a});
}

// Worker threads that receive from `route` until kEnd and drop what they get.
class Workers {
 public:
  Workers(io::Route& route, uint32_t count) : received_(count, 0) {
    for (uint32_t w = 0; w < count; ++w)
      threads_.emplace_back([this, &route, w] {
        for (;;) {
          auto d = route.receive(w, true);
          if (!d.is_ok() || d->kind == io::Delivery::Kind::kEnd) return;
          for (auto& item : d->items) {
            Item mine = std::move(item);
            benchmark::DoNotOptimize(mine.position);
          }
          received_[w] += d->items.size();
          d->items.clear();  // the moved-from shells
        }
      });
  }
  void join() {
    for (auto& t : threads_) t.join();
  }
  size_t received() const {
    size_t n = 0;
    for (auto r : received_) n += r;
    return n;
  }

 private:
  std::vector<size_t> received_;  // by worker; each written by its thread only
  std::vector<std::thread> threads_;
};

void routed(benchmark::State& state, Dispatch mode) {
  const auto workers = static_cast<uint32_t>(state.range(0));
  auto plane = io::inproc_data_plane();
  auto buf = make_buffer();
  std::vector<Item> templ;
  for (size_t i = 0; i < kRouted; ++i) templ.push_back(make_item(buf, i));
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<Item> items = templ;
    // The window bounds the dispatcher only through wait_consumed(), not called here.
    auto route = plane->open_route("bench", mode, workers, UINT32_MAX);
    auto pool = std::make_unique<Workers>(*route, workers);  // they block in receive()
    state.ResumeTiming();
    for (size_t p = 0; p < kRouted; ++p) {
      items[p].position = p;
      if (!route->send(std::move(items[p])).is_ok()) state.SkipWithError("send failed");
    }
    route->finish(Status::ok());
    pool->join();
    state.PauseTiming();
    if (pool->received() != kRouted) state.SkipWithError("items lost");
    pool.reset();
    items.clear();  // moved-from shells
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kRouted));
}

void BM_RouteRoundRobin(benchmark::State& state) { routed(state, Dispatch::kRoundRobin); }
BENCHMARK(BM_RouteRoundRobin)->Arg(1)->Arg(4)->UseRealTime();

void BM_RouteOnRequest(benchmark::State& state) { routed(state, Dispatch::kOnRequest); }
BENCHMARK(BM_RouteOnRequest)->Arg(1)->Arg(4)->UseRealTime();

void BM_RouteSameThread(benchmark::State& state) {
  auto plane = io::inproc_data_plane();
  auto route = plane->open_route("bench", Dispatch::kRoundRobin, 1, UINT32_MAX);
  auto buf = make_buffer();
  constexpr size_t kBatch = 256;
  std::vector<Item> templ;
  for (size_t i = 0; i < kBatch; ++i) templ.push_back(make_item(buf, i));
  std::vector<Item> items;
  uint64_t position = 0;
  for (auto _ : state) {
    state.PauseTiming();
    items = templ;
    state.ResumeTiming();
    for (auto& item : items) {
      item.position = position++;
      if (!route->send(std::move(item)).is_ok()) state.SkipWithError("send failed");
    }
    for (size_t got = 0; got < kBatch;) {
      auto d = route->receive(0, false);
      if (!d.is_ok() || d->items.empty()) {
        state.SkipWithError("nothing received");
        break;
      }
      for (auto& item : d->items) {
        Item mine = std::move(item);
        benchmark::DoNotOptimize(mine.position);
      }
      got += d->items.size();
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_RouteSameThread)->UseRealTime();

std::shared_ptr<const io::SharedShard> make_shard() {
  auto shard = std::make_shared<io::SharedShard>();
  // One buffer per 200 items, as a chunk read of 4 KiB samples shares its buffer.
  std::shared_ptr<std::vector<uint8_t>> buf;
  shard->items.reserve(kShardItems);
  for (size_t i = 0; i < kShardItems; ++i) {
    if (i % 200 == 0) buf = make_buffer();
    shard->items.push_back(make_item(buf, i));
  }
  return shard;
}

void BM_RouteBroadcast(benchmark::State& state) {
  const auto workers = static_cast<uint32_t>(state.range(0));
  const bool contiguous = state.range(1) != 0;
  static const auto shard = make_shard();
  auto plane = io::inproc_data_plane();
  for (auto _ : state) {
    state.PauseTiming();
    auto route = plane->open_route("bench", Dispatch::kBroadcast, workers, UINT32_MAX);
    std::vector<size_t> received(workers, 0);  // by worker; each written by its thread only
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        for (;;) {
          auto d = route->receive(w, true);
          if (!d.is_ok() || d->kind == io::Delivery::Kind::kEnd) return;
          if (d->kind != io::Delivery::Kind::kShard) continue;
          const auto& s = *d->shard;
          const uint64_t n = s.items.size();
          uint64_t begin = w, step = workers, end = n;
          if (contiguous) {
            begin = n * w / workers;
            end = n * (w + 1) / workers;
            step = 1;
          }
          for (uint64_t i = begin; i < end; i += step) {
            Item item = s.items[i];  // a copy of the views, as WorkerCore::consume makes
            item.position = s.first_position + i;
            benchmark::DoNotOptimize(item.position);
            ++received[w];
          }
        }
      });
    state.ResumeTiming();
    if (!route->send_shard(shard).is_ok()) state.SkipWithError("send_shard failed");
    route->finish(Status::ok());
    for (auto& t : threads) t.join();
    state.PauseTiming();
    size_t got = 0;
    for (auto r : received) got += r;
    if (got != kShardItems) state.SkipWithError("items lost");
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kShardItems));
}
BENCHMARK(BM_RouteBroadcast)
    ->ArgNames({"W", "contiguous"})
    ->Args({1, 0})
    ->Args({4, 0})
    ->Args({4, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_ItemCopy(benchmark::State& state) {
  static const auto shard = make_shard();
  for (auto _ : state) {
    for (const auto& it : shard->items) {
      Item item = it;
      benchmark::DoNotOptimize(item.position);
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kShardItems));
}
BENCHMARK(BM_ItemCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_ItemDrop(benchmark::State& state) {
  auto buf = make_buffer();
  constexpr size_t kBatch = 256;
  std::vector<Item> templ, items;
  for (size_t i = 0; i < kBatch; ++i) templ.push_back(make_item(buf, i));
  for (auto _ : state) {
    state.PauseTiming();
    items = templ;
    state.ResumeTiming();
    items.clear();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_ItemDrop)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
