// PulledChannel: a shared-memory channel (io/transport/shm_channel.h) popped by the consumer
// of an in-process channel on its own thread (io::PacketSource, Channel::set_source()),
// where a thread of the rank would otherwise pop it and push each packet on (a worker
// process's output, actors/state/worker_process.cc). That thread sets the source, waits
// until the channel ends in a pull or it has its own reason to stop (the producer's done
// frame or death on its control socket), then takes the channel back and pops the rest
// itself. Every packet pulled is checked and counted by `hand_over` under the lock that
// take_back() takes, so the thread that set the source reads the counts after the last
// pull; a packet hand_over refuses ends the channel, and take_back() returns the refusal.
//
// Thread-safety: pull() on the consumer's thread, cancel(), depth() and queued_bytes()
// from anywhere; wait() and take_back() on the thread that set the source. The ShmConsumer
// must outlive every pull() begun before take_back() returned.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

#include "io/transport/data_plane.h"
#include "io/transport/shm_channel.h"
#include "io/transport/unique_fd.h"

namespace shardyard::io {

class PulledChannel : public PacketSource {
 public:
  PulledChannel(ShmConsumer& in, std::function<Status(const Packet&)> hand_over);

  // The next packet, counted by hand_over; false once the channel ended (it finished, the
  // producer failed or died, hand_over refused a packet) or was taken back.
  Result<bool> pull(Packet* out) override;
  void cancel() override { in_.cancel(); }
  size_t depth() const override { return in_.depth(); }
  uint64_t queued_bytes() const override { return in_.held_bytes(); }

  // False when its eventfd could not be made: then the caller pops the channel itself.
  bool usable() const { return ended_fd_.valid(); }
  // Waits until the channel ended in a pull, or `fd` (the producer's control socket; -1:
  // none) is readable.
  void wait(int fd);
  // Takes the channel back once no pull is under way: true when a pull saw it end (with
  // *pop_error as a pop of the caller's would have had it), false when the caller pops the
  // rest; *refused is a packet hand_over refused.
  bool take_back(Status* pop_error, Status* refused);

 private:
  enum class State { kOpen, kTaken, kEnded };
  ShmConsumer& in_;
  const std::function<Status(const Packet&)> hand_over_;
  UniqueFd ended_fd_;  // eventfd: readable once a pull saw the end
  std::mutex mu_;
  std::condition_variable pulled_;
  State state_ = State::kOpen;  // guarded by mu_
  bool pulling_ = false;        // guarded by mu_
  Status pop_error_;            // guarded by mu_
  Status refused_;              // guarded by mu_
};

}  // namespace shardyard::io
