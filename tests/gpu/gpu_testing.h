// Helpers of the gpu/ tests: batches with known bytes, a counting source, and a device
// that fails on request (fault injection on top of the host stand-in).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device_batch.h"
#include "gpu/host_device.h"
#include "runtime/batch.h"

namespace shardyard::gpu::testing {

// Byte j of item i's field `field` ('a' or 'b') in the batch of step `step`.
inline uint8_t byte_at(uint64_t step, size_t item, char field, size_t j) {
  return static_cast<uint8_t>(step * 131 + item * 17 + j * 7 + field);
}

// `items` items: field "a" of `a_bytes` bytes each, field "b" of (i % 5) * 3 + 1 bytes.
inline Batch make_batch(BufferPool& pool, uint64_t step, size_t items = 8, size_t a_bytes = 64) {
  std::vector<Item> its(items);
  for (size_t i = 0; i < items; ++i) {
    its[i].id = step * 1000 + i;
    its[i].key = "s" + std::to_string(step) + "-" + std::to_string(i);
    std::string a(a_bytes, '\0'), b((i % 5) * 3 + 1, '\0');
    for (size_t j = 0; j < a.size(); ++j) a[j] = static_cast<char>(byte_at(step, i, 'a', j));
    for (size_t j = 0; j < b.size(); ++j) b[j] = static_cast<char>(byte_at(step, i, 'b', j));
    its[i].set_field("a", a);
    its[i].set_field("b", b);
  }
  return build_batch(its, 0, step, 0, pool).value();
}

// The bytes of column `col` of a batch's device copy, read back to the host.
inline std::vector<uint8_t> read_back(const DeviceBatch& d, size_t col) {
  std::vector<uint8_t> out(d.columns()[col].bytes);
  Status st = d.device().copy_to_host(out.data(), d.columns()[col].data, out.size());
  if (!st.is_ok()) out.clear();
  return out;
}

inline std::vector<uint8_t> host_bytes(const Column& c) {
  return std::vector<uint8_t>(c.data(), c.data() + c.bytes());
}

// Forwards to a HostDevice. Allocation number `fail_allocation` (counted from 1; 0: none)
// fails at once; copy number `fail_copy` is queued as failing work instead, so the events
// recorded after it report the error, as an asynchronous device fault does.
class FaultyDevice : public Device {
 public:
  FaultyDevice(std::shared_ptr<HostDevice> host, int fail_allocation, int fail_copy)
      : host_(std::move(host)), fail_allocation_(fail_allocation), fail_copy_(fail_copy) {}
  std::string name() const override { return "faulty"; }
  DeviceKind kind() const override { return DeviceKind::kHost; }
  int ordinal() const override { return 0; }
  Result<void*> allocate(size_t bytes) override {
    if (++allocations_ == fail_allocation_) return unavailable("injected: out of device memory");
    return host_->allocate(bytes);
  }
  void free(void* data) override { host_->free(data); }
  Result<uint8_t*> allocate_pinned(size_t bytes) override { return host_->allocate_pinned(bytes); }
  void free_pinned(uint8_t* data, size_t bytes) override { host_->free_pinned(data, bytes); }
  Result<std::unique_ptr<Stream>> create_stream() override {
    SY_ASSIGN_OR_RETURN(auto inner, host_->create_stream());
    return std::unique_ptr<Stream>(new FaultyStream(this, std::move(inner)));
  }
  Result<std::unique_ptr<Stream>> borrow_stream(void* native) override {
    return host_->borrow_stream(native);
  }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    return host_->copy_to_host(dst, src, bytes);
  }

 private:
  class FaultyStream : public Stream {
   public:
    FaultyStream(FaultyDevice* d, std::unique_ptr<Stream> inner)
        : d_(d), inner_(std::move(inner)) {}
    Status copy_to_device(void* dst, const void* src, size_t bytes) override {
      if (++d_->copies_ == d_->fail_copy_)
        return d_->host_->launch(*inner_,
                                 [] { return io_error("injected: the copy engine failed"); });
      return inner_->copy_to_device(dst, src, bytes);
    }
    Result<std::shared_ptr<Event>> record() override { return inner_->record(); }
    Status wait(Event& e) override { return inner_->wait(e); }
    void* native() override { return inner_->native(); }

   private:
    FaultyDevice* d_;
    std::unique_ptr<Stream> inner_;
  };
  std::shared_ptr<HostDevice> host_;
  const int fail_allocation_, fail_copy_;
  std::atomic<int> allocations_{0}, copies_{0};
};

}  // namespace shardyard::gpu::testing
