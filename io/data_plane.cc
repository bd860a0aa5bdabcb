#include "io/data_plane.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

namespace shardyard::io {

namespace {

class InprocChannel : public Channel {
 public:
  InprocChannel(uint32_t producers, size_t capacity)
      : producers_(producers), capacity_(std::max<size_t>(1, capacity)) {}

  Status push(Packet packet) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cancelled_ && queue_.size() >= capacity_) {
      ++producers_waiting_;
      not_full_.wait(lock, [&] { return cancelled_ || queue_.size() < capacity_; });
      --producers_waiting_;
    }
    if (cancelled_) return cancelled("the consumer stopped reading");
    queue_.push_back(std::move(packet));
    // Wake the consumer only when it can be waiting: a futex wake per packet costs more
    // than moving the packet.
    if (consumer_waiting_) not_empty_.notify_one();
    return Status::ok();
  }

  void finish(Status status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.is_ok() && error_.is_ok()) error_ = std::move(status);
    if (finished_ < producers_) ++finished_;
    not_empty_.notify_all();
  }

  Result<bool> pop(Packet* out) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] {
      return !queue_.empty() || !error_.is_ok() || finished_ == producers_ || cancelled_;
    };
    if (!ready()) {
      consumer_waiting_ = true;
      not_empty_.wait(lock, ready);
      consumer_waiting_ = false;
    }
    if (!error_.is_ok()) return error_;
    if (cancelled_) return cancelled("channel cancelled");
    if (queue_.empty()) return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    if (producers_waiting_ > 0) not_full_.notify_one();
    return true;
  }

  void cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    queue_.clear();
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  size_t depth() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }

 private:
  const uint32_t producers_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<Packet> queue_;        // guarded by mu_
  uint32_t finished_ = 0;           // guarded by mu_
  Status error_;                    // guarded by mu_
  bool cancelled_ = false;          // guarded by mu_
  bool consumer_waiting_ = false;   // guarded by mu_
  uint32_t producers_waiting_ = 0;  // guarded by mu_
};

class InprocDataPlane : public DataPlane {
 public:
  std::shared_ptr<Channel> open_channel(const std::string& name, uint32_t producers,
                                        size_t capacity) override {
    auto ch = std::make_shared<InprocChannel>(producers, capacity);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = channels_.begin(); it != channels_.end();)  // forget closed ones
      it = it->second.expired() ? channels_.erase(it) : std::next(it);
    channels_[name] = ch;
    return ch;
  }
  std::shared_ptr<Channel> attach(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(name);
    return it == channels_.end() ? nullptr : it->second.lock();
  }
  const char* kind() const override { return "inproc"; }

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<Channel>> channels_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<DataPlane> inproc_data_plane() { return std::make_unique<InprocDataPlane>(); }

}  // namespace shardyard::io
