// UnixSocket: framed messages with file descriptors between two processes of one node
// (docs/shared-memory.md, "Frames").
//
// One end of a SOCK_SEQPACKET socket pair: every send() is one message that arrives whole
// or not at all, with up to kMaxFrameFds descriptors attached (SCM_RIGHTS). A frame on the
// wire is
//   u32 magic "SYFR" | u16 version (1) | u16 type | u32 body_bytes | body
// (little-endian); what a type means belongs to the protocol that uses the socket
// (io/transport/shm_frames.h). receive() takes at most `max_frame_bytes` (default 64 KiB)
// into a buffer allocated once: a frame that is larger, shorter than its header, of another
// magic or version, or with more descriptors than allowed is a kCorrupt error and its
// descriptors are closed; nothing is allocated from what a peer claims. Every wait has a
// timeout. A peer that closes its end or dies is kClosed (EOF, ECONNRESET, EPIPE), never a
// SIGPIPE. Every descriptor is close-on-exec, received ones included (MSG_CMSG_CLOEXEC).
//
// Handing an end to a child: pair(), fork(), in the child clear_cloexec(end.fd()) and put the
// number in the environment, exec(); the new program calls adopt_number() on it.
//
// Thread-safety: send() and send_now() from any threads at once (each frame is one atomic
// message); receive() from one thread at a time; shutdown() from anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/transport/unique_fd.h"
#include "runtime/status.h"

namespace shardyard::io {

inline constexpr size_t kMaxFrameFds = 4;
inline constexpr size_t kFrameHeaderBytes = 12;
inline constexpr uint32_t kFrameMagic = 0x52465953;  // "SYFR" little-endian
inline constexpr uint16_t kFrameVersion = 1;

struct Frame {
  uint16_t type = 0;
  std::string body;
  std::vector<UniqueFd> fds;
};

class UnixSocket {
 public:
  enum class Received { kFrame, kTimeout, kClosed };

  // A connected pair; `max_frame_bytes` bounds the frames both ends receive.
  static Result<std::pair<UnixSocket, UnixSocket>> pair(size_t max_frame_bytes = 64 << 10);
  // Takes over an inherited end, checking that it is a Unix SEQPACKET socket; sets
  // close-on-exec again so it is not handed further by accident.
  static Result<UnixSocket> adopt(UniqueFd fd, size_t max_frame_bytes = 64 << 10);
  // The same from a decimal descriptor number (an environment variable's value), named
  // `what` in messages.
  static Result<UnixSocket> adopt_number(std::string_view number, const std::string& what,
                                         size_t max_frame_bytes = 64 << 10);

  UnixSocket() = default;
  UnixSocket(UnixSocket&&) = default;
  UnixSocket& operator=(UnixSocket&&) = default;

  int fd() const { return fd_.get(); }
  // A close-on-exec copy of this end's descriptor, to hand it to another process.
  Result<UniqueFd> duplicate() const;
  bool valid() const { return fd_.valid(); }
  size_t max_frame_bytes() const { return max_frame_; }

  // Sends one frame, waiting at most `timeout_ms` for room in the socket's buffer.
  // kUnavailable once the peer is gone (its message says "closed"), or on timeout.
  Status send(const Frame& frame, int timeout_ms);
  // The same without waiting: false when the buffer is full (nothing sent).
  Result<bool> send_now(const Frame& frame);
  // The next frame, waiting at most `timeout_ms` (0: only what is there).
  Result<Received> receive(Frame* out, int timeout_ms);
  // Both directions end now: the peer's receive() sees kClosed; the descriptor stays open
  // until this object is destroyed.
  void shutdown();

 private:
  UnixSocket(UniqueFd fd, size_t max_frame) : fd_(std::move(fd)), max_frame_(max_frame) {}
  Result<bool> send_once(const Frame& frame);
  UniqueFd fd_;
  size_t max_frame_ = 64 << 10;
  // Receive buffer, max_frame_ + 1 bytes once used; not zeroed, so only the pages the
  // frames fill are ever touched (most frames are a few dozen bytes).
  std::unique_ptr<char[]> buffer_;
};

// Waits until `fd` is readable (or hung up) for at most `timeout_ms`: true when it is.
bool wait_readable(int fd, int timeout_ms);

}  // namespace shardyard::io
