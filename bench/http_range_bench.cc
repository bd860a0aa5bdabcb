// http_range_bench: the cost of one ranged GET of shardyard's HTTP client
// (io/remote/http_client.h), as a worker's read of one chunk of a remote tar shard makes it.
//
// Reads COUNT ranges of SIZE bytes, one after the other on one kept-alive connection, the
// i-th at OFFSET + i * SIZE of URL, and prints one JSON line: the median and the mean wall
// milliseconds per request and the MB/s of the whole loop. bench/remote_bench.py runs it
// against nginx at an offset that is not a multiple of the page size, where a server that
// sends with Nagle's algorithm on holds the last segment of each response until the
// client acknowledges the one before (see ack_now in io/remote/http_client.cc).
//
// Usage: http_range_bench URL [--size 119808] [--offset 512] [--count 50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "io/remote/http_client.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s URL [--size N] [--offset N] [--count N]\n", argv[0]);
    return 2;
  }
  const std::string url = argv[1];
  uint64_t size = 119808, offset = 512, count = 50;
  for (int i = 2; i + 1 < argc; i += 2) {
    const uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--size") == 0)
      size = v;
    else if (std::strcmp(argv[i], "--offset") == 0)
      offset = v;
    else if (std::strcmp(argv[i], "--count") == 0)
      count = v;
  }
  using clock = std::chrono::steady_clock;
  shardyard::io::HttpClient client(shardyard::io::HttpOptions{});
  std::vector<char> buf(size);
  std::vector<double> ms;
  const auto start = clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const auto t0 = clock::now();
    auto got = client.get_range(url, nullptr, offset + i * size, buf.data(), size, -1);
    if (!got.is_ok() || *got != size) {
      std::fprintf(stderr, "request %llu: %s\n", static_cast<unsigned long long>(i),
                   got.is_ok() ? "short read" : got.status().to_string().c_str());
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  const double total = std::chrono::duration<double>(clock::now() - start).count();
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double m : ms) sum += m;
  std::printf(
      "{\"requests\":%llu,\"size\":%llu,\"offset\":%llu,\"median_ms\":%.3f,\"mean_ms\":%.3f,"
      "\"mb_per_s\":%.1f}\n",
      static_cast<unsigned long long>(count), static_cast<unsigned long long>(size),
      static_cast<unsigned long long>(offset), sorted[sorted.size() / 2], sum / ms.size(),
      static_cast<double>(size * count) / total / 1e6);
  return 0;
}
