// parallel_for: runs a function over [0, n) on a few threads, the caller's included.
//
// For work that waits (stat calls, HEAD requests, header scans): the threads are started
// and joined inside the call. Thread-safe as long as fn(i) for different i may run at once.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace shardyard::io {

inline void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  threads =
      std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(std::min<size_t>(n, 4096))));
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace shardyard::io
