// UniqueFd: the one owner of a file descriptor; closes it when destroyed.
//
// Every descriptor the shared-memory data plane opens (segments, sockets, descriptors
// received with SCM_RIGHTS, wake-up eventfds) is held by a UniqueFd from the moment it
// exists, so no error path leaks one. Descriptors are opened with O_CLOEXEC / SOCK_CLOEXEC /
// MSG_CMSG_CLOEXEC: a process started with exec() inherits none of them unless the caller
// hands one on deliberately (clear_cloexec()).
//
// Single-owner: move it, never share it; thread-compatible.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <utility>

namespace shardyard::io {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// A close-on-exec copy of `fd`; invalid (errno says why) when none can be made.
inline UniqueFd duplicate_cloexec(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

// Lets `fd` survive exec() (for the end of a socket pair handed to a child by number).
// Call it in the child between fork() and exec(): it is async-signal-safe.
inline bool clear_cloexec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  return flags >= 0 && ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == 0;
}

}  // namespace shardyard::io
