// Micro benchmarks of io::parse_tar_buffer: the in-memory tar walk that SampleReader runs
// on every chunk it reads (header decode + checksum + name, a callback per member), and of
// SampleReader::read itself over a shard on disk.
//
// The archive is built in memory, page-aligned, with the layout of the benchmark datasets
// (docs/performance.md): samples of three consecutive ustar members KEY.bin (payload),
// KEY.cls (3 bytes) and KEY.json (~80 bytes), key "sSSSSSS_IIIIII". Counters:
//   items_per_second  tar members walked per second
//   bytes_per_second  tar bytes walked per second (headers + payload + padding)
//   samples/s         samples (3 members each) per second
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "io/format/manifest_scan.h"
#include "io/format/sample_reader.h"
#include "io/format/tar.h"
#include "io/fs/file_system.h"

namespace {

using shardyard::Status;
using shardyard::io::kTarBlock;

// A page-aligned byte block that frees itself.
struct AlignedBytes {
  uint8_t* data = nullptr;
  size_t size = 0;
  explicit AlignedBytes(size_t n) : size(n) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, n == 0 ? 4096 : n) != 0) std::abort();
    data = static_cast<uint8_t*>(p);
    std::memset(data, 0, n);
  }
  ~AlignedBytes() { std::free(data); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
};

void put_octal(uint8_t* field, size_t width, uint64_t v) {
  // width-1 octal digits, NUL-terminated (as Python's tarfile and GNU tar write them)
  std::snprintf(reinterpret_cast<char*>(field), width, "%0*llo", static_cast<int>(width - 1),
                static_cast<unsigned long long>(v));
}

// Appends one ustar member (header + payload + padding) at `at`; returns the new end.
size_t add_member(uint8_t* buf, size_t at, const std::string& name, const uint8_t* payload,
                  size_t size) {
  uint8_t* h = buf + at;
  std::memset(h, 0, kTarBlock);
  std::memcpy(h, name.data(), name.size());
  put_octal(h + 100, 8, 0644);
  put_octal(h + 108, 8, 0);
  put_octal(h + 116, 8, 0);
  put_octal(h + 124, 12, size);
  put_octal(h + 136, 12, 1700000000);
  h[156] = '0';
  std::memcpy(h + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) sum += h[i];
  std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
  h[155] = ' ';
  at += kTarBlock;
  if (size > 0) std::memcpy(buf + at, payload, size);
  return at + (size + kTarBlock - 1) / kTarBlock * kTarBlock;
}

struct Archive {
  std::unique_ptr<AlignedBytes> bytes;
  size_t members = 0, samples = 0;
};

// `samples` samples of `payload` bytes each; `with_meta` adds the .cls and .json members.
Archive make_archive(size_t samples, size_t payload, bool with_meta) {
  const size_t per = kTarBlock + (payload + kTarBlock - 1) / kTarBlock * kTarBlock +
                     (with_meta ? 4 * kTarBlock : 0);
  Archive a;
  a.bytes = std::make_unique<AlignedBytes>(samples * per + 2 * kTarBlock);
  std::vector<uint8_t> data(payload);
  for (size_t i = 0; i < payload; ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  size_t at = 0;
  char key[32];
  for (size_t s = 0; s < samples; ++s) {
    std::snprintf(key, sizeof key, "s%06zu_%06zu", s / 2000, s % 2000);
    at = add_member(a.bytes->data, at, std::string(key) + ".bin", data.data(), payload);
    ++a.members;
    if (with_meta) {
      std::string cls = std::to_string(s % 1000);
      at = add_member(a.bytes->data, at, std::string(key) + ".cls",
                      reinterpret_cast<const uint8_t*>(cls.data()), cls.size());
      std::string json = "{\"index\":" + std::to_string(s % 2000) + ",\"key\":\"" + key +
                         "\",\"label\":" + cls + ",\"shard\":" + std::to_string(s / 2000) +
                         ",\"size\":" + std::to_string(payload) + "}";
      at = add_member(a.bytes->data, at, std::string(key) + ".json",
                      reinterpret_cast<const uint8_t*>(json.data()), json.size());
      a.members += 2;
    }
  }
  a.bytes->size = at;  // no end-of-archive blocks: a chunk read from the middle of a shard
  a.samples = samples;
  return a;
}

void set_counters(benchmark::State& state, const Archive& a) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * a.members));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * a.bytes->size));
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * a.samples), benchmark::Counter::kIsRate);
}

// Walks the archive once per iteration, handing every entry to `on_entry` (which returns a
// Status and may count into its own state).
template <class OnEntry>
void walk(benchmark::State& state, const Archive& a, OnEntry on_entry) {
  const std::string source = "bench.tar";
  for (auto _ : state) {
    Status st = shardyard::io::parse_tar_buffer(a.bytes->data, a.bytes->size, 0, source, on_entry);
    if (!st.is_ok()) state.SkipWithError(st.to_string().c_str());
  }
  set_counters(state, a);
}

// The bare walk: the callback counts members. Arg: samples per buffer (one chunk).
void BM_ParseTarBuffer_4KiB_only(benchmark::State& state) {
  size_t n = 0;
  walk(state, make_archive(static_cast<size_t>(state.range(0)), 4096, false),
       [&](const shardyard::io::TarEntry&, const uint8_t*) {
         benchmark::DoNotOptimize(++n);
         return Status::ok();
       });
}
BENCHMARK(BM_ParseTarBuffer_4KiB_only)->Arg(256)->Arg(2000);

// The dataset layout (.bin 4 KiB + .cls + .json), bare walk.
void BM_ParseTarBuffer_Sample3(benchmark::State& state) {
  size_t n = 0;
  walk(state, make_archive(static_cast<size_t>(state.range(0)), 4096, true),
       [&](const shardyard::io::TarEntry& e, const uint8_t* p) {
         benchmark::DoNotOptimize(n += e.size + (p != nullptr));
         return Status::ok();
       });
}
BENCHMARK(BM_ParseTarBuffer_Sample3)->Arg(256)->Arg(2000);

// Same, with the per-member work SampleReader adds: split_key and grouping by key.
void BM_ParseTarBuffer_Sample3_SplitKey(benchmark::State& state) {
  size_t samples = 0;
  std::string last;
  walk(state, make_archive(static_cast<size_t>(state.range(0)), 4096, true),
       [&](const shardyard::io::TarEntry& e, const uint8_t*) -> Status {
         auto kf = shardyard::io::split_key(e.path);
         if (!kf) return shardyard::corrupt("no key: " + e.path);
         if (kf->key != last) {
           last.assign(kf->key);
           benchmark::DoNotOptimize(++samples);
         }
         return Status::ok();
       });
}
BENCHMARK(BM_ParseTarBuffer_Sample3_SplitKey)->Arg(256)->Arg(2000);

// Large members: the walk should cost nothing per payload byte.
void BM_ParseTarBuffer_512KiB(benchmark::State& state) {
  size_t n = 0;
  walk(state, make_archive(static_cast<size_t>(state.range(0)), 512 << 10, true),
       [&](const shardyard::io::TarEntry&, const uint8_t*) {
         benchmark::DoNotOptimize(++n);
         return Status::ok();
       });
}
BENCHMARK(BM_ParseTarBuffer_512KiB)->Arg(64);

// SampleReader::read over one shard of 2,000 such samples in the page cache, a chunk at a
// time as a worker reads it (the small benchmark set's chunk is 18 samples): the read into a
// pooled buffer, the header walk, and the check of every sample against its manifest entry
// (offset, key) that fills the items. Arg: samples per chunk. The shard is written into
// TMPDIR (default /tmp) and scanned for its manifest outside the timing, and removed after.
// items_per_second counts samples here.
void BM_SampleReaderRead_Sample3(benchmark::State& state) {
  namespace io = shardyard::io;
  const Archive a = make_archive(2000, 4096, true);
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                           "/sy_sample_reader_bench_" + std::to_string(::getpid()) + ".tar";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const uint8_t end[2 * kTarBlock] = {};
  bool written = f != nullptr && std::fwrite(a.bytes->data, 1, a.bytes->size, f) == a.bytes->size &&
                 std::fwrite(end, 1, sizeof end, f) == sizeof end;
  if (f != nullptr && std::fclose(f) != 0) written = false;
  struct Remove {
    const std::string& path;
    ~Remove() { std::remove(path.c_str()); }
  } remove{path};
  if (!written) return state.SkipWithError(("cannot write " + path).c_str());
  auto m = io::build_manifest(io::local_file_system(), {path}, io::ScanOptions{}, nullptr);
  if (!m.is_ok()) return state.SkipWithError(m.status().to_string().c_str());
  auto manifest = std::make_shared<const shardyard::Manifest>(std::move(*m));
  io::SampleReader reader(io::local_file_system(), manifest, shardyard::BufferPool::create());
  const uint64_t samples = manifest->source_items(0), chunk = state.range(0);
  std::vector<shardyard::Item> items;
  for (auto _ : state) {
    for (uint64_t first = 0; first < samples; first += chunk) {
      items.clear();
      Status st = reader.read(0, first, std::min(samples, first + chunk), first, &items);
      if (!st.is_ok()) return state.SkipWithError(st.to_string().c_str());
      benchmark::DoNotOptimize(items.data());
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * samples));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * a.bytes->size));
}
BENCHMARK(BM_SampleReaderRead_Sample3)->Arg(18);

}  // namespace

BENCHMARK_MAIN();
