// A climate-style trainer loop over time-series windows (docs/windows.md), through the public
// API only (<shardyard/loader.h>). It writes its own dataset: one raw file per month of a
// (non-leap) year, `2023-01.bin` .. `2023-12.bin`, hourly records of 8 float32 channels
// (32 bytes), where channel 0 holds the month (1-12) and channel 1 the record's index in
// its file, so that every window can be checked. It then loads weekly windows with a
// target a day ahead (--windows 168:24:24 by default), broadcast dispatch (the dispatcher
// loads whole months, prefetching one ahead; the workers take their part of each month's
// windows), and for every epoch checks that
//   - every window arrives exactly once (its key `2023-MM.bin@<first record>` names it),
//   - x holds records first .. first+LENGTH-1 and y the record TARGET steps after the last,
//     decoded from the bytes; with --stitch a month's last windows continue into the next
//     month's first records,
// and it prints how much the peak RSS (getrusage ru_maxrss) grew while loading, in months:
// broadcast holds the month in use plus the prefetched one, about two months. With months
// of at least 16 MiB (--month-mib) that growth is checked against three months (one for
// slack: per-window metadata, batches, allocator) plus 64 MiB of fixed cost (threads,
// pools). Exits 1 on any failed check.
//
//   climate [--ranks 2] [--workers 4] [--stitch] [--month-mib 64] [--epochs 2] [--dir DIR]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <shardyard/loader.h>

using namespace shardyard;

namespace {

constexpr uint32_t kChannels = 8;
constexpr uint64_t kRecordBytes = kChannels * sizeof(float);
constexpr uint32_t kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

struct Args {
  uint32_t ranks = 1, workers = 4, epochs = 2, batch_size = 32;
  uint64_t month_mib = 0;  // 0: the real month, 24 records a day
  bool stitch = false;
  std::string windows = "168:24:24", dir;
};

long peak_rss_kb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

std::string month_name(uint32_t m) {  // m in 1..12
  char buf[16];
  std::snprintf(buf, sizeof(buf), "2023-%02u.bin", m);
  return buf;
}

// Records of month m: its hours, or as many as --month-mib asks (rounded to whole days).
uint64_t month_records(const Args& a, uint32_t m) {
  uint64_t hours = kDays[m - 1] * 24ull;
  if (a.month_mib == 0) return hours;
  uint64_t scale = std::max<uint64_t>(1, (a.month_mib << 20) / (31 * 24 * kRecordBytes));
  return hours * scale;
}

Status write_month(const Args& a, uint32_t m, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  std::vector<float> rec(kChannels);
  std::vector<char> block;
  const uint64_t n = month_records(a, m);
  block.reserve(4096 * kRecordBytes);
  for (uint64_t i = 0; i < n; ++i) {
    rec[0] = static_cast<float>(m);
    rec[1] = static_cast<float>(i);  // exact below 2^24 records (512 MiB a month)
    for (uint32_t c = 2; c < kChannels; ++c) rec[c] = static_cast<float>(i % 997) + 0.25f * c;
    const char* p = reinterpret_cast<const char*>(rec.data());
    block.insert(block.end(), p, p + kRecordBytes);
    if (block.size() >= 4096 * kRecordBytes || i + 1 == n) {
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
      block.clear();
    }
  }
  out.close();
  if (!out) return io_error("cannot write " + path);
  return Status::ok();
}

// The windows the loader must deliver, from a brute-force walk over the starts (independent
// of the library's window math): month m's windows are indices first[m] .. first[m + 1] - 1,
// the k-th starting at record k * stride.
struct Expected {
  std::vector<uint64_t> first = std::vector<uint64_t>(14, 0);  // by month 1..13
  uint64_t total() const { return first[13]; }
  // The index of window `key`, or -1 when no such window should exist.
  int64_t index(uint32_t month, uint64_t start, uint64_t stride) const {
    if (month < 1 || month > 12 || start % stride != 0) return -1;
    const uint64_t i = first[month] + start / stride;
    return i < first[month + 1] ? static_cast<int64_t>(i) : -1;
  }
};
Expected expected_windows(const Args& a, const WindowSpec& spec) {
  Expected e;
  for (uint32_t m = 1; m <= 12; ++m) {
    const uint64_t records = month_records(a, m);
    const uint64_t next = spec.stitch && m < 12 ? month_records(a, m + 1) : 0;
    uint64_t n = 0;
    for (uint64_t s = 0; s < records && s + spec.span() <= records + next; s += spec.stride) ++n;
    e.first[m + 1] = e.first[m] + n;
  }
  return e;
}

// Checks one record's bytes: month m (or the next month past its end, when stitched) and
// index i counted from the start of month m.
bool record_ok(const Args& a, const uint8_t* bytes, uint32_t m, uint64_t i) {
  float ch[kChannels];
  std::memcpy(ch, bytes, kRecordBytes);
  const uint64_t records = month_records(a, m);
  if (i >= records) {
    ++m;
    i -= records;
  }
  return ch[0] == static_cast<float>(m) && ch[1] == static_cast<float>(i);
}

// What one rank saw in one epoch: how often each expected window arrived (allocated before
// the loader starts, so that it does not count as the loader's memory).
struct RankLog {
  std::vector<uint8_t> arrived;
  uint64_t bad_bytes = 0, stitched = 0;
  std::string first_bad, unknown;
};

Status run_rank(Loader& loader, const Args& a, const WindowSpec& spec, const Expected& expected,
                uint32_t epoch, RankLog* log) {
  SY_RETURN_IF_ERROR(loader.start_epoch(epoch));
  for (;;) {
    SY_ASSIGN_OR_RETURN(auto batch, loader.next());
    if (!batch) return Status::ok();
    const Batch& b = *batch;
    if (b.size() == 0) continue;  // a rank with fewer windows than steps
    const Column* x = b.field("x");
    const Column* y = b.field("y");
    if (x == nullptr || y == nullptr || x->fixed_size() != int64_t(spec.length * kRecordBytes) ||
        y->fixed_size() != int64_t(kRecordBytes))
      return internal_error("the batch's columns are not x [B, LENGTH * 32] and y [B, 32]");
    for (size_t i = 0; i < b.size(); ++i) {
      // "2023-MM.bin@first": x and y are contiguous fixed-size rows of the batch.
      const std::string& key = b.keys()[i];
      const auto month = static_cast<uint32_t>(std::stoul(key.substr(5, 2)));
      const uint64_t first = std::stoull(key.substr(key.find('@') + 1));
      const int64_t index = expected.index(month, first, spec.stride);
      if (index < 0 || key != month_name(month) + "@" + std::to_string(first)) {
        if (log->unknown.empty()) log->unknown = key;
        continue;
      }
      if (log->arrived[index] < 255) ++log->arrived[index];
      const uint8_t* xr = x->data() + i * spec.length * kRecordBytes;
      const uint8_t* yr = y->data() + i * kRecordBytes;
      bool ok = record_ok(a, yr, month, first + spec.length - 1 + spec.target);
      for (uint64_t j = 0; j < spec.length && ok; ++j)
        ok = record_ok(a, xr + j * kRecordBytes, month, first + j);
      if (first + spec.span() > month_records(a, month)) ++log->stitched;
      if (!ok && log->bad_bytes++ == 0) log->first_bad = key;
    }
  }
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "climate: FAILED: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (flag == "--ranks") {
      a.ranks = static_cast<uint32_t>(std::stoul(value()));
    } else if (flag == "--workers") {
      a.workers = static_cast<uint32_t>(std::stoul(value()));
    } else if (flag == "--epochs") {
      a.epochs = static_cast<uint32_t>(std::stoul(value()));
    } else if (flag == "--batch-size") {
      a.batch_size = static_cast<uint32_t>(std::stoul(value()));
    } else if (flag == "--month-mib") {
      a.month_mib = std::stoull(value());
    } else if (flag == "--windows") {
      a.windows = value();
    } else if (flag == "--stitch") {
      a.stitch = true;
    } else if (flag == "--dir") {
      a.dir = value();
    } else {
      return fail("unknown flag " + flag);
    }
  }
  // The dataset, in a temporary folder unless --dir names one.
  const bool own_dir = a.dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/shardyard-climate.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return fail("cannot create a temporary folder");
    a.dir = tmpl;
  }
  std::filesystem::create_directories(a.dir);
  uint64_t month_bytes = 0;
  for (uint32_t m = 1; m <= 12; ++m) {
    if (Status st = write_month(a, m, a.dir + "/" + month_name(m)); !st.is_ok())
      return fail(st.to_string());
    month_bytes = std::max(month_bytes, month_records(a, m) * kRecordBytes);
  }

  LoaderOptions opt;
  opt.sources = {a.dir + "/2023-{01..12}.bin"};
  WindowSpec base;
  base.record_bytes = kRecordBytes;
  base.stitch = a.stitch;
  auto spec = parse_window_spec(a.windows, base);
  if (!spec.is_ok()) return fail(spec.status().to_string());
  opt.windows = *spec;
  opt.world_size = a.ranks;
  opt.workers = a.workers;
  opt.batch_size = a.batch_size;
  opt.plan.shuffle = true;
  opt.plan.seed = 1979;
  opt.dispatch = Dispatch::kBroadcast;
  opt.prefetch_shards = 1;
  const Expected expected = expected_windows(a, *spec);
  std::vector<RankLog> logs(a.ranks);
  for (auto& l : logs) l.arrived.assign(expected.total(), 0);

  const long rss_before = peak_rss_kb();
  std::vector<uint32_t> ranks(a.ranks);
  for (uint32_t r = 0; r < a.ranks; ++r) ranks[r] = r;
  // Several ranks of one job in this process, as `shardyard run --ranks R` hosts them.
  auto cluster = Cluster::start(opt, ranks);
  if (!cluster.is_ok()) return fail(cluster.status().to_string());
  std::vector<std::unique_ptr<Loader>> loaders;
  for (uint32_t r = 0; r < a.ranks; ++r) {
    auto l = (*cluster)->loader(r);
    if (!l.is_ok()) return fail(l.status().to_string());
    loaders.push_back(std::move(l).value());
  }
  if ((*cluster)->manifest().num_samples() != expected.total())
    return fail("the manifest has " + std::to_string((*cluster)->manifest().num_samples()) +
                " windows, expected " + std::to_string(expected.total()));

  uint64_t stitched = 0;
  for (uint32_t epoch = 0; epoch < a.epochs; ++epoch) {
    std::vector<Status> status(a.ranks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < a.ranks; ++r) {
      std::fill(logs[r].arrived.begin(), logs[r].arrived.end(), 0);
      threads.emplace_back(
          [&, r] { status[r] = run_rank(*loaders[r], a, *spec, expected, epoch, &logs[r]); });
    }
    for (auto& t : threads) t.join();
    const std::string at = "epoch " + std::to_string(epoch) + ": ";
    for (uint32_t r = 0; r < a.ranks; ++r) {
      if (!status[r].is_ok())
        return fail(at + "rank " + std::to_string(r) + ": " + status[r].to_string());
      if (!logs[r].unknown.empty()) return fail(at + "unexpected window " + logs[r].unknown);
      if (logs[r].bad_bytes > 0)
        return fail(at + std::to_string(logs[r].bad_bytes) + " windows with wrong bytes, first " +
                    logs[r].first_bad);
      stitched += logs[r].stitched;
    }
    for (uint64_t i = 0; i < expected.total(); ++i) {
      uint32_t n = 0;
      for (const auto& l : logs) n += l.arrived[i];
      if (n != 1)
        return fail(at + "window " + std::to_string(i) + " (in canonical order) arrived " +
                    std::to_string(n) + " times");
    }
  }
  if (Status st = (*cluster)->shutdown(); !st.is_ok()) return fail(st.to_string());
  const long growth_kb = peak_rss_kb() - rss_before;
  if (a.stitch && stitched == 0) return fail("--stitch, but no window crossed into the next month");

  const double months = growth_kb * 1024.0 / static_cast<double>(month_bytes);
  std::printf(
      "climate: %u ranks x %u workers, broadcast, prefetch 1 month, windows %s%s over 12 months "
      "of %.2f MiB\n",
      a.ranks, a.workers, a.windows.c_str(), a.stitch ? " stitched" : "", month_bytes / 1048576.0);
  std::printf(
      "  %u epochs x %zu windows, each exactly once, x and y bytes checked; %llu stitched\n",
      a.epochs, static_cast<size_t>(expected.total()), static_cast<unsigned long long>(stitched));
  std::printf("  peak RSS grew %.1f MiB while loading (%.2f months)\n", growth_kb / 1024.0, months);
  if (a.month_mib >= 16 && growth_kb * 1024.0 > 3.0 * month_bytes + (64 << 20))
    return fail("peak RSS grew by more than 3 months + 64 MiB");
  if (own_dir) std::filesystem::remove_all(a.dir);
  std::printf("ok\n");
  return 0;
}
