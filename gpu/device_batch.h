// DeviceBatch: a batch's columns in device memory, attached to the Batch the loader hands
// out when LoaderOptions::device is set (gpu::on_device(batch) finds it).
//
// Every column has the host column's layout (Column::offsets apply unchanged) inside one
// device block. The copies may still be running when the trainer gets the batch: `ready()`
// completes when they are done. A trainer either makes its stream wait for them
// (wait_on(stream), the host does not block) or waits on the host (wait()).
//
// Lifetime: the device memory belongs to the batch and every copy of it (and every DLPack
// tensor exported from it). When the last one is gone, the block goes back to the pool
// fenced by the copies and by the work queued by then on every stream given to wait_on()
// (or on the default stream when none was), so the next copy into it waits for the
// trainer's kernels on the GPU; the pinned host columns stay with the block until those
// fences complete. Releasing a batch never blocks the host.
//
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device.h"
#include "gpu/device_pool.h"
#include "runtime/batch.h"

namespace shardyard::gpu {

struct DeviceColumn {
  std::string name;
  uint8_t* data = nullptr;  // device memory; item i is at data + Column::offsets[i]
  uint64_t bytes = 0;
};

class DeviceBatch : public BatchAttachment {
 public:
  // `block` holds `columns` (in Batch::columns() order); `ready` completes after their
  // copies; `sources` are the host buffers the copies read (the block keeps them).
  DeviceBatch(std::unique_ptr<DeviceBlock> block, std::vector<DeviceColumn> columns,
              std::shared_ptr<Event> ready, std::vector<std::shared_ptr<Buffer>> sources);
  ~DeviceBatch() override;

  Device& device() const;
  const std::vector<DeviceColumn>& columns() const { return columns_; }
  const DeviceColumn* field(std::string_view name) const;
  // Completes once every column is in device memory (or reports the copy's error).
  Event& ready() const { return *ready_; }
  const std::shared_ptr<Event>& ready_event() const { return ready_; }
  // Blocks the calling thread until then, at most timeout_ms.
  Status wait(uint32_t timeout_ms) const;
  // Work queued on `stream` (a cudaStream_t; null: the default stream) from now on runs
  // after the copies; the host does not wait. The stream must outlive the batch and every
  // tensor exported from it (the release records the reuse fence on it).
  Status wait_on(void* stream) const;

 private:
  std::unique_ptr<DeviceBlock> block_;
  std::vector<DeviceColumn> columns_;
  std::shared_ptr<Event> ready_;
  mutable std::mutex mu_;
  mutable std::vector<void*> users_;  // streams given to wait_on(); guarded by mu_
};

// The device copy of `batch`'s columns; null when the batch stays in host memory.
const DeviceBatch* on_device(const Batch& batch);

}  // namespace shardyard::gpu
