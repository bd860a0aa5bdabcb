// prefetch_lines: asks for bytes from memory ahead of their use, a cache line at a time.
//
// GCC 12 deletes a loop whose body is only __builtin_prefetch (it finds no effect in it) at
// -O2, and keeps it at -O3 only where it unrolls the loop whole: a loop over a length it
// does not know vanished in every build. Each line's request here carries an empty asm
// statement that takes its address, which the compiler must keep, so the requests stay in
// every build (`objdump -d BINARY | grep -c prefetcht0` counts them).
#pragma once

#include <cstddef>

namespace shardyard {

inline constexpr size_t kCacheLineBytes = 64;

inline void prefetch_lines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes; at += kCacheLineBytes) {
    __builtin_prefetch(c + at);
    asm volatile("" : : "r"(c + at));
  }
}

}  // namespace shardyard
