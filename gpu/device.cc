#include "gpu/device.h"

#include <cctype>

#include "gpu/cuda_device.h"
#include "gpu/host_device.h"

namespace shardyard::gpu {

bool cuda_built() {
#ifdef SHARDYARD_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Result<std::shared_ptr<Device>> open_device(const std::string& name) {
  if (name == "host") return std::shared_ptr<Device>(HostDevice::create());
  int ordinal = -1;
  if (name == "cuda") {
    ordinal = 0;
  } else if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() <= 9) {
    ordinal = 0;
    for (size_t i = 5; i < name.size() && ordinal >= 0; ++i)
      ordinal =
          std::isdigit(static_cast<unsigned char>(name[i])) ? ordinal * 10 + (name[i] - '0') : -1;
  }
  if (ordinal < 0)
    return invalid_argument("unknown device '" + name +
                            "': use cuda:N (a CUDA GPU, N from 0) or host (a stand-in in host "
                            "memory that runs the device path without a GPU)");
#ifdef SHARDYARD_HAVE_CUDA
  return open_cuda_device(ordinal);
#else
  return unavailable(name +
                     ": this shardyard was built without CUDA support (the CUDA toolkit was not "
                     "found, or SHARDYARD_CUDA=OFF, when it was configured; see docs/gpu.md)");
#endif
}

}  // namespace shardyard::gpu
