// The CUDA Device: compiled only when the CUDA toolkit was found (SHARDYARD_HAVE_CUDA).
#include "gpu/cuda_device.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace shardyard::gpu {

namespace {

std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
}

// Every call first makes the device current on the calling thread (cheap, thread-local):
// batches are released, and events queried, on whatever thread the trainer uses.
class CudaEvent : public Event {
 public:
  CudaEvent(int ordinal, cudaEvent_t ev) : ordinal_(ordinal), ev_(ev) {}
  ~CudaEvent() override {
    cudaSetDevice(ordinal_);
    cudaEventDestroy(ev_);
  }
  Result<bool> query() override {
    cudaSetDevice(ordinal_);
    cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return io_error("cuda:" + std::to_string(ordinal_) + ": " + cuda_error(e));
  }
  // Polls rather than cudaEventSynchronize(), which has no timeout: a few yields first
  // (copies of one batch take tens of microseconds to milliseconds), then short sleeps.
  Status wait(uint32_t timeout_ms) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (int round = 0;; ++round) {
      SY_ASSIGN_OR_RETURN(bool done, query());
      if (done) return Status::ok();
      if (std::chrono::steady_clock::now() >= deadline)
        return unavailable("cuda:" + std::to_string(ordinal_) +
                           ": an event did not complete within " + std::to_string(timeout_ms) +
                           " ms");
      if (round < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(round < 256 ? 20 : 200));
      }
    }
  }
  void* native() override { return ev_; }

 private:
  const int ordinal_;
  cudaEvent_t ev_;
};

class CudaStream : public Stream {
 public:
  CudaStream(int ordinal, cudaStream_t s, bool owned) : ordinal_(ordinal), s_(s), owned_(owned) {}
  ~CudaStream() override {
    if (!owned_) return;
    cudaSetDevice(ordinal_);
    cudaStreamDestroy(s_);  // queued work still completes
  }
  Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    cudaSetDevice(ordinal_);
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s_), "cudaMemcpyAsync");
  }
  Result<std::shared_ptr<Event>> record() override {
    cudaSetDevice(ordinal_);
    cudaEvent_t ev;
    SY_RETURN_IF_ERROR(
        check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    auto event = std::make_shared<CudaEvent>(ordinal_, ev);
    SY_RETURN_IF_ERROR(check(cudaEventRecord(ev, s_), "cudaEventRecord"));
    return std::shared_ptr<Event>(std::move(event));
  }
  Status wait(Event& event) override {
    if (dynamic_cast<CudaEvent*>(&event) == nullptr)
      return invalid_argument("cuda:" + std::to_string(ordinal_) + ": waits only for CUDA events");
    cudaSetDevice(ordinal_);
    return check(cudaStreamWaitEvent(s_, static_cast<cudaEvent_t>(event.native()), 0),
                 "cudaStreamWaitEvent");
  }
  void* native() override { return s_; }

 private:
  Status check(cudaError_t e, const char* call) const {
    if (e == cudaSuccess) return Status::ok();
    return io_error("cuda:" + std::to_string(ordinal_) + ": " + call + " failed: " + cuda_error(e));
  }
  const int ordinal_;
  cudaStream_t s_;
  const bool owned_;
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int ordinal() const override { return ordinal_; }

  Result<void*> allocate(size_t bytes) override {
    cudaSetDevice(ordinal_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
    if (e != cudaSuccess) return unavailable(name() + ": cudaMalloc failed: " + cuda_error(e));
    return p;
  }
  void free(void* data) override {
    cudaSetDevice(ordinal_);
    cudaFree(data);
  }
  // Page-aligned heap memory registered with the driver (page-locked for every device).
  Result<uint8_t*> allocate_pinned(size_t bytes) override {
    void* p = nullptr;
    const size_t n = bytes == 0 ? 4096 : bytes;
    if (posix_memalign(&p, 4096, n) != 0)
      return unavailable(name() + ": out of host memory for " + std::to_string(n) + " bytes");
    cudaSetDevice(ordinal_);
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      std::free(p);
      return unavailable(name() + ": cudaHostRegister of " + std::to_string(n) +
                         " bytes failed: " + cuda_error(e));
    }
    return static_cast<uint8_t*>(p);
  }
  void free_pinned(uint8_t* data, size_t) override {
    if (data == nullptr) return;
    cudaSetDevice(ordinal_);
    cudaHostUnregister(data);
    std::free(data);
  }
  Result<std::unique_ptr<Stream>> create_stream() override {
    cudaSetDevice(ordinal_);
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return io_error(name() + ": cudaStreamCreate failed: " + cuda_error(e));
    return std::unique_ptr<Stream>(new CudaStream(ordinal_, s, true));
  }
  // Null is the legacy default stream, which waits for (and is waited for by) every
  // blocking stream of the device: a fence recorded on it covers the trainer's work on them.
  Result<std::unique_ptr<Stream>> borrow_stream(void* native) override {
    return std::unique_ptr<Stream>(new CudaStream(
        ordinal_, native ? static_cast<cudaStream_t>(native) : cudaStreamLegacy, false));
  }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    cudaSetDevice(ordinal_);
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
      return io_error(name() + ": cudaMemcpy to the host failed: " + cuda_error(e));
    return Status::ok();
  }

 private:
  const int ordinal_;
};

}  // namespace

Result<std::shared_ptr<Device>> open_cuda_device(int ordinal) {
  const std::string name = "cuda:" + std::to_string(ordinal);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return unavailable(name +
                       ": no usable CUDA device: cudaGetDeviceCount failed: " + cuda_error(e) +
                       "; check that the NVIDIA driver is loaded (nvidia-smi) and "
                       "CUDA_VISIBLE_DEVICES");
  if (count == 0) return unavailable(name + ": no usable CUDA device: the driver sees no GPU");
  if (ordinal >= count)
    return unavailable(name + ": this machine has " + std::to_string(count) +
                       " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1));
  e = cudaSetDevice(ordinal);
  if (e == cudaSuccess) e = cudaFree(nullptr);  // creates the context now, not at the first copy
  if (e != cudaSuccess) return unavailable(name + ": cannot use the device: " + cuda_error(e));
  return std::shared_ptr<Device>(std::make_shared<CudaDevice>(ordinal));
}

}  // namespace shardyard::gpu
