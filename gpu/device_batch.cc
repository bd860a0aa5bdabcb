#include "gpu/device_batch.h"

#include <algorithm>

namespace shardyard::gpu {

namespace {
// How long releasing a batch waits for copies still reading its host columns.
constexpr uint32_t kCopyWaitMs = 60000;
}  // namespace

DeviceBatch::DeviceBatch(std::unique_ptr<DeviceBlock> block, std::vector<DeviceColumn> columns,
                         std::shared_ptr<Event> ready, std::vector<std::shared_ptr<Buffer>> sources)
    : block_(std::move(block)),
      columns_(std::move(columns)),
      ready_(std::move(ready)),
      sources_(std::move(sources)) {}

DeviceBatch::~DeviceBatch() {
  Device& dev = device();
  // Fence the block with the work queued on its users' streams by now (the default stream
  // when nobody said which), and with the copies themselves.
  std::vector<void*> users = users_;
  if (users.empty()) users.push_back(nullptr);
  bool fenced = true;
  for (void* s : users) {
    auto stream = dev.borrow_stream(s);
    auto fence =
        stream.is_ok() ? (*stream)->record() : Result<std::shared_ptr<Event>>(stream.status());
    if (fence.is_ok()) {
      block_->add_fence(std::move(fence).value());
    } else {
      fenced = false;
    }
  }
  block_->add_fence(ready_);
  // The copies read the pinned host columns: keep them until the copies are over.
  (void)ready_->wait(kCopyWaitMs);
  auto done = ready_->query();
  if (!fenced || (done.is_ok() && !*done)) {
    // Readers unknown or still running after a minute: never hand this memory out again
    // (the block and the host columns are leaked, with the pool that owns the block).
    new std::vector<std::shared_ptr<Buffer>>(std::move(sources_));  // NOLINT: leaked on purpose
    (void)block_.release();                                         // NOLINT: leaked on purpose
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
