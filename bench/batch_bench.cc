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
// column page is faulted in, as at the start of a run or when the pool overflows); spread
// (4 KiB samples taken from the open chunks of 64 logical shards, range(0) MiB of them, as
// a run interleaves them: the copies read from beyond the core's cache).
#include <benchmark/benchmark.h>

#include <algorithm>
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

const std::string kCls = "417";
std::string json_of(size_t payload) {
  return "{\"index\":1234,\"key\":\"s000012_001234\",\"label\":417,\"shard\":12,\"size\":" +
         std::to_string(payload) + "}";
}

// One sample's tar bytes as a read lays them out: header, payload, header, cls, header,
// json, each member padded to 512 bytes.
size_t sample_bytes(size_t payload) {
  return kBlock + padded(payload) + kBlock + padded(kCls.size()) + kBlock +
         padded(json_of(payload).size());
}

// Writes sample `index` (payload bytes 0x5a) at `base` and returns its item, which views it.
Item lay_out_sample(uint8_t* base, size_t payload, uint64_t index) {
  const std::string& cls = kCls;
  const std::string json = json_of(payload);
  std::memset(base, 0x5a, sample_bytes(payload));  // touch every page once
  uint8_t* bin = base + kBlock;
  uint8_t* c_cls = bin + padded(payload) + kBlock;
  uint8_t* c_json = c_cls + padded(cls.size()) + kBlock;
  std::memcpy(c_cls, cls.data(), cls.size());
  std::memcpy(c_json, json.data(), json.size());
  Item it;
  it.id = index;
  it.fields.push_back(Field{"bin", bin, payload});
  it.fields.push_back(Field{"cls", c_cls, cls.size()});
  it.fields.push_back(Field{"json", c_json, json.size()});
  return it;
}

std::string key_of(uint64_t i) { return "s000012_" + std::to_string(1000000 + i).substr(1); }

Chunk make_chunk(size_t payload) {
  Chunk c;
  const size_t per = sample_bytes(payload);
  c.buf = c.pool->acquire(per * kBatch);
  for (size_t i = 0; i < kBatch; ++i) {
    Item it = lay_out_sample(c.buf->data() + i * per, payload, i);
    c.keys.push_back(key_of(i));
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

// Collating 4 KiB samples whose bytes are spread over the open chunks of a run, as a rank
// collates them: 64 logical shards, each with one open chunk (range(0) MiB in all; the
// default chunk size aims at 8 MiB, runtime/shard.h default_chunk_items), and batch b
// takes sample b of each chunk (the interleave of logical shards), so the reads sweep all
// the chunks' bytes. The pooled case above reads one batch's 360 KiB, which stays in the
// core's cache. The chunks are filled once, so this measures the copy against where its
// source lies, not the kernel's read.
void BM_BuildBatch64_Spread(benchmark::State& state) {
  const size_t payload = 4096, per = sample_bytes(payload);
  const size_t chunk_bytes = (static_cast<size_t>(state.range(0)) << 20) / kBatch;
  const size_t per_chunk = std::max<size_t>(1, chunk_bytes / per);
  auto chunk_pool = BufferPool::create(0);
  auto buf = chunk_pool->acquire(per * per_chunk * kBatch);
  std::vector<std::vector<Item>> chunks(kBatch);
  for (size_t c = 0; c < kBatch; ++c)
    for (size_t j = 0; j < per_chunk; ++j) {
      Item it = lay_out_sample(buf->data() + (c * per_chunk + j) * per, payload, j * kBatch + c);
      it.owner = buf;
      chunks[c].push_back(std::move(it));
    }
  auto pool = BufferPool::create(256u << 20);
  std::vector<Item> items(kBatch);
  uint64_t bytes_per_batch = 0;
  size_t b = 0;
  for (auto _ : state) {
    state.PauseTiming();
    bytes_per_batch = 0;
    for (size_t c = 0; c < kBatch; ++c) {
      items[c] = chunks[c][b % per_chunk];
      items[c].key = key_of(items[c].id);
      bytes_per_batch += items[c].payload_bytes();
    }
    ++b;
    state.ResumeTiming();
    Batch batch = build_batch(items, 0, 0, 0, *pool).value();
    benchmark::DoNotOptimize(batch.columns().data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_batch));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["chunk_samples"] = static_cast<double>(per_chunk);
}
BENCHMARK(BM_BuildBatch64_Spread)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(6)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->UseRealTime();

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
