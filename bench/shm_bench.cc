// shm_bench: the shared-memory channel (io/transport/shm_channel.h) between two processes,
// against a plain memcpy of the same bytes and against the in-process channel.
//
// For each item size (64 B, 4 KiB, 512 KiB) and each of --reps repetitions:
//   memcpy      one thread copies the items' bytes from the source pool into a 64 MiB ring
//               (the one copy the producer makes into the arena), page-faulted beforehand;
//   shm drop    a forked producer builds items viewing the pool, pushes them in packets (128
//               items or 4 MiB, as a worker closes them) into a 64 MiB arena; this process
//               pops and drops them: the plane's own cost, both processes running at once;
//   shm copy    the same, and this process also copies every field into a 64 MiB ring, as
//               the loader's collation (build_batch) does with every item it pops;
//   inproc      the in-process channel (pointers, no copy): a producer thread, this thread
//               pops; its cost per item is the floor shm's per-item cost is compared with.
// Timed from the first push to the last pop (the consumer's clock; the producer starts
// after the handshake). Printed, medians of the repetitions: GB/s of payload, items/s, wall
// ns per item and shm's excess over memcpy's, and CPU ns per item (user + system of every
// thread and process taking part: the producer child's from wait4) with shm's excess over
// memcpy's: the per-item cost of crossing processes, which a loaded machine distorts less
// than wall time.
//
//
// --broadcast-mib M instead: a broadcast shard of M MiB (windows of 1 MiB every 512 KiB,
// as time-series windows overlap) copied once into a shard image (io/transport/shm_shard.h)
// and mapped by W = 1 and W = 4 worker processes, each reading every item's bytes; prints
// the proportional set size (PSS, /proc/PID/smaps_rollup) of the whole process tree and
// its shared-memory part.
//
// Usage: shm_bench [--gib-per-run 1] [--reps 3] [--dir /dev/shm] [--broadcast-mib M]
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include "io/transport/data_plane.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_shard.h"

namespace {

using namespace shardyard;
using namespace shardyard::io;
using Clock = std::chrono::steady_clock;

constexpr size_t kPool = 64 << 20;  // source bytes the items view
constexpr size_t kRing = 64 << 20;  // destination of the copies, and the arena's size

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double cpu_seconds(const rusage& r) {
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

double process_cpu() {
  rusage r;
  ::getrusage(RUSAGE_SELF, &r);
  return cpu_seconds(r);
}

// Wall-clock and CPU seconds (of every thread and process taking part) of one run.
struct Took {
  double wall = -1, cpu = -1;
};

std::shared_ptr<std::vector<uint8_t>> make_pool() {
  auto pool = std::make_shared<std::vector<uint8_t>>(kPool);
  for (size_t i = 0; i < kPool; ++i) (*pool)[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  return pool;
}

size_t source_offset(size_t i, size_t size) {
  return (i * size) % (kPool - size + 1) & ~size_t{63};
}

// Packets of the stream, built as a worker builds them: items viewing the pool.
template <typename Push>
bool produce(const std::shared_ptr<std::vector<uint8_t>>& pool, size_t n, size_t size, Push push) {
  Packet p;
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    Item it;
    it.id = i;
    it.key = std::to_string(i);
    it.owner = pool;
    it.fields.push_back(Field{"bin", pool->data() + source_offset(i, size), size});
    bytes += size;
    p.items.push_back(std::move(it));
    if (p.items.size() == 128 || bytes >= (4u << 20) || i + 1 == n) {
      if (!push(std::move(p))) return false;
      p = Packet{};
      bytes = 0;
    }
  }
  return true;
}

std::vector<uint8_t> faulted_ring() {
  std::vector<uint8_t> ring(kRing);
  std::memset(ring.data(), 1, ring.size());
  return ring;
}

Took run_memcpy(const std::vector<uint8_t>& pool, size_t n, size_t size) {
  auto ring = faulted_ring();
  size_t at = 0;
  const double cpu = process_cpu();
  const auto t = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    if (at + size > kRing) at = 0;
    std::memcpy(ring.data() + at, pool.data() + source_offset(i, size), size);
    at += (size + 63) & ~size_t{63};
  }
  const double s = seconds_since(t);
  if (ring[kRing / 2] == 0xfe) std::puts("");  // keeps the copies
  return {s, process_cpu() - cpu};
}

Took run_inproc(const std::shared_ptr<std::vector<uint8_t>>& pool, size_t n, size_t size) {
  auto ch = inproc_data_plane()->open_channel("bench", 1, 4);
  const double cpu = process_cpu();
  const auto t = Clock::now();
  std::thread producer([&] {
    produce(pool, n, size, [&](Packet p) { return ch->push(std::move(p)).is_ok(); });
    ch->finish(Status::ok());
  });
  size_t got = 0;
  for (Packet p; *ch->pop(&p);) got += p.items.size();
  const double s = seconds_since(t);
  producer.join();
  return got == n ? Took{s, process_cpu() - cpu} : Took{};
}

// The forked producer and the popping loop; `copy` also copies each field out.
Took run_shm(const std::shared_ptr<std::vector<uint8_t>>& pool, size_t n, size_t size, bool copy,
             const std::string& dir) {
  auto ends = UnixSocket::pair().value();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ends.first = UnixSocket();
    auto producer = ShmProducer::connect(std::move(ends.second), 10000, 60000);
    if (!producer.is_ok()) ::_exit(2);
    const bool ok =
        produce(pool, n, size, [&](Packet p) { return (*producer)->push(std::move(p)).is_ok(); });
    (*producer)->finish(Status::ok());
    ::_exit(ok ? 0 : 3);
  }
  ends.second = UnixSocket();
  auto ring = copy ? faulted_ring() : std::vector<uint8_t>();
  ShmChannelOptions o;
  o.name = "bench";
  o.arena_bytes = kRing;
  o.segment.dir = dir;
  std::vector<ShmPeer> peers;
  peers.push_back({std::move(ends.first), "producer"});
  auto ch = ShmConsumer::open(std::move(peers), o);
  if (!ch.is_ok()) {
    std::fprintf(stderr, "shm_bench: %s\n", ch.status().to_string().c_str());
    std::exit(1);
  }
  const double cpu = process_cpu();
  const auto t = Clock::now();
  size_t got = 0, at = 0;
  for (;;) {
    Packet p;
    auto more = (*ch)->pop(&p);
    if (!more.is_ok() || !*more) break;
    got += p.items.size();
    if (copy)
      for (const auto& it : p.items) {
        if (at + it.fields[0].size > kRing) at = 0;
        std::memcpy(ring.data() + at, it.fields[0].data, it.fields[0].size);
        at += (it.fields[0].size + 63) & ~size_t{63};
      }
  }
  const double s = seconds_since(t);
  const double mine = process_cpu() - cpu;
  int status = 0;
  rusage child;
  ::wait4(pid, &status, 0, &child);
  const bool ok = got == n && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return ok ? Took{s, mine + cpu_seconds(child)} : Took{};
}

// Pss and Pss_Shmem of `pid` in KiB.
std::pair<uint64_t, uint64_t> pss_kib(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/smaps_rollup").c_str(), "r");
  uint64_t pss = 0, shmem = 0;
  if (f == nullptr) return {0, 0};
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long v = 0;
    if (std::sscanf(line, "Pss: %llu kB", &v) == 1) pss = v;
    if (std::sscanf(line, "Pss_Shmem: %llu kB", &v) == 1) shmem = v;
  }
  std::fclose(f);
  return {pss, shmem};
}

int broadcast(size_t mib, const std::string& dir) {
  SharedShard shard;
  {
    auto month = std::make_shared<std::vector<uint8_t>>(mib << 20);
    for (size_t i = 0; i < month->size(); i += 4096) (*month)[i] = static_cast<uint8_t>(i >> 12);
    for (size_t at = 0; at + (1 << 20) <= month->size(); at += 512 << 10) {
      Item it;
      it.id = at;
      it.key = "month.bin@" + std::to_string(at >> 19);
      it.owner = month;
      it.fields.push_back(Field{"bin", month->data() + at, 1 << 20});
      shard.items.push_back(std::move(it));
    }
  }
  SegmentOptions o;
  o.dir = dir;
  auto image = ShmShardImage::create(shard, o);
  if (!image.is_ok()) {
    std::fprintf(stderr, "shm_bench: %s\n", image.status().to_string().c_str());
    return 1;
  }
  const size_t items = shard.items.size();
  shard = SharedShard{};  // the loader keeps only the image
  std::printf("broadcast shard: %zu windows of 1 MiB over %zu MiB; image %.1f MiB\n", items, mib,
              image->segment().size() / 1048576.0);
  std::printf("%-3s %16s %22s\n", "W", "tree PSS MiB", "of which shared memory");
  for (int w : {1, 4}) {
    int ready[2], go[2];
    if (::pipe(ready) != 0 || ::pipe(go) != 0) return 1;
    std::vector<pid_t> kids;
    for (int k = 0; k < w; ++k) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        auto view = ShmShardView::open(image->share().value(), "bench shard");
        uint64_t sum = 0;
        for (uint64_t i = 0; view.is_ok() && i < (*view)->size(); ++i) {
          auto it = (*view)->item(i);
          for (size_t b = 0; it.is_ok() && b < it->fields[0].size; b += 4096)
            sum += it->fields[0].data[b];
        }
        char c = view.is_ok() && sum != 1 ? 'y' : 'n';
        (void)!::write(ready[1], &c, 1);
        (void)!::read(go[0], &c, 1);
        ::_exit(0);
      }
      kids.push_back(pid);
    }
    for (int k = 0; k < w; ++k) {
      char c = 'n';
      if (::read(ready[0], &c, 1) != 1 || c != 'y') return 1;
    }
    auto [pss, shmem] = pss_kib(::getpid());
    for (pid_t pid : kids) {
      auto [p, s] = pss_kib(pid);
      pss += p;
      shmem += s;
    }
    std::printf("%-3d %16.1f %22.1f\n", w, pss / 1024.0, shmem / 1024.0);
    for (int k = 0; k < w; ++k) (void)!::write(go[1], "g", 1);
    for (pid_t pid : kids) ::waitpid(pid, nullptr, 0);
    for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  int reps = 3;
  std::string dir = "/dev/shm";
  size_t broadcast_mib = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gib-per-run") gib = std::atof(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--broadcast-mib") broadcast_mib = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (broadcast_mib > 0) return broadcast(broadcast_mib, dir);
  auto pool = make_pool();
  std::printf("%-8s %-9s %8s %11s %9s %14s %9s %14s\n", "item", "path", "GB/s", "items/s",
              "ns/item", "- memcpy", "cpu ns", "cpu - memcpy");
  for (size_t size : {size_t{64}, size_t{4096}, size_t{512} << 10}) {
    const size_t items =
        size == 64 ? 2000000 : static_cast<size_t>(gib * double(1ull << 30) / double(size));
    std::vector<double> wall[4], cpu[4];
    for (int r = 0; r < reps; ++r) {
      const Took took[4] = {run_memcpy(*pool, items, size), run_shm(pool, items, size, false, dir),
                            run_shm(pool, items, size, true, dir), run_inproc(pool, items, size)};
      for (int k = 0; k < 4; ++k) {
        if (took[k].wall < 0) {
          std::fprintf(stderr, "shm_bench: a run failed\n");
          return 1;
        }
        wall[k].push_back(took[k].wall);
        cpu[k].push_back(took[k].cpu);
      }
    }
    const char* names[] = {"memcpy", "shm drop", "shm copy", "inproc"};
    const double base = median(wall[0]) * 1e9 / items, base_cpu = median(cpu[0]) * 1e9 / items;
    for (int k = 0; k < 4; ++k) {
      const double s = median(wall[k]);
      const double ns = s * 1e9 / items, cpu_ns = median(cpu[k]) * 1e9 / items;
      char gbs[32] = "-";  // the in-process channel copies nothing
      if (k != 3) std::snprintf(gbs, sizeof gbs, "%.2f", items * double(size) / s / 1e9);
      char over[32] = "", cpu_over[32] = "";
      if (k == 1 || k == 2) {
        std::snprintf(over, sizeof over, "%.1f", ns - base);
        std::snprintf(cpu_over, sizeof cpu_over, "%.1f", cpu_ns - base_cpu);
      }
      std::printf("%-8zu %-9s %8s %11.0f %9.1f %14s %9.1f %14s\n", size, names[k], gbs, items / s,
                  ns, over, cpu_ns, cpu_over);
    }
  }
  return 0;
}
