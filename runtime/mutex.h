// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with the thread-safety
// annotations of runtime/thread_annotations.h, so clang checks every SY_GUARDED_BY field.
//
//   Mutex mu_;
//   std::deque<Packet> queue_ SY_GUARDED_BY(mu_);
//   CondVar not_empty_;
//   ...
//   MutexLock lock(&mu_);
//   while (queue_.empty()) not_empty_.wait(&mu_);   // the condition is read under the lock
//
// Waits are written as loops around wait() (leveldb's port::CondVar), not with a predicate
// lambda: the analysis cannot see that a lambda runs with the lock held.
//
// Thread-safe, as the std types they wrap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "runtime/thread_annotations.h"

namespace shardyard {

class SY_CAPABILITY("mutex") Mutex {
 public:
  void lock() SY_ACQUIRE() { mu_.lock(); }
  void unlock() SY_RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds the lock (checked by nothing at run time).
  void assert_held() const SY_ASSERT_HELD(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SY_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) SY_ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() SY_RELEASE() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

class CondVar {
 public:
  // Releases `mu` while it waits; holds it again on return (also on a spurious wake-up).
  void wait(Mutex* mu) SY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As wait(), for at most `timeout`; false when it timed out.
  template <class Rep, class Period>
  bool wait_for(Mutex* mu, std::chrono::duration<Rep, Period> timeout) SY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace shardyard
