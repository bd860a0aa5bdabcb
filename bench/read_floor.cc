// What the machine allows for a tar shard loader: a raw read of the shards plus one copy of
// each member's bytes, with nothing of a loader between them (no items, no hand-off between
// threads, no batch order). Issue 15 sets its small-sample target against this floor
// ("a raw read of the same tar bytes plus one copy into the batch"); docs/performance.md,
// "How far from the floor", gives what it measures.
//
// Each of --threads threads takes every threads-th file of --dir (*.tar, sorted), visits
// its files in turn and reads --read-bytes from each at a time (a read starts at a member's
// header and ends before the first member that it does not hold whole), as a worker reads
// the interleaved logical shards of its unit. Reads go into --ring buffers per thread, used
// in turn: 1 keeps the destination in the cache, as `cat` does; more makes each read write
// memory last written that many reads ago, as a loader that holds chunks in flight does.
// Unless --no-copy, each member's data is then copied to the next place of a batch region
// of --batch-bytes (reused, so it stays in the cache: a lower bound on the batch copy).
// Prints the wall time, the CPU time of the process and what was read.
//
//   BUILD/bench/read_floor --dir /tmp/peerbench/small [--threads 2] [--read-bytes 26624]
//       [--ring 1] [--batch-bytes 393216] [--no-copy]
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  std::string dir;
  int threads = 2;
  size_t read_bytes = 26624;  // 4 samples of the small set (6,656 tar bytes each)
  size_t ring = 1;
  size_t batch_bytes = 393216;  // 64 samples of 6 KiB
  bool copy = true;
};

struct Totals {
  uint64_t bytes = 0, members = 0, reads = 0;
  bool failed = false;
};

// The size field of a ustar header (octal digits, as every writer of these shards writes
// it); -1 for the two zero blocks at the end or a header that is not one.
int64_t member_size(const uint8_t* h) {
  if (h[0] == 0) return -1;
  int64_t n = 0;
  for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; ++i) n = n * 8 + (h[i] - '0');
  return n;
}

struct File {
  int fd = -1;
  uint64_t pos = 0;  // of the next header
  bool done = false;
};

// A thread's read buffers and batch region, allocated and faulted in before the clock starts.
struct Memory {
  std::vector<uint8_t*> ring;
  uint8_t* batch = nullptr;

  explicit Memory(const Options& o) {
    const size_t stride = (o.read_bytes + 4095) & ~size_t{4095};
    ring.resize(o.ring);
    for (auto& b : ring) b = fresh(stride);
    batch = fresh(o.batch_bytes);
  }
  ~Memory() {
    for (auto* b : ring) std::free(b);
    std::free(batch);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  static uint8_t* fresh(size_t n) {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, n) != 0) std::abort();
    std::memset(p, 0, n);
    return static_cast<uint8_t*>(p);
  }
};

void run_thread(const Options& o, const std::vector<std::string>& paths, Memory& mem, Totals* t) {
  std::vector<File> files;
  for (const auto& p : paths) {
    File f;
    f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) {
      std::perror(p.c_str());
      t->failed = true;
      return;
    }
    files.push_back(f);
  }
  const std::vector<uint8_t*>& ring = mem.ring;
  uint8_t* batch = mem.batch;
  size_t batch_at = 0, next = 0;
  for (size_t left = files.size(); left > 0;) {
    left = 0;
    for (File& f : files) {
      if (f.done) continue;
      ++left;
      uint8_t* buf = ring[next++ % ring.size()];
      const ssize_t got = ::pread(f.fd, buf, o.read_bytes, static_cast<off_t>(f.pos));
      ++t->reads;
      if (got < 512) {
        f.done = true;
        continue;
      }
      t->bytes += static_cast<uint64_t>(got);
      size_t at = 0;
      bool end = false;
      while (at + 512 <= static_cast<size_t>(got)) {
        const int64_t size = member_size(buf + at);
        if (size < 0) {
          end = true;
          break;
        }
        const size_t padded = (static_cast<size_t>(size) + 511) & ~size_t{511};
        if (at + 512 + padded > static_cast<size_t>(got)) break;  // the next read takes it
        if (o.copy && size > 0) {
          if (batch_at + static_cast<size_t>(size) > o.batch_bytes) batch_at = 0;
          std::memcpy(batch + batch_at, buf + at + 512, static_cast<size_t>(size));
          batch_at += static_cast<size_t>(size);
        }
        ++t->members;
        at += 512 + padded;
      }
      if (at == 0 && !end) {  // a member larger than a read: skip it unread
        const int64_t size = member_size(buf);
        f.pos += 512 + ((static_cast<uint64_t>(size) + 511) & ~uint64_t{511});
        ++t->members;
        continue;
      }
      f.pos += at;
      if (end) f.done = true;
    }
  }
  for (File& f : files) ::close(f.fd);
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir") {
      o.dir = value();
    } else if (a == "--threads") {
      o.threads = std::max(1, std::atoi(value()));
    } else if (a == "--read-bytes") {
      o.read_bytes = std::max<size_t>(1024, std::strtoull(value(), nullptr, 10));
    } else if (a == "--ring") {
      o.ring = std::max<size_t>(1, std::strtoull(value(), nullptr, 10));
    } else if (a == "--batch-bytes") {
      o.batch_bytes = std::strtoull(value(), nullptr, 10);
    } else if (a == "--no-copy") {
      o.copy = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s --dir DIR [--threads N] [--read-bytes N] [--ring N] "
                   "[--batch-bytes N] [--no-copy]\n",
                   argv[0]);
      return 2;
    }
  }
  // A member copied whole is shorter than a read: the batch region must hold one.
  o.batch_bytes = std::max(o.batch_bytes, o.read_bytes);
  std::vector<std::string> paths;
  if (DIR* d = ::opendir(o.dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tar") == 0)
        paths.push_back(o.dir + "/" + name);
    }
    ::closedir(d);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "no *.tar in '%s'\n", o.dir.c_str());
    return 2;
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(o.threads));
  for (size_t i = 0; i < paths.size(); ++i) parts[i % parts.size()].push_back(paths[i]);
  std::vector<Totals> totals(parts.size());
  std::vector<std::unique_ptr<Memory>> memory;
  for (size_t i = 0; i < parts.size(); ++i) memory.push_back(std::make_unique<Memory>(o));
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < parts.size(); ++i)
    threads.emplace_back(run_thread, std::cref(o), std::cref(parts[i]), std::ref(*memory[i]),
                         &totals[i]);
  for (auto& th : threads) th.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  Totals all;
  for (const auto& t : totals) {
    all.bytes += t.bytes;
    all.members += t.members;
    all.reads += t.reads;
    all.failed |= t.failed;
  }
  std::printf(
      "{\"files\": %zu, \"threads\": %d, \"read_bytes\": %zu, \"ring\": %zu, \"copy\": %s, "
      "\"bytes\": %llu, \"members\": %llu, \"reads\": %llu, \"seconds\": %.4f, "
      "\"cpu_seconds\": %.4f}\n",
      paths.size(), o.threads, o.read_bytes, o.ring, o.copy ? "true" : "false",
      static_cast<unsigned long long>(all.bytes), static_cast<unsigned long long>(all.members),
      static_cast<unsigned long long>(all.reads), wall, cpu);
  return all.failed ? 1 : 0;
}
