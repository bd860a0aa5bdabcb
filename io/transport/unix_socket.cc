#include "io/transport/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "runtime/codec.h"

namespace shardyard::io {

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

bool wait_for(int fd, short events, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

bool peer_gone(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN; }

Status check_max_frame(size_t max_frame) {
  if (max_frame < kFrameHeaderBytes || max_frame > (1u << 20))
    return invalid_argument("max_frame_bytes must be between 12 and 1 MiB, not " +
                            std::to_string(max_frame));
  return Status::ok();
}

}  // namespace

bool wait_readable(int fd, int timeout_ms) { return wait_for(fd, POLLIN, timeout_ms); }

Result<std::pair<UnixSocket, UnixSocket>> UnixSocket::pair(size_t max_frame_bytes) {
  SY_RETURN_IF_ERROR(check_max_frame(max_frame_bytes));
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return io_error(std::string("cannot create a Unix socket pair: ") + std::strerror(errno));
  UnixSocket a(UniqueFd(fds[0]), max_frame_bytes), b(UniqueFd(fds[1]), max_frame_bytes);
  // A SEQPACKET message must fit the sender's buffer whole; the default (about 208 KiB) fits
  // 64 KiB frames, a larger bound asks for more.
  if (max_frame_bytes > (64u << 10)) {
    const int want = static_cast<int>(2 * max_frame_bytes);
    ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
    ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
  }
  return std::make_pair(std::move(a), std::move(b));
}

Result<UniqueFd> UnixSocket::duplicate() const {
  UniqueFd copy = duplicate_cloexec(fd_.get());
  if (!copy.valid())
    return io_error(std::string("cannot duplicate a socket's descriptor: ") + std::strerror(errno));
  return copy;
}

Result<UnixSocket> UnixSocket::adopt(UniqueFd fd, size_t max_frame_bytes) {
  SY_RETURN_IF_ERROR(check_max_frame(max_frame_bytes));
  int type = 0, domain = 0;
  socklen_t len = sizeof type;
  if (!fd.valid() || ::getsockopt(fd.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0)
    return invalid_argument("descriptor " + std::to_string(fd.get()) + " is not an open socket");
  len = sizeof domain;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX ||
      type != SOCK_SEQPACKET)
    return invalid_argument("descriptor " + std::to_string(fd.get()) +
                            " is not a Unix SEQPACKET socket");
  const int flags = ::fcntl(fd.get(), F_GETFD);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFD, flags | FD_CLOEXEC) != 0)
    return io_error("cannot set close-on-exec on descriptor " + std::to_string(fd.get()));
  return UnixSocket(std::move(fd), max_frame_bytes);
}

Result<UnixSocket> UnixSocket::adopt_number(std::string_view number, const std::string& what,
                                            size_t max_frame_bytes) {
  int fd = 0;
  bool ok = !number.empty() && number.size() <= 9;
  for (char c : number) {
    ok = ok && c >= '0' && c <= '9';
    fd = fd * 10 + (c - '0');
  }
  if (!ok)
    return invalid_argument(what + ": \"" + std::string(number) + "\" is not a descriptor number");
  auto s = adopt(UniqueFd(fd), max_frame_bytes);
  if (!s.is_ok()) return Status(s.status().code(), what + ": " + s.status().message());
  return s;
}

Result<bool> UnixSocket::send_once(const Frame& frame) {
  if (frame.fds.size() > kMaxFrameFds)
    return invalid_argument("a frame carries at most " + std::to_string(kMaxFrameFds) +
                            " descriptors, not " + std::to_string(frame.fds.size()));
  if (kFrameHeaderBytes + frame.body.size() > max_frame_)
    return invalid_argument("a frame of " + std::to_string(frame.body.size()) +
                            " body bytes is larger than the bound of " +
                            std::to_string(max_frame_) + " bytes");
  ByteWriter h;
  h.u32(kFrameMagic);
  h.u32(static_cast<uint32_t>(kFrameVersion) | (static_cast<uint32_t>(frame.type) << 16));
  h.u32(static_cast<uint32_t>(frame.body.size()));
  iovec iov[2] = {{h.out.data(), h.out.size()},
                  {const_cast<char*>(frame.body.data()), frame.body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = frame.body.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
  if (!frame.fds.empty()) {
    int fds[kMaxFrameFds];
    const size_t count = std::min(frame.fds.size(), kMaxFrameFds);
    for (size_t i = 0; i < count; ++i) fds[i] = frame.fds[i].get();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  for (;;) {
    if (::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) return true;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (peer_gone(errno)) return unavailable("the peer closed the socket");
    return io_error(std::string("cannot send a frame: ") + std::strerror(errno));
  }
}

Status UnixSocket::send(const Frame& frame, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  for (;;) {
    SY_ASSIGN_OR_RETURN(bool sent, send_once(frame));
    if (sent) return Status::ok();
    const int left = remaining_ms(deadline);
    if (left == 0)
      return unavailable("the peer took no frame for " + std::to_string(timeout_ms) +
                         " ms (its socket buffer is full)");
    wait_for(fd_.get(), POLLOUT, std::min(left, 100));
  }
}

Result<bool> UnixSocket::send_now(const Frame& frame) { return send_once(frame); }

Result<UnixSocket::Received> UnixSocket::receive(Frame* out, int timeout_ms) {
  // Without a wait, recvmsg alone says whether a frame is there (EAGAIN): the loader and
  // the workers look for frames between packets, where a poll first would double the
  // system calls.
  if (timeout_ms > 0 && !wait_readable(fd_.get(), timeout_ms)) return Received::kTimeout;
  if (!buffer_) buffer_.reset(new char[max_frame_ + 1]);
  iovec iov{buffer_.get(), max_frame_ + 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    // A peer that closed with frames of ours unread reset the socket: the kernel reports
    // ECONNRESET once (reading it clears it), ahead of the frames the peer sent before it
    // closed. Those come first (a worker's last runs and finish frame), then the end.
  } while (n < 0 && (errno == EINTR || errno == ECONNRESET));
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Received::kTimeout;
    if (peer_gone(errno)) return Received::kClosed;
    return io_error(std::string("cannot receive a frame: ") + std::strerror(errno));
  }
  // Own every descriptor that came, so that each error below closes them.
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (n == 0 && fds.empty()) return Received::kClosed;
  if (msg.msg_flags & MSG_CTRUNC)
    return corrupt("a frame came with more than " + std::to_string(kMaxFrameFds) + " descriptors");
  if (msg.msg_flags & MSG_TRUNC)
    return corrupt("a frame is larger than the bound of " + std::to_string(max_frame_) + " bytes");
  if (static_cast<size_t>(n) < kFrameHeaderBytes)
    return corrupt("a frame of " + std::to_string(n) + " bytes is shorter than its header");
  const char* p = buffer_.get();
  const uint32_t magic = static_cast<uint32_t>(load_le(p, 4));
  const uint16_t version = static_cast<uint16_t>(load_le(p + 4, 2));
  const uint64_t body = load_le(p + 8, 4);
  if (magic != kFrameMagic) return corrupt("a frame has a bad magic number (not shardyard's)");
  if (version != kFrameVersion)
    return corrupt("a frame has version " + std::to_string(version) + "; this build speaks " +
                   std::to_string(kFrameVersion) + " (both processes must be the same build)");
  if (body != static_cast<uint64_t>(n) - kFrameHeaderBytes)
    return corrupt("a frame says " + std::to_string(body) + " body bytes and has " +
                   std::to_string(n - kFrameHeaderBytes));
  out->type = static_cast<uint16_t>(load_le(p + 6, 2));
  out->body.assign(p + kFrameHeaderBytes, static_cast<size_t>(body));
  out->fds = std::move(fds);
  return Received::kFrame;
}

void UnixSocket::shutdown() {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace shardyard::io
