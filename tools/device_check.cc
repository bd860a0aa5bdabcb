#include "device_check.h"

#include <cstring>
#include <vector>

#include "gpu/device_batch.h"

namespace shardyard::tools {

namespace {
constexpr uint32_t kCopyTimeoutMs = 60000;
}

Status consume_on_device(const Batch& batch, bool check) {
  const std::string what = "batch (epoch " + std::to_string(batch.epoch()) + ", step " +
                           std::to_string(batch.step()) + ")";
  const gpu::DeviceBatch* dev = gpu::on_device(batch);
  if (dev == nullptr) return internal_error(what + " arrived without its device copy");
  SY_RETURN_IF_ERROR(dev->wait(kCopyTimeoutMs));
  if (!check) return Status::ok();
  std::vector<uint8_t> back;
  for (size_t i = 0; i < batch.columns().size(); ++i) {
    const Column& host = batch.columns()[i];
    const gpu::DeviceColumn& col = dev->columns()[i];
    if (col.name != host.name || col.bytes != host.bytes())
      return internal_error(what + ": the device copy of column '" + host.name +
                            "' does not match its layout");
    back.resize(col.bytes);
    SY_RETURN_IF_ERROR(dev->device().copy_to_host(back.data(), col.data, col.bytes));
    if (col.bytes > 0 && std::memcmp(back.data(), host.data(), col.bytes) != 0) {
      size_t at = 0;
      while (back[at] == host.data()[at]) ++at;
      return corrupt(dev->device().name() + ": the device copy of column '" + host.name + "' of " +
                     what + " differs from the host column at byte " + std::to_string(at));
    }
  }
  return Status::ok();
}

}  // namespace shardyard::tools
