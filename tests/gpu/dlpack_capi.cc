// A C entry point for tests/gpu/dlpack_torch_test.py: exports batch columns through
// gpu::to_dlpack so that PyTorch's own DLPack importer takes them (loaded with ctypes).
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/dlpack.h"
#include "gpu/host_device.h"
#include "gpu/pinned_pool.h"
#include "gpu/prefetcher.h"

using namespace shardyard;

namespace {

std::atomic<int> live_buffers{0};

// Heap memory that counts what is outstanding: 0 once every exported batch is gone.
class CountingAllocator : public BufferAllocator {
 public:
  uint8_t* allocate(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes) != 0) return nullptr;
    ++live_buffers;
    return static_cast<uint8_t*>(p);
  }
  void deallocate(uint8_t* data, size_t) override {
    --live_buffers;
    std::free(data);
  }
};

// Item i of a batch: `floats` float32 values step * 1000 + i * floats + j.
Batch make_batch(BufferPool& pool, int items, int floats, int step) {
  std::vector<Item> its(static_cast<size_t>(items));
  for (int i = 0; i < items; ++i) {
    std::vector<float> v(static_cast<size_t>(floats));
    for (int j = 0; j < floats; ++j) v[j] = float(step * 1000 + i * floats + j);
    its[i].key = std::to_string(i);
    its[i].set_field("a", std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  }
  return build_batch(its, 0, static_cast<uint64_t>(step), 0, pool).value();
}

DLManagedTensor* export_a(const Batch& b) {
  gpu::TensorOptions o;
  o.dtype = DLDataType{kDLFloat, 32, 1};
  auto t = gpu::to_dlpack(b, "a", o);
  return t.is_ok() ? *t : nullptr;
}

}  // namespace

extern "C" {

// Column "a" of one host batch, exported twice (two tensors over the same memory).
int sy_test_export_host(int items, int floats, DLManagedTensor** first, DLManagedTensor** second) {
  auto pool = BufferPool::create(0, std::make_shared<CountingAllocator>());
  Batch b = make_batch(*pool, items, floats, 7);
  *first = export_a(b);
  *second = export_a(b);
  return *first != nullptr && *second != nullptr ? 0 : 1;
}

// Column "a" of a batch delivered by the prefetcher to the host stand-in device.
DLManagedTensor* sy_test_export_device(int items, int floats) {
  auto device = gpu::HostDevice::create({/*copy_delay_us=*/2000});
  auto pinned = gpu::pinned_buffer_pool(device, 16u << 20);
  bool made = false;
  auto p = gpu::DevicePrefetcher::start(
      gpu::DeviceMemoryPool::create(device, 16u << 20), [&]() -> Result<std::optional<Batch>> {
        if (made) return std::optional<Batch>();
        made = true;
        return std::optional<Batch>(make_batch(*pinned, items, floats, 3));
      });
  if (!p.is_ok()) return nullptr;
  auto b = (*p)->next();
  if (!b.is_ok() || !b->has_value()) return nullptr;
  if (!gpu::on_device(**b)->wait(10000).is_ok()) return nullptr;
  return export_a(**b);
}

int sy_test_live_buffers() { return live_buffers; }
}
