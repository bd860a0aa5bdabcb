#include "io/transport/pulled_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace shardyard::io {

PulledChannel::PulledChannel(ShmConsumer& in, std::function<Status(const Packet&)> hand_over)
    : in_(in), hand_over_(std::move(hand_over)) {
  ended_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

Result<bool> PulledChannel::pull(Packet* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kOpen) return false;
    pulling_ = true;
  }
  Result<bool> more = in_.pop(out);
  std::lock_guard<std::mutex> lock(mu_);
  pulling_ = false;
  if (more.is_ok() && *more) {
    Status handed = hand_over_(*out);
    if (handed.is_ok()) {
      if (state_ != State::kOpen) pulled_.notify_all();
      return true;
    }
    out->items.clear();
    refused_ = std::move(handed);
  } else if (!more.is_ok()) {
    pop_error_ = more.status();
  }
  // The end of the channel (finished, failed, or the producer died), as the caller's own
  // pops would have seen it.
  state_ = State::kEnded;
  pulled_.notify_all();
  const uint64_t one = 1;
  (void)!::write(ended_fd_.get(), &one, sizeof one);
  return false;
}

void PulledChannel::wait(int fd) {
  for (;;) {
    pollfd p[2] = {{ended_fd_.get(), POLLIN, 0}, {fd, POLLIN, 0}};
    if (::poll(p, fd >= 0 ? 2 : 1, 1000) > 0) return;
  }
}

bool PulledChannel::take_back(Status* pop_error, Status* refused) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kOpen) state_ = State::kTaken;
  while (pulling_) pulled_.wait(lock);
  *pop_error = pop_error_;
  *refused = refused_;
  return state_ == State::kEnded;
}

}  // namespace shardyard::io
