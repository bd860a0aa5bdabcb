// Compiled with the build's own flags and disassembled by the test runtime.prefetch_emitted
// (tests/runtime/CMakeLists.txt): prefetch_lines must leave a prefetch instruction in the
// code at every optimization level, over a length known at compile time and over one that is
// not. Each body is a function of its own that is not inlined, as a lambda passed to a
// template can be: GCC then finds a bare loop of __builtin_prefetch free of effects, marks
// the function const and deletes its calls and its body (what happened to the tar walk's
// header prefetch at -O2, runtime/prefetch.h).
#include <cstddef>

#include "runtime/prefetch.h"

namespace {

__attribute__((noinline)) void sy_prefetch_probe_header_body(const void* p) {
  shardyard::prefetch_lines(p, 512);
}

__attribute__((noinline)) void sy_prefetch_probe_any_body(const void* p, size_t n) {
  shardyard::prefetch_lines(p, n);
}

}  // namespace

void sy_prefetch_probe_header(const void* p) { sy_prefetch_probe_header_body(p); }

void sy_prefetch_probe_any(const void* p, size_t n) { sy_prefetch_probe_any_body(p, n); }
