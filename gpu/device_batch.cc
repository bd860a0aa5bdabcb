#include "gpu/device_batch.h"

#include <algorithm>

namespace shardyard::gpu {

DeviceBatch::DeviceBatch(std::unique_ptr<DeviceBlock> block, std::vector<DeviceColumn> columns,
                         std::shared_ptr<Event> ready, std::vector<std::shared_ptr<Buffer>> sources)
    : block_(std::move(block)), columns_(std::move(columns)), ready_(std::move(ready)) {
  for (auto& s : sources) block_->keep(std::move(s));
}

DeviceBatch::~DeviceBatch() {
  Device& dev = device();
  // Fence the block with the copies and with the work queued by now on its users' streams
  // (the default stream when nobody said which).
  block_->add_fence(ready_);
  std::vector<void*> users = users_;
  if (users.empty()) users.push_back(nullptr);
  for (void* s : users) {
    auto stream = dev.borrow_stream(s);
    auto fence =
        stream.is_ok() ? (*stream)->record() : Result<std::shared_ptr<Event>>(stream.status());
    if (!fence.is_ok()) {
      // A reader nobody can wait for: never hand this memory (or its host columns) out again.
      (void)block_.release();  // NOLINT: leaked on purpose, with the pool that owns the block
      return;
    }
    block_->add_fence(std::move(fence).value());
  }
}

Device& DeviceBatch::device() const { return block_->device(); }

const DeviceColumn* DeviceBatch::field(std::string_view name) const {
  for (const auto& c : columns_)
    if (c.name == name) return &c;
  return nullptr;
}

Status DeviceBatch::wait(uint32_t timeout_ms) const { return ready_->wait(timeout_ms); }

Status DeviceBatch::wait_on(void* stream) const {
  SY_ASSIGN_OR_RETURN(auto s, device().borrow_stream(stream));
  SY_RETURN_IF_ERROR(s->wait(*ready_));
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(users_.begin(), users_.end(), stream) == users_.end()) users_.push_back(stream);
  return Status::ok();
}

const DeviceBatch* on_device(const Batch& batch) {
  return dynamic_cast<const DeviceBatch*>(batch.device().get());
}

}  // namespace shardyard::gpu
