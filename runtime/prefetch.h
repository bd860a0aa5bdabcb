// prefetch_lines: asks for bytes from memory ahead of their use, a cache line at a time.
//
// GCC 12 counts __builtin_prefetch as free of effects: a function whose body is only a loop
// of them (a lambda handed to a template, before it is inlined) is marked const, and its
// calls are deleted with it. That took the tar walk's header prefetch out of the -O2 build
// (the -O3 build inlined it first and kept it), and a loop over a length known only at run
// time vanished from both. Each line's request here carries an empty asm statement that
// takes its address, which the compiler must keep, so the requests stay in every build
// (tests/runtime/prefetch_probe.cc checks it; `objdump -d BINARY | grep -c prefetcht0`
// counts them).
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
