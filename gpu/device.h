// Device: the small interface the GPU path is written against, and open_device().
//
// A Device allocates device memory and page-locked (pinned) host memory and makes Streams:
// in-order queues of host-to-device copies, with Events that mark a point in a stream's
// work. Two implementations: CUDA (gpu/cuda_device.cc, built only when the CUDA toolkit is
// found; it checks for a usable GPU when opened), and HostDevice (gpu/host_device.h), a
// stand-in in host memory whose streams are threads, on which the pipelining logic is tested
// on every machine. Nothing here names a CUDA type: native handles are `void*`
// (a cudaStream_t, a cudaEvent_t).
//
// Errors are values. CUDA reports an error of queued work later (a copy that failed shows
// in the events recorded after it); so does the stand-in.
//
// Thread-safe: a Device, its Streams and Events may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/status.h"

namespace shardyard::gpu {

enum class DeviceKind {
  kHost,  // the stand-in: "device" memory is host memory
  kCuda,  // a CUDA GPU
};

// A point in a stream's queued work.
class Event {
 public:
  virtual ~Event() = default;
  // True once the work queued before the event finished; the error it ran into, if any.
  virtual Result<bool> query() = 0;
  // Blocks the calling thread until query() is true, at most timeout_ms (then kUnavailable).
  virtual Status wait(uint32_t timeout_ms) = 0;
  virtual void* native() = 0;  // cudaEvent_t, or the stand-in's event
};

// An in-order queue of work on one device.
class Stream {
 public:
  virtual ~Stream() = default;
  // Queues a copy of `bytes` bytes from host memory to device memory. `src` must stay valid
  // and unchanged until an event recorded after the copy completes.
  virtual Status copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  // An event that completes once everything queued on this stream so far is done.
  virtual Result<std::shared_ptr<Event>> record() = 0;
  // Work queued on this stream from now on starts after `event` completes; the host does not
  // wait. `event` may belong to another stream of the same device.
  virtual Status wait(Event& event) = 0;
  virtual void* native() = 0;  // cudaStream_t, or the stand-in's stream
};

class Device : public std::enable_shared_from_this<Device> {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cuda:0", "host"
  virtual DeviceKind kind() const = 0;
  virtual int ordinal() const = 0;  // the N of cuda:N; 0 for the stand-in
  // Device memory, aligned to 256 bytes. free() only once no queued work uses it.
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void free(void* data) = 0;
  // Page-aligned, page-locked host memory a copy reads without staging.
  virtual Result<uint8_t*> allocate_pinned(size_t bytes) = 0;
  virtual void free_pinned(uint8_t* data, size_t bytes) = 0;
  // A stream of its own that does not wait for the default stream.
  virtual Result<std::unique_ptr<Stream>> create_stream() = 0;
  // A stream of the caller's (a cudaStream_t; null: the default stream), not owned: it must
  // outlive the returned object.
  virtual Result<std::unique_ptr<Stream>> borrow_stream(void* native) = 0;
  // Copies device memory back to the host and returns when it is there (checks and tests).
  // It does not wait for work queued on streams: wait for their events first.
  virtual Status copy_to_host(void* dst, const void* src, size_t bytes) = 0;
};

// Opens a device by name: "cuda:N" (or "cuda", device 0), or "host" (the stand-in). A
// CUDA device fails with kUnavailable when this build has no CUDA support or the machine
// no usable GPU (no driver, no device, N out of range); the message says which.
Result<std::shared_ptr<Device>> open_device(const std::string& name);

// Whether this build has the CUDA backend (SHARDYARD_HAVE_CUDA).
bool cuda_built();

}  // namespace shardyard::gpu
