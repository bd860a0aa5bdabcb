// RecentSegments: what a process made of the segments another process sent it last (a
// worker's arena attached for writing, a broadcast image mapped read-only), by the identity
// of the segment's file (device and inode). A segment sent again (a reused arena, a later
// image written into an earlier one's segment) is not mapped again: mapping its pages anew
// cost a worker process more than the work it did with them (docs/performance.md, "Worker
// processes"). An entry keeps its object, and with it the segment open, so no other file can
// take its identity meanwhile; it also keeps the memory until `keep` others were used after
// it.
//
// Thread-safe.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <deque>
#include <memory>

#include "io/transport/unique_fd.h"
#include "runtime/mutex.h"
#include "runtime/status.h"

namespace shardyard::io {

template <typename T>
class RecentSegments {
 public:
  explicit RecentSegments(size_t keep) : keep_(keep) {}

  // The object kept for the file behind `fd`, made the most recent, when fits(object, the
  // file's size in bytes) holds (one that does not is dropped); else make(fd), a
  // Result<std::shared_ptr<T>>, kept as the most recent, the least recently used going past
  // `keep`. A file whose identity cannot be read is made and not kept.
  template <typename Fits, typename Make>
  Result<std::shared_ptr<T>> get(UniqueFd fd, const Fits& fits, const Make& make) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return make(std::move(fd));
    const auto dev = static_cast<uint64_t>(st.st_dev), ino = static_cast<uint64_t>(st.st_ino);
    {
      MutexLock lock(&mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->dev != dev || it->ino != ino) continue;
        if (!fits(*it->object, static_cast<uint64_t>(st.st_size))) {
          entries_.erase(it);  // not what it was: made anew
          break;
        }
        Entry hit = std::move(*it);
        entries_.erase(it);
        entries_.push_front(std::move(hit));
        ++reused_;
        return entries_.front().object;
      }
    }
    Result<std::shared_ptr<T>> made = make(std::move(fd));
    if (!made.is_ok()) return made;
    MutexLock lock(&mu_);
    entries_.push_front(Entry{dev, ino, *made});
    if (entries_.size() > keep_) entries_.pop_back();
    return made;
  }

  // How many get() calls found their object kept.
  uint64_t reused() const {
    MutexLock lock(&mu_);
    return reused_;
  }

 private:
  struct Entry {
    uint64_t dev, ino;
    std::shared_ptr<T> object;
  };
  const size_t keep_;
  mutable Mutex mu_;
  std::deque<Entry> entries_ SY_GUARDED_BY(mu_);  // the one used last first
  uint64_t reused_ SY_GUARDED_BY(mu_) = 0;
};

}  // namespace shardyard::io
