#include "gpu/host_device.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>
#include <thread>

namespace shardyard::gpu {

namespace {

// How long a stream waits for another stream's event before it fails: longer than any
// copy, short enough that a lost event is an error and not a hang.
constexpr uint32_t kStreamWaitMs = 300000;

std::string hex(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

class HostEvent : public Event, public std::enable_shared_from_this<HostEvent> {
 public:
  void complete(Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      status_ = std::move(status);
    }
    cv_.notify_all();
  }
  Result<bool> query() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) return false;
    if (!status_.is_ok()) return status_;
    return true;
  }
  Status wait(uint32_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done_; }))
      return unavailable("host: an event did not complete within " + std::to_string(timeout_ms) +
                         " ms");
    return status_;
  }
  void* native() override { return this; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  Status status_;      // guarded by mu_
};

}  // namespace

// One stream: a thread that runs queued work in order. The first error of its work stays
// (`error`, touched only by the thread) and completes every later event with it.
struct HostDevice::StreamCore {
  explicit StreamCore(std::string n) : name(std::move(n)) {
    thread = std::thread([this] { run(); });
  }
  ~StreamCore() { close(); }

  Status push(std::function<Status()> work) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (closing) return cancelled(name + ": the stream was destroyed");
      queue.push_back(std::move(work));
    }
    cv.notify_one();
    return Status::ok();
  }
  // Runs what is queued, then ends the thread.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (closing) return;
      closing = true;
    }
    cv.notify_one();
    if (thread.joinable()) thread.join();
  }
  void run() {
    for (;;) {
      std::function<Status()> work;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return closing || !queue.empty(); });
        if (queue.empty()) return;
        work = std::move(queue.front());
        queue.pop_front();
      }
      Status st = work();
      if (!st.is_ok() && error.is_ok()) error = std::move(st);
    }
  }

  const std::string name;
  Status error;  // touched by `thread` only
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<Status()>> queue;  // guarded by mu
  bool closing = false;                       // guarded by mu
  std::thread thread;
};

class HostDevice::StreamHandle : public Stream {
 public:
  StreamHandle(std::shared_ptr<HostDevice> device, std::shared_ptr<HostDevice::StreamCore> core,
               bool owned)
      : device_(std::move(device)), core_(std::move(core)), owned_(owned) {}
  ~StreamHandle() override {
    if (owned_) core_->close();
  }
  Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    return device_->enqueue_copy(*core_, dst, src, bytes);
  }
  Result<std::shared_ptr<Event>> record() override {
    auto ev = std::make_shared<HostEvent>();
    auto* core = core_.get();
    SY_RETURN_IF_ERROR(core_->push([ev, core] {
      ev->complete(core->error);
      return Status::ok();
    }));
    return std::shared_ptr<Event>(ev);
  }
  Status wait(Event& event) override {
    auto* host = dynamic_cast<HostEvent*>(&event);
    if (host == nullptr) return invalid_argument(core_->name + ": waits only for host events");
    auto ev = host->shared_from_this();
    const std::string name = core_->name;
    return core_->push([ev, name]() -> Status {
      Status st = ev->wait(kStreamWaitMs);
      if (!st.is_ok()) return Status(st.code(), name + " waited for an event: " + st.message());
      return Status::ok();
    });
  }
  void* native() override { return core_.get(); }

 private:
  std::shared_ptr<HostDevice> device_;
  std::shared_ptr<HostDevice::StreamCore> core_;
  const bool owned_;
};

std::shared_ptr<HostDevice> HostDevice::create(HostDeviceOptions options) {
  return std::shared_ptr<HostDevice>(new HostDevice(options));
}

HostDevice::~HostDevice() {
  if (default_stream_) default_stream_->close();
  for (auto& [base, size] : device_) std::free(reinterpret_cast<void*>(base));
  for (auto& [base, size] : pinned_) std::free(reinterpret_cast<void*>(base));
}

Result<void*> HostDevice::allocate(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes == 0 ? 256 : bytes) != 0)
    return unavailable("host: out of memory allocating " + std::to_string(bytes) +
                       " bytes of device memory");
  std::memset(p, 0xCD, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  device_[reinterpret_cast<uintptr_t>(p)] = bytes;
  ++stats_.allocations;
  ++stats_.live_allocations;
  return p;
}

void HostDevice::free(void* data) {
  if (data == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_.erase(reinterpret_cast<uintptr_t>(data)) == 0) return;  // not ours
    --stats_.live_allocations;
  }
  std::free(data);
}

Result<uint8_t*> HostDevice::allocate_pinned(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes == 0 ? 4096 : bytes) != 0)
    return unavailable("host: out of memory allocating " + std::to_string(bytes) +
                       " bytes of pinned memory");
  std::lock_guard<std::mutex> lock(mu_);
  pinned_[reinterpret_cast<uintptr_t>(p)] = bytes;
  ++stats_.pinned_allocations;
  return static_cast<uint8_t*>(p);
}

void HostDevice::free_pinned(uint8_t* data, size_t) {
  if (data == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pinned_.erase(reinterpret_cast<uintptr_t>(data)) == 0) return;
    --stats_.pinned_allocations;
  }
  std::free(data);
}

namespace {
// Whether [p, p + bytes) lies inside one block of `blocks` (base -> size).
bool inside(const std::map<uintptr_t, size_t>& blocks, const void* p, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = blocks.upper_bound(at);
  if (it == blocks.begin()) return false;
  --it;
  return at + bytes <= it->first + it->second;
}
}  // namespace

Status HostDevice::check_device_range(const void* p, size_t bytes, const char* what) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (inside(device_, p, bytes)) return Status::ok();
  return invalid_argument(std::string("host: ") + what + " of " + std::to_string(bytes) +
                          " bytes at " + hex(p) + " is outside every device allocation");
}

Status HostDevice::enqueue_copy(StreamCore& core, void* dst, const void* src, size_t bytes) {
  SY_RETURN_IF_ERROR(check_device_range(dst, bytes, "a copy to the device"));
  bool pinned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pinned = inside(pinned_, src, bytes);
  }
  const uint32_t delay_us = options_.copy_delay_us;
  return core.push([this, dst, src, bytes, pinned, delay_us] {
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    if (bytes > 0) std::memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.copies;
    if (pinned) ++stats_.pinned_copies;
    stats_.bytes_copied += bytes;
    return Status::ok();
  });
}

Result<std::unique_ptr<Stream>> HostDevice::create_stream() {
  auto self = std::static_pointer_cast<HostDevice>(shared_from_this());
  std::lock_guard<std::mutex> lock(mu_);
  auto core = std::make_shared<StreamCore>("host:stream" + std::to_string(++stats_.streams));
  streams_[core.get()] = core;
  for (auto it = streams_.begin(); it != streams_.end();)  // forget destroyed streams
    it = it->second.expired() ? streams_.erase(it) : std::next(it);
  return std::unique_ptr<Stream>(new StreamHandle(std::move(self), core, true));
}

Result<std::shared_ptr<HostDevice::StreamCore>> HostDevice::find_stream(void* native) {
  std::lock_guard<std::mutex> lock(mu_);
  if (native == nullptr) {
    if (!default_stream_) default_stream_ = std::make_shared<StreamCore>("host:default");
    return default_stream_;
  }
  if (default_stream_ && native == default_stream_.get()) return default_stream_;
  auto it = streams_.find(native);
  auto core = it == streams_.end() ? nullptr : it->second.lock();
  if (!core) return invalid_argument("host: " + hex(native) + " is not a live stream of it");
  return core;
}

Result<std::unique_ptr<Stream>> HostDevice::borrow_stream(void* native) {
  SY_ASSIGN_OR_RETURN(auto core, find_stream(native));
  auto self = std::static_pointer_cast<HostDevice>(shared_from_this());
  return std::unique_ptr<Stream>(new StreamHandle(std::move(self), std::move(core), false));
}

Status HostDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  SY_RETURN_IF_ERROR(check_device_range(src, bytes, "a copy to the host"));
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return Status::ok();
}

Status HostDevice::launch(Stream& stream, std::function<Status()> work) {
  SY_ASSIGN_OR_RETURN(auto core, find_stream(stream.native()));
  return core->push(std::move(work));
}

HostDeviceStats HostDevice::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shardyard::gpu
