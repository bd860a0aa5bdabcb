// gpu_copy_bench: host-to-device throughput of the device path (gpu::DevicePrefetcher from
// pinned batch columns) against plain cudaMemcpyAsync of the same bytes from pinned memory,
// and how much of the copy time hides behind a synthetic compute kernel.
//
//   gpu_copy_bench [--device cuda:0] [--batch-mib 64] [--columns 2] [--batches 200]
//                  [--depths 1,2,4] [--compute-us 0]
//
// Needs a CUDA GPU; prints why and exits 1 without one. Every figure is wall time on the
// host around a whole loop that ends in a synchronisation: bytes / seconds, in GB/s (1e9).
//
// 1. baseline: per batch, one cudaMemcpyAsync per column from pinned memory into device
//    memory on one stream, all batches queued, then the stream synchronised.
// 2. prefetcher: the same bytes as batches (columns in a pinned BufferPool, as the loader
//    collates them) through DevicePrefetcher at each depth, the consumer waiting on the
//    host for each batch's ready event.
// 3. overlap: per batch a kernel that reads the batch's first column and then spins for
//    --compute-us (0: the per-batch copy time of 2, so copy and compute are equal), on a
//    compute stream that waits for the batch's event (DeviceBatch::wait_on). Reported
//    against compute alone and copy alone: hidden = (copy + compute - both) / min(copy,
//    compute), 1.0 when the copies are completely hidden.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/pinned_pool.h"
#include "gpu/prefetcher.h"
#include "runtime/batch.h"

using namespace shardyard;
using clock_type = std::chrono::steady_clock;

namespace {

struct Args {
  std::string device = "cuda:0";
  size_t batch_mib = 64;
  size_t columns = 2;
  size_t batches = 200;
  std::vector<uint32_t> depths = {1, 2, 4};
  double compute_us = 0;
};

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "gpu_copy_bench: %s\n", why.c_str());
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) die("missing value after " + k);
    std::string v = argv[++i];
    if (k == "--device") {
      a.device = v;
    } else if (k == "--batch-mib") {
      a.batch_mib = std::stoul(v);
    } else if (k == "--columns") {
      a.columns = std::stoul(v);
    } else if (k == "--batches") {
      a.batches = std::stoul(v);
    } else if (k == "--compute-us") {
      a.compute_us = std::stod(v);
    } else if (k == "--depths") {
      a.depths.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        a.depths.push_back(static_cast<uint32_t>(std::stoul(v.substr(p, q - p))));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else {
      die("unknown option " + k);
    }
  }
  if (a.batch_mib == 0 || a.columns == 0 || a.batches == 0) die("sizes must be positive");
  return a;
}

// Reads one byte of the column (a dependence on the copy), then spins for `ns`.
__global__ void spin_kernel(const uint8_t* column, unsigned long long ns, uint8_t* sink) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  uint8_t acc = column[threadIdx.x];
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  if (threadIdx.x == 0) *sink = acc;
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// `count` distinct batches of `columns` columns in the pinned pool, 64 items each.
std::vector<Batch> make_batches(BufferPool& pool, size_t count, size_t columns, size_t col_bytes) {
  std::vector<Batch> out;
  const size_t items = 64, item_bytes = col_bytes / items;
  std::string payload(item_bytes, '\0');
  for (size_t b = 0; b < count; ++b) {
    std::vector<Item> its(items);
    for (size_t i = 0; i < items; ++i) {
      its[i].key = std::to_string(b) + "/" + std::to_string(i);
      std::memset(payload.data(), static_cast<int>(b * 31 + i), payload.size());
      for (size_t c = 0; c < columns; ++c) its[i].set_field("c" + std::to_string(c), payload);
    }
    out.push_back(build_batch(its, 0, b, 0, pool).value());
  }
  return out;
}

// Runs `n` batches through a prefetcher; `consume` gets each batch.
template <typename F>
double run_prefetcher(std::shared_ptr<gpu::DeviceMemoryPool> blocks,
                      const std::vector<Batch>& batches, size_t n, uint32_t depth, F consume) {
  size_t made = 0;
  auto p = gpu::DevicePrefetcher::start(
      blocks,
      [&]() -> Result<std::optional<Batch>> {
        if (made == n) return std::optional<Batch>();
        return std::optional<Batch>(batches[made++ % batches.size()]);
      },
      gpu::PrefetchOptions{depth});
  if (!p.is_ok()) die(p.status().to_string());
  auto t = clock_type::now();
  for (;;) {
    auto b = (*p)->next();
    if (!b.is_ok()) die(b.status().to_string());
    if (!b->has_value()) break;
    consume(**b);
  }
  return seconds_since(t);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  auto dev = gpu::open_device(a.device);
  if (!dev.is_ok()) die(dev.status().to_string());
  if ((*dev)->kind() != gpu::DeviceKind::kCuda) die(a.device + " is not a CUDA device");
  const int ordinal = (*dev)->ordinal();
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  char gpu_name[256] = "?";
  {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
      std::snprintf(gpu_name, sizeof gpu_name, "%s", prop.name);
  }
  const size_t col_bytes = (a.batch_mib << 20) / a.columns / 64 * 64;
  const double batch_bytes = static_cast<double>(col_bytes) * a.columns;
  const double total = batch_bytes * a.batches;
  std::printf("gpu_copy_bench: %s (%s), %zu batches of %.1f MiB (%zu columns), GB = 1e9 bytes\n",
              a.device.c_str(), gpu_name, a.batches, batch_bytes / (1 << 20), a.columns);

  // 1. Baseline: cudaMemcpyAsync from pinned memory, one copy per column per batch.
  std::vector<uint8_t*> host(a.columns * 4), device(a.columns * 4);
  for (auto& h : host)
    check(cudaHostAlloc(reinterpret_cast<void**>(&h), col_bytes, 0), "cudaHostAlloc");
  for (auto& d : device) check(cudaMalloc(reinterpret_cast<void**>(&d), col_bytes), "cudaMalloc");
  cudaStream_t copy;
  check(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), "cudaStreamCreate");
  auto base = [&] {
    auto t = clock_type::now();
    for (size_t b = 0; b < a.batches; ++b)
      for (size_t c = 0; c < a.columns; ++c) {
        size_t k = (b % 4) * a.columns + c;
        check(cudaMemcpyAsync(device[k], host[k], col_bytes, cudaMemcpyHostToDevice, copy),
              "cudaMemcpyAsync");
      }
    check(cudaStreamSynchronize(copy), "cudaStreamSynchronize");
    return seconds_since(t);
  };
  base();  // warm-up
  const double t_base = base();
  std::printf("\n%-44s %10s %10s\n", "copy only", "seconds", "GB/s");
  std::printf("%-44s %10.4f %10.2f\n", "cudaMemcpyAsync, pinned (baseline)", t_base,
              total / t_base / 1e9);

  // 2. The prefetcher, from pinned batch columns.
  auto pinned = gpu::pinned_buffer_pool(*dev, static_cast<size_t>(batch_bytes * 8) + (64u << 20));
  auto blocks =
      gpu::DeviceMemoryPool::create(*dev, static_cast<size_t>(batch_bytes * 8) + (64u << 20));
  const auto batches = make_batches(*pinned, 4, a.columns, col_bytes);
  std::vector<double> t_copy(a.depths.size());
  for (size_t i = 0; i < a.depths.size(); ++i) {
    auto wait_host = [](const Batch& b) {
      Status st = gpu::on_device(b)->wait(60000);
      if (!st.is_ok()) die(st.to_string());
    };
    run_prefetcher(blocks, batches, 8, a.depths[i], wait_host);  // warm-up: pools filled
    t_copy[i] = run_prefetcher(blocks, batches, a.batches, a.depths[i], wait_host);
    char label[64];
    std::snprintf(label, sizeof label, "DevicePrefetcher, depth %u", a.depths[i]);
    std::printf("%-44s %10.4f %10.2f   (%.0f%% of baseline)\n", label, t_copy[i],
                total / t_copy[i] / 1e9, 100.0 * t_base / t_copy[i]);
  }

  // 3. Overlap with a synthetic compute kernel on the trainer's stream.
  const double copy_per_batch = t_base / a.batches;
  const double compute_s = a.compute_us > 0 ? a.compute_us * 1e-6 : copy_per_batch;
  const auto ns = static_cast<unsigned long long>(compute_s * 1e9);
  cudaStream_t compute;
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
  uint8_t* sink;
  check(cudaMalloc(reinterpret_cast<void**>(&sink), 1), "cudaMalloc");
  auto t = clock_type::now();
  for (size_t b = 0; b < a.batches; ++b) spin_kernel<<<1, 32, 0, compute>>>(device[0], ns, sink);
  check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
  const double t_compute = seconds_since(t);
  std::printf("\noverlap with a %.0f us kernel per batch (compute alone: %.4f s)\n",
              compute_s * 1e6, t_compute);
  std::printf("%-12s %10s %10s %10s\n", "depth", "seconds", "GB/s", "hidden");
  for (size_t i = 0; i < a.depths.size(); ++i) {
    auto launch = [&](const Batch& b) {
      const gpu::DeviceBatch* d = gpu::on_device(b);
      Status st = d->wait_on(compute);
      if (!st.is_ok()) die(st.to_string());
      spin_kernel<<<1, 32, 0, compute>>>(d->columns()[0].data, ns, sink);
      check(cudaGetLastError(), "spin_kernel launch");
    };  // the batch is dropped at once: its block is fenced by the compute stream
    run_prefetcher(blocks, batches, 8, a.depths[i], launch);
    check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    auto t0 = clock_type::now();
    run_prefetcher(blocks, batches, a.batches, a.depths[i], launch);
    check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    const double both = seconds_since(t0);
    const double hidden = (t_copy[i] + t_compute - both) / std::min(t_copy[i], t_compute);
    std::printf("%-12u %10.4f %10.2f %9.0f%%\n", a.depths[i], both, total / both / 1e9,
                100.0 * hidden);
  }
  std::printf(
      "\n(hidden: the share of the shorter of copy and compute that ran under the other;"
      " 100%% = fully overlapped)\n");
  return 0;
}
