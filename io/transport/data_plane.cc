#include "io/transport/data_plane.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>

#include "runtime/mutex.h"

namespace shardyard::io {

namespace {

class InprocChannel : public Channel {
 public:
  InprocChannel(uint32_t producers, size_t capacity)
      : producers_(producers), capacity_(std::max<size_t>(1, capacity)) {}

  bool takes_unread_fields() const override { return true; }  // the items go to build_batch

  Status push(Packet packet) override {
    MutexLock lock(&mu_);
    if (!cancelled_ && queue_.size() >= capacity_) {
      ++producers_waiting_;
      while (!cancelled_ && queue_.size() >= capacity_) not_full_.wait(&mu_);
      --producers_waiting_;
    }
    if (cancelled_) return cancelled("the consumer stopped reading");
    bytes_ += packet.bytes;
    queue_.push_back(std::move(packet));
    // Wake the consumer only when it can be waiting: a futex wake per packet costs more
    // than moving the packet.
    if (consumer_waiting_) not_empty_.notify_one();
    return Status::ok();
  }

  void finish(Status status) override {
    MutexLock lock(&mu_);
    if (!status.is_ok() && error_.is_ok()) error_ = std::move(status);
    if (finished_ < producers_) ++finished_;
    not_empty_.notify_all();
  }

  Result<bool> pop(Packet* out) override {
    MutexLock lock(&mu_);
    while (!ready()) {
      if (source_ != nullptr) {
        // Pulled on this thread, outside the lock: a push, a finish() or a cancel() may
        // come meanwhile (a cancel() cancels the source, which ends the pull).
        std::shared_ptr<PacketSource> source = source_;
        mu_.unlock();
        Result<bool> got = source->pull(out);
        mu_.lock();
        if (got.is_ok() && *got) {
          if (!cancelled_) return true;
          out->items.clear();
        }
        // The source ended and told whoever set it, who goes on with a push, a finish()
        // or another source.
        if (source_ == source) source_.reset();
        continue;
      }
      consumer_waiting_ = true;
      not_empty_.wait(&mu_);
      consumer_waiting_ = false;
    }
    if (!error_.is_ok()) return error_;
    if (cancelled_) return cancelled("channel cancelled");
    if (queue_.empty()) return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    bytes_ -= out->bytes;
    if (producers_waiting_ > 0) not_full_.notify_one();
    return true;
  }

  // Only with one producer: the consumer pulls from the source while the queue is empty,
  // and a second producer's packets would wait behind a pull that waits.
  bool set_source(std::shared_ptr<PacketSource> source) override {
    if (producers_ != 1) return false;
    MutexLock lock(&mu_);
    if (source != nullptr && cancelled_) source->cancel();
    source_ = std::move(source);
    if (consumer_waiting_) not_empty_.notify_one();
    return true;
  }

  void cancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
    if (source_ != nullptr) source_->cancel();
    queue_.clear();
    bytes_ = 0;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  size_t depth() const override {
    MutexLock lock(&mu_);
    return queue_.size() + (source_ != nullptr ? source_->depth() : 0);
  }
  uint64_t queued_bytes() const override {
    MutexLock lock(&mu_);
    return bytes_ + (source_ != nullptr ? source_->queued_bytes() : 0);
  }

 private:
  bool ready() const SY_REQUIRES(mu_) {
    return !queue_.empty() || !error_.is_ok() || finished_ == producers_ || cancelled_;
  }

  const uint32_t producers_;
  const size_t capacity_;
  mutable Mutex mu_;
  CondVar not_full_, not_empty_;
  std::deque<Packet> queue_ SY_GUARDED_BY(mu_);
  uint64_t bytes_ SY_GUARDED_BY(mu_) = 0;  // Packet::bytes of queue_
  uint32_t finished_ SY_GUARDED_BY(mu_) = 0;
  Status error_ SY_GUARDED_BY(mu_);
  bool cancelled_ SY_GUARDED_BY(mu_) = false;
  bool consumer_waiting_ SY_GUARDED_BY(mu_) = false;
  uint32_t producers_waiting_ SY_GUARDED_BY(mu_) = 0;
  std::shared_ptr<PacketSource> source_ SY_GUARDED_BY(mu_);
};

class InprocRoute : public Route {
 public:
  InprocRoute(Dispatch mode, uint32_t workers, uint32_t window)
      : mode_(mode), workers_(std::max(1u, workers)), window_(std::max(1u, window)) {
    const uint32_t queues = mode == Dispatch::kOnRequest ? 1 : workers_;
    for (uint32_t i = 0; i < queues; ++i) queues_.push_back(std::make_unique<Queue>());
  }

  Status send(Item item) override {
    MutexLock lock(&mu_);
    if (cancelled_) return cancelled("the route was reset");
    // By key: the dispatcher chose the worker (Item::worker) from the item's routing key.
    const uint64_t to = mode_ == Dispatch::kOnRequest ? 0
                        : mode_ == Dispatch::kByKey   ? item.worker
                                                      : item.position;
    Queue& q = *queues_[to % workers_];
    q.items.push_back(std::move(item));
    if (q.waiters > 0) q.cv.notify_one();
    return Status::ok();
  }

  Status send_shard(std::shared_ptr<const SharedShard> shard) override {
    MutexLock lock(&mu_);
    if (cancelled_) return cancelled("the route was reset");
    for (auto& q : queues_) {
      q->shards.push_back(shard);
      if (q->waiters > 0) q->cv.notify_one();
    }
    return Status::ok();
  }

  Status wait_consumed(uint64_t position) override {
    MutexLock lock(&mu_);
    while (!cancelled_ && consumed_ < position) {  // the dispatcher or a broadcast worker
      ++producers_waiting_;
      producer_cv_.wait(&mu_);
      --producers_waiting_;
    }
    if (cancelled_) return cancelled("the route was reset");
    return Status::ok();
  }

  void finish(Status status) override {
    MutexLock lock(&mu_);
    finished_ = true;
    if (!status.is_ok() && error_.is_ok()) error_ = std::move(status);
    for (auto& q : queues_) q->cv.notify_all();
  }

  Result<Delivery> receive(uint32_t worker, bool wait) override {
    MutexLock lock(&mu_);
    Queue& q = *queues_[mode_ == Dispatch::kOnRequest ? 0 : worker % workers_];
    Delivery d;
    if (!ready(q)) {
      if (!wait) return d;
      ++q.waiters;
      while (!ready(q)) q.cv.wait(&mu_);
      --q.waiters;
    }
    if (cancelled_) return cancelled("the route was reset");
    if (!error_.is_ok()) return error_;
    if (!q.shards.empty()) {
      d.kind = Delivery::Kind::kShard;
      d.shard = std::move(q.shards.front());
      q.shards.pop_front();
      return d;
    }
    if (q.items.empty()) {
      d.kind = Delivery::Kind::kEnd;
      return d;
    }
    // Round robin: everything queued for this worker. On request: a fair share of what is
    // queued, at least one item, so an idle worker takes the next items and a slow one
    // does not sit on many.
    size_t n = q.items.size();
    if (mode_ == Dispatch::kOnRequest) n = std::clamp<size_t>(n / workers_, 1, 16);
    n = std::min<size_t>(n, 256);
    d.items.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      d.items.push_back(std::move(q.items.front()));
      q.items.pop_front();
    }
    return d;
  }

  void consumed(uint64_t position) override {
    MutexLock lock(&mu_);
    if (position <= consumed_) return;
    consumed_ = position;
    consumed_hint_.store(position, std::memory_order_release);
    if (producers_waiting_ > 0) producer_cv_.notify_all();
  }

  void cancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
    for (auto& q : queues_) {
      q->items.clear();
      q->shards.clear();
      q->cv.notify_all();
    }
    producer_cv_.notify_all();
  }

  uint64_t consumed_position() const override {
    return consumed_hint_.load(std::memory_order_acquire);
  }
  Dispatch mode() const override { return mode_; }
  uint32_t window() const override { return window_; }
  size_t depth() const override {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& q : queues_) n += q->items.size() + q->shards.size();
    return n;
  }

 private:
  // One worker's deliveries (one shared by all workers on request); its contents are
  // guarded by the route's mu_ (the analysis cannot name another object's mutex here).
  struct Queue {
    std::deque<Item> items;
    std::deque<std::shared_ptr<const SharedShard>> shards;
    uint32_t waiters = 0;
    CondVar cv;
  };
  bool ready(const Queue& q) const SY_REQUIRES(mu_) {
    return cancelled_ || !error_.is_ok() || finished_ || !q.items.empty() || !q.shards.empty();
  }

  const Dispatch mode_;
  const uint32_t workers_;
  const uint32_t window_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Queue>> queues_;  // fixed at construction; contents under mu_
  CondVar producer_cv_;
  uint64_t consumed_ SY_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> consumed_hint_{0};
  uint32_t producers_waiting_ SY_GUARDED_BY(mu_) = 0;
  bool finished_ SY_GUARDED_BY(mu_) = false;
  bool cancelled_ SY_GUARDED_BY(mu_) = false;
  Status error_ SY_GUARDED_BY(mu_);
};

class InprocDataPlane : public DataPlane {
 public:
  std::shared_ptr<Channel> open_channel(const std::string& name, uint32_t producers,
                                        size_t capacity) override {
    MutexLock lock(&mu_);
    return remember(channels_, name, std::make_shared<InprocChannel>(producers, capacity));
  }
  std::shared_ptr<Channel> attach(const std::string& name) override {
    MutexLock lock(&mu_);
    return find(channels_, name);
  }
  std::shared_ptr<Route> open_route(const std::string& name, Dispatch mode, uint32_t workers,
                                    uint32_t window) override {
    MutexLock lock(&mu_);
    return remember(routes_, name, std::make_shared<InprocRoute>(mode, workers, window));
  }
  std::shared_ptr<Route> attach_route(const std::string& name) override {
    MutexLock lock(&mu_);
    return find(routes_, name);
  }
  const char* kind() const override { return "inproc"; }

 private:
  template <typename T>
  using Names = std::map<std::string, std::weak_ptr<T>>;
  // Names `opened` (forgetting the closed ones: the consumer that opened them let go).
  template <typename T, typename Opened>
  std::shared_ptr<T> remember(Names<T>& names, const std::string& name,
                              std::shared_ptr<Opened> opened) SY_REQUIRES(mu_) {
    for (auto it = names.begin(); it != names.end();)
      it = it->second.expired() ? names.erase(it) : std::next(it);
    names[name] = opened;
    return opened;
  }
  template <typename T>
  std::shared_ptr<T> find(Names<T>& names, const std::string& name) SY_REQUIRES(mu_) {
    auto it = names.find(name);
    return it == names.end() ? nullptr : it->second.lock();
  }

  Mutex mu_;
  Names<Channel> channels_ SY_GUARDED_BY(mu_);
  Names<Route> routes_ SY_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<DataPlane> inproc_data_plane() { return std::make_unique<InprocDataPlane>(); }

}  // namespace shardyard::io
