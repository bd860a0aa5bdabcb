// Micro benchmarks of runtime::build_batch: collating 64 items into per-field columns (one
// memcpy per field per item into a pooled, page-aligned column buffer).
//
// The items view a page-aligned "chunk" laid out like a tar read (each .bin payload starts
// 512 bytes after its header, samples 3 members apart), as SampleReader produces them.
// Every item has the three fields of the benchmark datasets: bin (the payload), cls (3
// bytes) and json (~80 bytes). Counters:
//   bytes_per_second  payload bytes collated per second (all three fields)
//   items_per_second  items per second
// Variants: pooled (the column buffers come back to the pool after each batch: the steady
// state of a run) and fresh (pool that keeps nothing: every batch gets new memory, so every
// column page is faulted in, as at the start of a run or when the pool overflows).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/batch.h"
#include "runtime/buffer.h"
#include "runtime/item.h"

namespace {

using namespace shardyard;

constexpr size_t kBlock = 512;
constexpr size_t kBatch = 64;

size_t padded(size_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

struct Chunk {
  std::shared_ptr<BufferPool> pool = BufferPool::create(0);
  std::shared_ptr<Buffer> buf;
  std::vector<Item> items;  // the template: views into buf
  std::vector<std::string> keys;
};

Chunk make_chunk(size_t payload) {
  Chunk c;
  const std::string cls = "417";
  const std::string json =
      "{\"index\":1234,\"key\":\"s000012_001234\",\"label\":417,\"shard\":12,\"size\":" +
      std::to_string(payload) + "}";
  const size_t per =
      kBlock + padded(payload) + kBlock + padded(cls.size()) + kBlock + padded(json.size());
  c.buf = c.pool->acquire(per * kBatch);
  std::memset(c.buf->data(), 0x5a, per * kBatch);  // touch every page once
  for (size_t i = 0; i < kBatch; ++i) {
    uint8_t* base = c.buf->data() + i * per;
    uint8_t* bin = base + kBlock;
    uint8_t* c_cls = bin + padded(payload) + kBlock;
    uint8_t* c_json = c_cls + padded(cls.size()) + kBlock;
    std::memcpy(c_cls, cls.data(), cls.size());
    std::memcpy(c_json, json.data(), json.size());
    Item it;
    it.id = i;
    c.keys.push_back("s000012_" + std::to_string(1000000 + i).substr(1));
    it.fields.push_back(Field{"bin", bin, payload});
    it.fields.push_back(Field{"cls", c_cls, cls.size()});
    it.fields.push_back(Field{"json", c_json, json.size()});
    it.owner = c.buf;
    c.items.push_back(std::move(it));
  }
  return c;
}

void run(benchmark::State& state, size_t payload, size_t pool_cache_bytes) {
  Chunk c = make_chunk(payload);
  auto pool = BufferPool::create(pool_cache_bytes);
  std::vector<Item> items = c.items;
  uint64_t bytes_per_batch = 0;
  for (const auto& it : items) bytes_per_batch += it.payload_bytes();
  for (auto _ : state) {
    // build_batch moves the keys out of the items: put them back (64 short strings).
    state.PauseTiming();
    for (size_t i = 0; i < kBatch; ++i) items[i].key = c.keys[i];
    state.ResumeTiming();
    Batch b = build_batch(items, 0, 0, 0, *pool).value();
    benchmark::DoNotOptimize(b.columns().data());
    // the batch (and its column buffers) dies here, as when the trainer drops it
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_batch));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}

void BM_BuildBatch64_Pooled(benchmark::State& state) {
  run(state, static_cast<size_t>(state.range(0)), 256u << 20);
}
BENCHMARK(BM_BuildBatch64_Pooled)->Arg(4096)->Arg(512 << 10)->UseRealTime();

void BM_BuildBatch64_Fresh(benchmark::State& state) {
  run(state, static_cast<size_t>(state.range(0)), 0);
}
BENCHMARK(BM_BuildBatch64_Fresh)->Arg(4096)->Arg(512 << 10)->UseRealTime();

// The floor: one memcpy of the same payload bytes into a reused page-aligned buffer.
void BM_Memcpy_Floor(benchmark::State& state) {
  const size_t payload = static_cast<size_t>(state.range(0));
  Chunk c = make_chunk(payload);
  auto dst = c.pool->acquire(payload * kBatch);
  std::memset(dst->data(), 0, payload * kBatch);
  for (auto _ : state) {
    for (size_t i = 0; i < kBatch; ++i)
      std::memcpy(dst->data() + i * payload, c.items[i].fields[0].data, payload);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * payload * kBatch));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_Memcpy_Floor)->Arg(4096)->Arg(512 << 10)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
