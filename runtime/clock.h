// Clock: the time a job reads, behind an interface so a test can fix it (actors/env.h).
//
// unix_ms() is wall-clock time, for what is recorded (a checkpoint's creation time);
// steady_ns() is monotonic, for durations and intervals. real_clock() reads the system's
// clocks.
//
// Thread-safety: implementations are thread-safe; real_clock() is a process singleton.
#pragma once

#include <cstdint>

namespace shardyard {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since 1970-01-01 UTC.
  virtual int64_t unix_ms() = 0;
  // Nanoseconds since an arbitrary fixed point; never goes back.
  virtual int64_t steady_ns() = 0;
};

Clock& real_clock();

}  // namespace shardyard
