// A trainer that takes its batches on a device (docs/gpu.md), through the public API only
// (actors/loader.h, gpu/device_batch.h, gpu/dlpack.h). It writes its own time-series
// dataset: 4 raw files of 600 records of 8 float32 channels, where channel 0 is the file's
// number and channel 1 the record's index, loads windows of 64 records every 16 with the
// record one step ahead as target (x [B, 64, 8], y [B, 8]), and for every batch
//   - makes its stream wait for the batch's copies (the host does not block),
//   - exports x as a DLPack float32 tensor [B, 64, 8] on the device, as PyTorch or JAX
//     would take it, and checks its shape and device,
//   - reads the device copy back and checks each window's records, and that every window
//     arrives exactly once per epoch.
// --device host (the default) uses the host stand-in; --device cuda:0 a GPU. A device that
// cannot be used exits 77 with the reason (ctest counts it as skipped). Exits 1 on a
// failed check.
//
//   gpu_trainer [--device cuda:0] [--workers 2] [--batch-size 16] [--epochs 2] [--prefetch 2]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <shardyard/device_batch.h>
#include <shardyard/dlpack_export.h>
#include <shardyard/loader.h>

using namespace shardyard;

namespace {

constexpr uint32_t kFiles = 4, kRecords = 600, kChannels = 8, kLength = 64, kStride = 16;
constexpr uint64_t kRecordBytes = kChannels * sizeof(float);

Status write_files(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (uint32_t f = 0; f < kFiles; ++f) {
    std::vector<float> data(kRecords * kChannels);
    for (uint32_t r = 0; r < kRecords; ++r)
      for (uint32_t c = 0; c < kChannels; ++c)
        data[r * kChannels + c] = c == 0 ? float(f) : c == 1 ? float(r) : float(r % 7) * c;
    const std::string path = dir + "/part-" + std::to_string(f) + ".bin";
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 4));
    if (!out) return io_error("cannot write " + path);
  }
  return Status::ok();
}

// Checks the windows of one batch, read back from the device; marks them in `seen`.
Status check_batch(const Batch& b, const std::vector<float>& x, std::vector<int>& seen) {
  for (size_t i = 0; i < b.size(); ++i) {
    const std::string& key = b.keys()[i];  // "part-F.bin@FIRST"
    const uint32_t file = static_cast<uint32_t>(key[5] - '0');
    const uint64_t first = std::stoull(key.substr(key.find('@') + 1));
    const uint64_t index = file * (kRecords / kStride) + first / kStride;
    if (index >= seen.size()) return internal_error("unexpected window " + key);
    ++seen[index];
    for (uint32_t j = 0; j < kLength; ++j) {
      const float* rec = &x[(i * kLength + j) * kChannels];
      if (rec[0] != float(file) || rec[1] != float(first + j))
        return internal_error("window " + key + ": record " + std::to_string(j) + " is wrong");
    }
  }
  return Status::ok();
}

int fail(const Status& st) {
  std::fprintf(stderr, "gpu_trainer: %s\n", st.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  LoaderOptions opt;
  opt.device = "host";
  opt.batch_size = 16;
  uint32_t epochs = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device")
      opt.device = value;
    else if (flag == "--workers")
      opt.workers = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--batch-size")
      opt.batch_size = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--epochs")
      epochs = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--prefetch")
      opt.device_prefetch = static_cast<uint32_t>(std::stoul(value));
  }
  char tmpl[] = "/tmp/shardyard-gpu-trainer.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  if (Status st = write_files(dir); !st.is_ok()) return fail(st);
  opt.sources = {dir + "/part-{0..3}.bin"};
  opt.windows.length = kLength;
  opt.windows.stride = kStride;
  opt.windows.target = 1;
  opt.windows.record_bytes = kRecordBytes;

  auto loader = Loader::open(opt);
  if (!loader.is_ok() && loader.status().code() == StatusCode::kUnavailable) {
    std::printf("skipped: %s\n", loader.status().to_string().c_str());
    return 77;
  }
  if (!loader.is_ok()) return fail(loader.status());
  const uint64_t windows = kFiles * ((kRecords - kLength - 1) / kStride + 1);
  std::vector<float> x;
  for (uint32_t epoch = 0; epoch < epochs; ++epoch) {
    if (Status st = (*loader)->start_epoch(epoch); !st.is_ok()) return fail(st);
    std::vector<int> seen(kFiles * (kRecords / kStride), 0);
    for (;;) {
      auto batch = (*loader)->next();
      if (!batch.is_ok()) return fail(batch.status());
      if (!batch->has_value()) break;
      const Batch& b = **batch;
      if (b.size() == 0) continue;
      const gpu::DeviceBatch* dev = gpu::on_device(b);
      if (dev == nullptr) return fail(internal_error("the batch has no device copy"));
      // The trainer's stream (here the default one) waits for the copies on the device.
      if (Status st = dev->wait_on(/*stream=*/nullptr); !st.is_ok()) return fail(st);
      // x as a [B, 64, 8] float32 tensor where the batch lives, without a copy.
      gpu::TensorOptions as_floats;
      as_floats.dtype = DLDataType{kDLFloat, 32, 1};
      as_floats.item_shape = {kLength, kChannels};
      auto tensor = gpu::to_dlpack(b, "x", as_floats);
      if (!tensor.is_ok()) return fail(tensor.status());
      const DLTensor& t = (*tensor)->dl_tensor;
      const bool on_gpu = dev->device().kind() == gpu::DeviceKind::kCuda;
      if (t.ndim != 3 || t.shape[0] != int64_t(b.size()) || t.shape[1] != kLength ||
          t.shape[2] != kChannels || (t.device.device_type == kDLCUDA) != on_gpu)
        return fail(internal_error("the tensor is not [B, 64, 8] on the batch's device"));
      // "Training": read the device copy back and check it.
      x.resize(b.size() * kLength * kChannels);
      Status st = dev->wait(60000);
      if (st.is_ok()) st = dev->device().copy_to_host(x.data(), t.data, x.size() * sizeof(float));
      if (st.is_ok()) st = check_batch(b, x, seen);
      (*tensor)->deleter(*tensor);  // the consumer is done with it
      if (!st.is_ok()) return fail(st);
    }
    uint64_t once = 0;
    for (int s : seen) once += s == 1;
    for (int s : seen)
      if (s > 1) return fail(internal_error("a window arrived twice"));
    if (once != windows)
      return fail(internal_error(std::to_string(once) + " windows of " + std::to_string(windows)));
  }
  std::printf("ok: %u epochs of %llu windows on %s\n", epochs,
              static_cast<unsigned long long>(windows), opt.device.c_str());
  return 0;
}
