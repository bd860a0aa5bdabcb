// HostDevice: a stand-in for a GPU in host memory, so the device path (pinned pools, copy
// streams, events, buffer reuse, errors) runs and is tested on machines without one.
//
// "Device" memory is ordinary host memory, filled with 0xCD when allocated so that a copy
// that never happened shows. Every stream is a thread that runs its queued work in order;
// events complete when the stream reaches them, and a stream waits for another stream's
// event as a GPU stream does. A copy checks that its destination lies inside a live device
// allocation (a bad copy fails at once, as cudaMemcpyAsync does) and counts whether its
// source was pinned. Work that fails makes the stream's later events report the error.
// `copy_delay_us` makes every copy take at least that long, like a slow link, so copies
// are still in flight when the trainer gets a batch.
//
// Thread-safe. Streams drain their queued work before their thread ends.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "gpu/device.h"

namespace shardyard::gpu {

struct HostDeviceOptions {
  uint32_t copy_delay_us = 0;  // minimum time of every copy
};

struct HostDeviceStats {
  uint64_t copies = 0;
  uint64_t pinned_copies = 0;  // copies whose source was allocate_pinned() memory
  uint64_t bytes_copied = 0;   // host to device
  uint64_t allocations = 0;    // allocate() calls that succeeded
  uint64_t live_allocations = 0;
  uint64_t pinned_allocations = 0;
  uint64_t streams = 0;  // created by create_stream()
};

class HostDevice : public Device {
 public:
  static std::shared_ptr<HostDevice> create(HostDeviceOptions options = {});
  ~HostDevice() override;

  std::string name() const override { return "host"; }
  DeviceKind kind() const override { return DeviceKind::kHost; }
  int ordinal() const override { return 0; }
  Result<void*> allocate(size_t bytes) override;
  void free(void* data) override;
  Result<uint8_t*> allocate_pinned(size_t bytes) override;
  void free_pinned(uint8_t* data, size_t bytes) override;
  Result<std::unique_ptr<Stream>> create_stream() override;
  Result<std::unique_ptr<Stream>> borrow_stream(void* native) override;
  Status copy_to_host(void* dst, const void* src, size_t bytes) override;

  // Queues `work` on a stream of this device, as a kernel launch would: it runs after what
  // is queued before it; an error it returns fails the stream's later events.
  Status launch(Stream& stream, std::function<Status()> work);
  HostDeviceStats stats() const;

 private:
  struct StreamCore;
  class StreamHandle;
  explicit HostDevice(HostDeviceOptions options) : options_(options) {}
  Status enqueue_copy(StreamCore& core, void* dst, const void* src, size_t bytes);
  // The allocation [base, base + size) that holds [p, p + bytes), or an error naming it.
  Status check_device_range(const void* p, size_t bytes, const char* what) const;
  Result<std::shared_ptr<StreamCore>> find_stream(void* native);

  const HostDeviceOptions options_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> device_;  // device allocations: base -> size; guarded by mu_
  std::map<uintptr_t, size_t> pinned_;  // pinned allocations: base -> size; guarded by mu_
  std::map<void*, std::weak_ptr<StreamCore>> streams_;  // by native(); guarded by mu_
  std::shared_ptr<StreamCore> default_stream_;          // made on first use; guarded by mu_
  HostDeviceStats stats_;                               // guarded by mu_
};

}  // namespace shardyard::gpu
