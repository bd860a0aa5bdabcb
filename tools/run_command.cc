// `shardyard run`: loads a dataset end to end with R ranks in this process and prints a
// JSON summary as the last line of stdout (the contract acceptance checks rely on).
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "actors/loader.h"
#include "cli_values.h"
#include "commands.h"
#include "device_check.h"
#include "dump_keys.h"
#include "io/persist/checkpoint_store.h"
#include "io/remote/http_client.h"
#include "json_text.h"
#include "run_stop.h"
#include "runtime/checkpoint.h"

namespace shardyard::tools {

namespace {

struct RunArgs {
  std::vector<std::string> sources;
  uint32_t ranks = 0, workers = 2, batch_size = 64, epochs = 1;  // ranks 0: not given
  // One rank of a job of several processes (docs/multi-process.md); each overrides what
  // the launcher's variables say.
  std::optional<uint32_t> rank, world_size;
  std::string coordinator, token_file;
  std::string seed = "0";  // parsed strictly (tools/cli_values.h)
  std::string max_sample_bytes;
  std::string read_into_batch;
  uint32_t logical_shards = 0, chunk_items = 0, prefetch_batches = 2, prefetch_packets = 0;
  bool prefetch_eager = false;
  bool shuffle = false, drop_last = false, json = false, no_cache = false, strict = false;
  std::string order = "exact", on_corrupt = "fail", dump_dir, cache_dir;
  std::string distributed_strategy = "strided", worker_strategy = "strided";
  std::vector<std::string> maps;
  std::string checkpoint_dir, resume_dir;
  std::string dispatch = "none";
  std::string placement = "inproc", worker_binary;
  uint32_t max_worker_restarts = 3;
  uint64_t shm_arena_mb = 0;
  uint32_t prefetch_sources = 1;
  std::string route_key;
  uint64_t stop_after_steps = 0, checkpoint_every = 0;
  std::string windows;  // "LENGTH:STRIDE[:TARGET]"; empty: the sources are tar shards
  uint64_t record_bytes = 0;
  bool record_bytes_given = false, stitch = false;
  std::string device;  // empty: batches stay in host memory
  uint32_t device_prefetch = 2;
  bool check_device = false;
  int32_t metrics_port = -1;  // -1: SHARDYARD_METRICS_PORT, else not served
  std::string metrics_address;
};

struct RankResult {
  uint64_t samples = 0, bytes = 0, batches = 0;
  uint64_t steps_per_epoch = 0;
  uint64_t checkpoints = 0;
  std::vector<double> save_ms;
  uint64_t generation = 0;
  std::optional<ResumePoint> resumed;
  // Where the last batch delivered ends: its epoch and the number of batches of that epoch
  // delivered so far (the step a checkpoint saved now records).
  uint32_t epoch = 0;
  uint64_t epoch_steps = 0;
  bool saved_at_stop = false;  // saved a checkpoint at the stop point (SIGTERM)
  // When the trainer loop got its first batch (none: it got none).
  std::optional<std::chrono::steady_clock::time_point> first_batch;
  Status status;
};

// What the rank threads share: how the run stops, and progress for the bar.
struct RunControl {
  explicit RunControl(uint32_t ranks) : point(ranks), barrier(ranks) {}
  std::atomic<bool> stop{false};  // end now: an error, or a signal without a checkpoint
  StopPoint point;                // SIGTERM with --checkpoint-dir: stop here and save
  RankBarrier barrier;
  std::atomic<uint64_t> progress{0};
};

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

// The peak RSS of this process (its worker processes': ended_worker_process_usage()).
long peak_rss_kb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// User + system CPU seconds of this process (its worker processes':
// ended_worker_process_usage()).
double cpu_seconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

// Runs one rank's trainer loop; writes its --dump-keys file.
void run_rank(Cluster& cluster, uint32_t rank, uint32_t slot, const RunArgs& args, RunControl& ctl,
              RankResult* out) {
  auto loader = cluster.loader(rank);
  if (!loader.is_ok()) {
    out->status = loader.status();
    return;
  }
  DumpWriter dump;
  if (!args.dump_dir.empty()) {
    out->status = dump.open(args.dump_dir, rank);
    if (!out->status.is_ok()) return;
  }
  Loader& l = **loader;
  uint64_t steps_this_run = 0, saved_at = UINT64_MAX;
  auto save = [&]() -> Status {
    // Every rank saves at this step; a run stopped meanwhile saves nothing.
    if (!ctl.barrier.arrive_and_wait(ctl.stop))
      return cancelled("the run stopped before rank " + std::to_string(rank) + " saved");
    auto t = std::chrono::steady_clock::now();
    Status st = l.save(args.checkpoint_dir);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    out->save_ms.push_back(ms);
    ++out->checkpoints;
    saved_at = steps_this_run;
    return st;
  };
  uint32_t first_epoch = 0;
  if (!args.resume_dir.empty()) {
    auto point = l.restore(args.resume_dir);
    if (!point.is_ok()) {
      out->status = point.status();
      return;
    }
    out->resumed = *point;
    first_epoch = point->epoch;
  }
  for (uint32_t epoch = first_epoch; epoch < args.epochs && !ctl.stop; ++epoch) {
    out->status = l.start_epoch(epoch);
    if (!out->status.is_ok()) return;
    out->steps_per_epoch = l.steps_per_epoch();
    for (;;) {
      if (ctl.stop) return;
      if (args.stop_after_steps > 0 && steps_this_run == args.stop_after_steps) break;
      if (!ctl.point.claim(slot)) {
        // The stop point of a SIGTERM with --checkpoint-dir: every rank stands here.
        if (saved_at != steps_this_run) out->status = save();
        out->saved_at_stop = out->status.is_ok() && saved_at == steps_this_run;
        return;
      }
      auto batch = l.next();
      if (!batch.is_ok()) {
        out->status = batch.status();
        return;
      }
      if (!batch->has_value()) {
        ctl.point.unclaim(slot);
        break;
      }
      ++steps_this_run;
      if (!out->first_batch) out->first_batch = std::chrono::steady_clock::now();
      const Batch& b = **batch;
      if (!args.device.empty()) {
        out->status = consume_on_device(b, args.check_device);
        if (!out->status.is_ok()) return;
      }
      ++out->batches;
      out->samples += b.size();
      out->bytes += b.payload_bytes();
      out->epoch = b.epoch();
      out->epoch_steps = b.step() + 1;
      ctl.progress += b.size();
      out->status = dump.add(b);
      if (!out->status.is_ok()) return;
      if (args.checkpoint_every > 0 && steps_this_run % args.checkpoint_every == 0) {
        out->status = save();
        if (!out->status.is_ok()) return;
      }
    }
    // --checkpoint-dir saves at the end of every epoch, or, with --stop-after-steps, once
    // after that many steps of the first epoch run here (then the run ends).
    if (!args.checkpoint_dir.empty() && saved_at != steps_this_run) {
      out->status = save();
      if (!out->status.is_ok()) return;
    }
    if (args.stop_after_steps > 0) break;
  }
  out->status = dump.close();
}

// --resume auto (what a restarted job runs: tools/shardyard-launch --max-restarts): the
// checkpoint committed in --checkpoint-dir when there is one, else nothing (a fresh start).
// Every rank of a job looks at the same directory before any of them saves again, so all
// decide alike.
Result<std::string> auto_resume_dir(const std::string& checkpoint_dir, Env* env) {
  if (checkpoint_dir.empty())
    return invalid_argument(
        "--resume auto needs --checkpoint-dir (where to look for a checkpoint)");
  FileSystem* fs = (env != nullptr ? env : Env::Default())->file_system();
  auto found = fs->stat(checkpoint_dir + "/" + kCheckpointManifestName);
  if (found.is_ok()) {
    std::fprintf(stderr, "shardyard: --resume auto: resuming from the checkpoint in %s\n",
                 checkpoint_dir.c_str());
    return checkpoint_dir;
  }
  if (found.status().code() != StatusCode::kNotFound) return found.status();
  std::fprintf(stderr, "shardyard: --resume auto: no checkpoint in %s yet: starting fresh\n",
               checkpoint_dir.c_str());
  return std::string();
}

int run(RunArgs args, Env* env) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const double cpu0 = cpu_seconds(), children_cpu0 = ended_worker_process_usage().cpu_seconds;
  // Worker processes forked from a server forked now, while this process has one thread,
  // start without an exec (docs/worker-processes.md, "How a worker process starts");
  // SHARDYARD_WORKER_FORK_SERVER=0 starts the program again for each one instead. The
  // server and its workers keep SIGINT and SIGTERM blocked, as a worker started from a
  // thread of this process does (StopSignals below): a stop is the rank's to make.
  if (args.placement == "local" && args.worker_binary.empty()) {
    const char* off = std::getenv("SHARDYARD_WORKER_FORK_SERVER");
    if (off == nullptr || std::string(off) != "0") {
      sigset_t stops, before;
      sigemptyset(&stops);
      sigaddset(&stops, SIGINT);
      sigaddset(&stops, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &stops, &before);
      Status started = start_worker_fork_server();
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      if (!started.is_ok())
        print_warning(started.message() + "; worker processes start the program again");
    }
  }
  // First, before any thread starts (tools/run_stop.h). A signal during startup (the
  // manifest scan) ends the process at once: nothing was delivered.
  StopSignals signals([](int sig) {
    std::fprintf(stderr, "shardyard: %s during startup: stopped before any batch was delivered\n",
                 signal_name(sig));
    std::cout << nlohmann::json{{"samples", 0},
                                {"bytes", 0},
                                {"batches", 0},
                                {"interrupted", signal_name(sig)}}
                     .dump()
              << std::endl;
  });
  auto seed = parse_u64("--seed", args.seed);
  if (!seed.is_ok()) {
    print_error(seed.status().message());
    return 2;
  }
  LoaderOptions opt;
  opt.env = env;
  opt.sources = args.sources;
  // --ranks R: a whole job of R ranks in this process. Without it, one rank of a job that
  // the launcher's variables (or --rank, --world-size, --coordinator) describe.
  std::vector<uint32_t> hosted;
  if (args.ranks > 0) {
    if (args.rank || args.world_size || !args.coordinator.empty()) {
      print_error(
          "--ranks runs a whole job in this process; --rank, --world-size and "
          "--coordinator make this process one rank of a job of several");
      return 2;
    }
    opt.world_size = args.ranks;
    for (uint32_t r = 0; r < args.ranks; ++r) hosted.push_back(r);
  } else {
    Status st = opt.topology_from_env();
    if (!st.is_ok()) {
      print_error(st.message());
      return 2;
    }
    if (args.world_size) opt.world_size = *args.world_size;
    if (args.rank) opt.rank = *args.rank;
    if (!args.coordinator.empty()) {
      opt.coordinator = args.coordinator;
      opt.rendezvous_file.clear();
      // Given by hand: rank 0 listens there unless a launcher runs the coordinator.
      const char* external = std::getenv("SHARDYARD_COORDINATOR_EXTERNAL");
      opt.host_coordinator = opt.rank == 0 && (external == nullptr || std::string(external) == "0");
    }
    if (!args.token_file.empty()) {
      opt.token_file = args.token_file;
      opt.token.clear();
    }
    if (opt.rank >= opt.world_size) {
      print_error("rank " + std::to_string(opt.rank) + " is outside a world of " +
                  std::to_string(opt.world_size));
      return 2;
    }
    hosted.push_back(opt.rank);
  }
  const uint32_t here = static_cast<uint32_t>(hosted.size());
  opt.workers = args.workers;
  opt.batch_size = args.batch_size;
  opt.plan.seed = *seed;
  opt.plan.shuffle = args.shuffle;
  opt.plan.drop_last = args.drop_last;
  opt.plan.logical_shards = args.logical_shards;
  opt.plan.chunk_items = args.chunk_items;
  opt.plan.distributed_strategy = args.distributed_strategy;
  opt.plan.worker_strategy = args.worker_strategy;
  opt.order = args.order == "as_completed" ? Order::kAsCompleted : Order::kExact;
  opt.on_corrupt = args.on_corrupt == "skip" ? OnCorrupt::kSkip : OnCorrupt::kFail;
  opt.strict_members = args.strict;
  opt.prefetch_batches = args.prefetch_batches;
  opt.prefetch_eager = args.prefetch_eager;
  opt.prefetch_packets = args.prefetch_packets;  // 0: chosen from the job
  if (!args.max_sample_bytes.empty()) {
    auto max = parse_byte_size("--max-sample-bytes", args.max_sample_bytes);
    if (!max.is_ok()) {
      print_error(max.status().message());
      return 2;
    }
    opt.max_sample_bytes = *max;
  }
  if (!args.read_into_batch.empty()) {
    auto bytes = args.read_into_batch == "0"
                     ? Result<uint64_t>(uint64_t{0})
                     : parse_byte_size("--read-into-batch", args.read_into_batch);
    if (!bytes.is_ok()) {
      print_error(bytes.status().message());
      return 2;
    }
    opt.read_into_batch_bytes = *bytes;
  }
  opt.use_manifest_cache = !args.no_cache;
  opt.cache_dir = args.cache_dir;
  opt.device = args.device;
  opt.device_prefetch = args.device_prefetch;
  if (Status st = opt.monitor_from_env(); !st.is_ok()) {
    print_error(st.message());
    return 2;
  }
  if (args.metrics_port >= 0) opt.metrics_port = args.metrics_port;
  if (!args.metrics_address.empty()) opt.metrics_address = args.metrics_address;
  if (args.check_device && args.device.empty()) {
    print_error("--check-device needs --device");
    return 2;
  }
  // --map [once/|post/]TYPE[:k=v;...]: once/ marks a non-replicable stage, post/ puts the
  // stage (and every later one) after the merge point, in the loader.
  for (const auto& m : args.maps) {
    std::string text = m;
    bool once = false, post = false;
    if (text.rfind("once/", 0) == 0) {
      once = true;
      text = text.substr(5);
    } else if (text.rfind("post/", 0) == 0) {
      post = true;
      text = text.substr(5);
    }
    auto s = parse_stage(text);
    if (!s.is_ok()) {
      print_error(s.status().message());
      return 2;
    }
    if (post) opt.pipeline.merge();
    if (once) {
      opt.pipeline.once(s->type, s->params);
    } else {
      opt.pipeline.map(s->type, s->params);
    }
  }
  auto dispatch = parse_dispatch(args.dispatch);
  if (!dispatch.is_ok()) {
    print_error(dispatch.status().message());
    return 2;
  }
  opt.dispatch = *dispatch;
  opt.prefetch_shards = args.prefetch_sources;
  auto placement = parse_worker_placement(args.placement);
  if (!placement.is_ok()) {
    print_error(placement.status().message());
    return 2;
  }
  opt.placement = *placement;
  opt.worker_binary = args.worker_binary;
  opt.max_worker_restarts = args.max_worker_restarts;
  opt.shm_arena_bytes = args.shm_arena_mb << 20;
  opt.route_key_field = args.route_key;
  if (args.windows.empty() != !args.record_bytes_given) {
    print_error(args.windows.empty() ? "--record-bytes needs --windows LENGTH:STRIDE[:TARGET]"
                                     : "--windows needs --record-bytes N (bytes per record)");
    return 2;
  }
  if (args.stitch && args.windows.empty()) {
    print_error("--stitch needs --windows and --record-bytes");
    return 2;
  }
  if (!args.windows.empty()) {
    WindowSpec base;
    base.record_bytes = args.record_bytes;
    base.stitch = args.stitch;
    auto spec = parse_window_spec(args.windows, base);
    if (!spec.is_ok()) {
      print_error(spec.status().message());
      return 2;
    }
    // Values (LENGTH, STRIDE, record bytes 0) are bad input, refused like a bad file.
    Status valid = validate_window_spec(*spec);
    if (!valid.is_ok()) {
      print_error(valid.to_string());
      return 1;
    }
    opt.windows = *spec;
  }
  if (!args.checkpoint_dir.empty() && args.order == "as_completed" &&
      resolve_dispatch(opt.pipeline, opt.dispatch) != Dispatch::kNone) {
    print_error(
        "--checkpoint-dir needs --order exact when a dispatcher routes items: with "
        "as_completed the consumed items of a logical shard are not a prefix of its order");
    return 2;
  }
  if (args.stop_after_steps > 0 && args.checkpoint_dir.empty()) {
    print_error("--stop-after-steps needs --checkpoint-dir (where to save before stopping)");
    return 2;
  }
  if (args.resume_dir == "auto") {
    auto dir = auto_resume_dir(args.checkpoint_dir, env);
    if (!dir.is_ok()) {
      print_error(dir.status().to_string());
      return dir.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    args.resume_dir = *dir;
  }
  // A checkpoint fixes the shuffle block of its job. Resuming one without --chunk-items takes
  // the block it was saved with (a value given then, or the default of the binary that saved
  // it), so a changed default does not strand checkpoints; a different --chunk-items is still
  // refused by restore(). A checkpoint that cannot be read is left to restore() to report.
  if (!args.resume_dir.empty() && args.chunk_items == 0) {
    FileSystem* fs = (env != nullptr ? env : Env::Default())->file_system();
    auto saved = io::load_checkpoint(*fs, args.resume_dir);
    if (saved.is_ok()) opt.plan.chunk_items = saved->manifest.job.chunk_items;
  }
  if (!args.dump_dir.empty()) {
    // Files of ranks beyond the world are an earlier run's; the other ranks' are theirs.
    Status st = prepare_dump_dir(args.dump_dir, opt.world_size);
    if (!st.is_ok()) {
      print_error(st.message());
      return 1;
    }
  }

  auto cluster = Cluster::start(opt, hosted);
  if (!cluster.is_ok()) {
    print_error(cluster.status().to_string());
    return 1;
  }
  if (const uint16_t port = (*cluster)->monitor_port(); port > 0)
    std::fprintf(stderr, "shardyard: monitor: http://%s:%u/metrics and /status\n",
                 opt.metrics_address.c_str(), port);
  const auto& report = (*cluster)->scan_report();
  for (const auto& w : report.skipped) print_warning("skipped: " + w);
  for (const auto& w : report.warnings) print_warning(w);
  auto t_loaded = clock::now();

  RunControl ctl(here);
  // SIGINT, and SIGTERM without --checkpoint-dir: stop now; a next() waiting for data gives
  // up. SIGTERM with --checkpoint-dir (a cluster about to preempt the job): every rank stops
  // at one step and saves there, so a resume delivers every sample exactly once.
  // (Across processes the ranks would each stop at a step of their own; there SIGTERM stops
  // without a new checkpoint, and the last committed one stays the latest.)
  const bool save_on_term = !args.checkpoint_dir.empty() && here == opt.world_size;
  Cluster& c = **cluster;
  signals.on_signal([&ctl, &c, save_on_term](int sig) {
    const bool save = sig == SIGTERM && save_on_term;
    std::fprintf(stderr, "\nshardyard: %s: stopping%s (a second signal ends the process now)\n",
                 signal_name(sig), save ? " at the next common step to save a checkpoint" : "");
    if (save) {
      ctl.point.request();
    } else {
      ctl.stop = true;
      c.interrupt();
      io::cancel_transfers();  // no worker waits on a slow server
    }
  });

  std::atomic<bool> finished{false};
  const bool bar = !args.json && isatty(STDERR_FILENO);
  const uint64_t expected = (*cluster)->manifest().num_samples() * args.epochs;
  std::thread progress_thread;
  if (bar) {
    progress_thread = std::thread([&] {
      while (!finished) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        double s = std::chrono::duration<double>(clock::now() - t_loaded).count();
        uint64_t p = ctl.progress;
        int width = 30,
            fill = expected ? static_cast<int>(width * std::min<double>(1.0, double(p) / expected))
                            : 0;
        std::fprintf(stderr, "\r[%s%s] %3.0f%% %llu/%llu samples %.0f/s ",
                     std::string(fill, '#').c_str(), std::string(width - fill, ' ').c_str(),
                     expected ? 100.0 * p / expected : 0.0, static_cast<unsigned long long>(p),
                     static_cast<unsigned long long>(expected), s > 0 ? p / s : 0.0);
      }
      std::fprintf(stderr, "\n");
    });
  }

  std::vector<RankResult> results(here);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < here; ++i)
    threads.emplace_back([&, i] {
      run_rank(c, hosted[i], i, args, ctl, &results[i]);
      if (!results[i].status.is_ok()) ctl.stop = true;
    });
  for (auto& t : threads) t.join();
  signals.on_signal([](int) {});  // the run is over: a late signal changes nothing
  auto t_end = clock::now();
  finished = true;
  const uint16_t metrics_port = (*cluster)->monitor_port();
  if (progress_thread.joinable()) progress_thread.join();
  Status st = (*cluster)->shutdown();

  for (const auto& r : results)
    if (!r.status.is_ok() && r.status.code() != StatusCode::kCancelled) {
      print_error(r.status.to_string());
      return 1;
    }
  if (!st.is_ok()) {
    print_error(st.to_string());
    return 1;
  }

  RankResult total;
  for (const auto& r : results) {
    total.samples += r.samples;
    total.bytes += r.bytes;
    total.batches += r.batches;
  }
  double seconds = std::chrono::duration<double>(t_end - t_loaded).count();
  nlohmann::json j;
  j["samples"] = total.samples;
  j["bytes"] = total.bytes;
  j["batches"] = total.batches;
  j["epochs"] = args.epochs;
  j["seconds"] = seconds;
  j["samples_per_s"] = seconds > 0 ? total.samples / seconds : 0.0;
  j["mb_per_s"] = seconds > 0 ? total.bytes / seconds / 1e6 : 0.0;
  j["corrupt_skipped"] = (*cluster)->manifest().num_damaged();
  j["members_skipped"] = (*cluster)->manifest().members_skipped();
  j["ranks"] = here;
  if (args.ranks == 0) {
    j["rank"] = opt.rank;
    j["world_size"] = opt.world_size;
  }
  j["workers"] = args.workers;
  j["batch_size"] = args.batch_size;
  j["logical_shards"] = (*cluster)->logical_shards();
  j["prefetch_packets"] = (*cluster)->prefetch_packets();
  j["dispatch"] = dispatch_name(resolve_dispatch(opt.pipeline, opt.dispatch));
  j["placement"] = worker_placement_name(opt.placement);
  j["worker_restarts"] = (*cluster)->worker_restarts();
  j["steps_per_epoch"] = results.empty() ? 0 : results[0].steps_per_epoch;
  j["sources"] = (*cluster)->manifest().sources.size();
  j["fingerprint"] = (*cluster)->manifest().fingerprint_hex();
  j["manifest_cached"] = report.from_cache;
  j["manifest_seconds"] = std::chrono::duration<double>(t_loaded - t0).count();
  j["total_seconds"] = std::chrono::duration<double>(t_end - t0).count();
  // From the command's start to the first batch any hosted rank's trainer loop got: the
  // manifest's load or scan, the start of the roles and the first batch's reads.
  std::optional<clock::time_point> first;
  for (const auto& r : results)
    if (r.first_batch && (!first || *r.first_batch < *first)) first = r.first_batch;
  j["first_batch_seconds"] =
      first ? nlohmann::json(std::chrono::duration<double>(*first - t0).count()) : nlohmann::json();
  // The worker processes are gone by now (shutdown() waited for them, replaced ones
  // included).
  const auto ended = ended_worker_process_usage();
  const double worker_cpu = ended.cpu_seconds - children_cpu0;
  j["cpu_seconds"] = cpu_seconds() - cpu0 + worker_cpu;
  j["worker_process_cpu_seconds"] = worker_cpu;
  j["peak_rss_kb"] = peak_rss_kb();
  j["worker_process_peak_rss_kb"] =
      opt.placement == WorkerPlacement::kLocal ? ended.peak_rss_kb : 0;
  if (!args.device.empty()) j["device"] = args.device;
  if (opt.metrics_port >= 0) j["metrics_port"] = metrics_port;
  if (!args.checkpoint_dir.empty()) {
    std::vector<double> all;
    for (const auto& r : results) all.insert(all.end(), r.save_ms.begin(), r.save_ms.end());
    std::sort(all.begin(), all.end());
    j["checkpoint"] = {{"dir", json_text(args.checkpoint_dir)},
                       {"saves", results.empty() ? 0 : results[0].checkpoints},
                       {"median_save_ms", all.empty() ? 0.0 : all[all.size() / 2]},
                       {"max_save_ms", all.empty() ? 0.0 : all.back()}};
  }
  if (!results.empty() && results[0].resumed) {
    const auto& p = *results[0].resumed;
    j["resumed"] = {{"epoch", p.epoch},
                    {"step", p.step},
                    {"generation", p.generation},
                    {"rescaled", p.rescaled}};
  }
  const int sig = signals.received();
  if (sig != 0) {
    j["interrupted"] = signal_name(sig);
    const bool saved = !results.empty() && results[0].saved_at_stop;
    if (j.contains("checkpoint")) j["checkpoint"]["saved_on_signal"] = saved;
    std::string what = "shardyard: stopped by " + std::string(signal_name(sig)) + " after " +
                       std::to_string(total.batches) + " batches (" +
                       std::to_string(total.samples) + " samples) were delivered";
    if (saved)
      what += "; checkpoint saved in " + args.checkpoint_dir + " at epoch " +
              std::to_string(results[0].epoch) + " step " + std::to_string(results[0].epoch_steps) +
              ": continue with --resume " + args.checkpoint_dir;
    std::fprintf(stderr, "%s\n", what.c_str());
  }
  if (!args.json)
    std::fprintf(stderr, "loaded %llu samples (%.1f MB) in %.3f s: %.0f samples/s, %.1f MB/s\n",
                 static_cast<unsigned long long>(total.samples), total.bytes / 1e6, seconds,
                 j["samples_per_s"].get<double>(), j["mb_per_s"].get<double>());
  std::cout << dump_json(j) << std::endl;
  return sig == 0 ? 0 : 128 + sig;
}

}  // namespace

Command add_run_command(CLI::App& app, Env* env) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "load a dataset end to end and print a JSON summary");
  cmd->add_option("--source", args->sources, "shard paths, brace patterns or directories")
      ->required();
  cmd->add_option("--windows", args->windows,
                  "items are windows LENGTH:STRIDE[:TARGET] over raw record files "
                  "(needs --record-bytes)");
  cmd->add_option("--record-bytes", args->record_bytes, "bytes per record of --windows sources")
      ->each([args](const std::string&) { args->record_bytes_given = true; });
  cmd->add_flag("--stitch", args->stitch,
                "complete a source's last windows with the head of the next source");
  cmd->add_option("--ranks", args->ranks,
                  "a whole job of R ranks in this process (without it: one rank of a job "
                  "the launcher's variables describe, docs/multi-process.md)")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--rank", args->rank, "this process's rank (over RANK and the like)");
  cmd->add_option("--world-size", args->world_size, "ranks of the job (over WORLD_SIZE)")
      ->check(CLI::Range(1u, 65536u));
  cmd->add_option("--coordinator", args->coordinator,
                  "HOST:PORT of the job's coordinator (rank 0 listens there unless a launcher "
                  "runs it)");
  cmd->add_option("--token-file", args->token_file, "file holding the job's secret token");
  cmd->add_option("--workers", args->workers, "data workers per rank")
      ->check(CLI::Range(1u, 1024u));
  cmd->add_option("--batch-size", args->batch_size, "items per batch and rank")
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--epochs", args->epochs, "epochs to run")->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--seed", args->seed, "seed of the global order (0 to 2^64-1)");
  cmd->add_option("--max-sample-bytes", args->max_sample_bytes,
                  "fail on a sample larger than this (bytes, or with K, M, G; default 256M)");
  cmd->add_option("--read-into-batch", args->read_into_batch,
                  "read members of local tar shards this long or longer straight into the "
                  "batch, unmapped (default 64K; 0: off; only where no stage reads bytes)");
  cmd->add_option("--logical-shards", args->logical_shards, "L (0: chosen from the manifest)");
  cmd->add_option("--chunk-items", args->chunk_items,
                  "shuffle block in items (0: chosen from the manifest)");
  cmd->add_flag("--shuffle", args->shuffle, "permute shards, chunks and items every epoch");
  cmd->add_option("--order", args->order, "exact | as_completed")
      ->check(CLI::IsMember({"exact", "as_completed"}));
  cmd->add_flag("--drop-last", args->drop_last, "every batch full; the tail is not delivered");
  cmd->add_option("--on-corrupt", args->on_corrupt, "fail | skip")
      ->check(CLI::IsMember({"fail", "skip"}));
  cmd->add_flag("--strict", args->strict,
                "a member WebDataset skips (no key.ext name, a link; not a directory) is an "
                "error (or, with --on-corrupt skip, damage)");
  cmd->add_option("--dump-keys", args->dump_dir,
                  "write DIR/rank-<r>.tsv of every delivered sample (or window)");
  cmd->add_flag("--json", args->json, "print only the JSON summary");
  cmd->add_option("--prefetch-batches", args->prefetch_batches, "batches collated ahead per rank");
  cmd->add_flag("--prefetch-eager", args->prefetch_eager,
                "collate ahead from the first batch (default: once the trainer is busy between "
                "batches)");
  cmd->add_option("--prefetch-packets", args->prefetch_packets,
                  "packets queued per worker (0: chosen from the job)");
  cmd->add_flag("--no-cache", args->no_cache, "do not read or write the manifest cache");
  cmd->add_option("--cache-dir", args->cache_dir, "manifest cache folder");
  cmd->add_option("--distributed-strategy", args->distributed_strategy, "contiguous | strided");
  cmd->add_option("--worker-strategy", args->worker_strategy, "contiguous | strided");
  cmd->add_option("--map", args->maps,
                  "a stage: [once/|post/]TYPE[:key=value;key=value] (repeatable, in order; "
                  "once/: non-replicable, post/: after the merge point, in the loader)");
  cmd->add_option("--dispatch", args->dispatch,
                  "how the dispatcher feeds workers: none (each worker reads its own shards) | "
                  "round_robin | on_request | broadcast (whole logical shards, shared) | "
                  "by_key (the same routing key always to the same worker)")
      ->check(CLI::IsMember({"none", "round_robin", "on_request", "broadcast", "by_key"}));
  cmd->add_option("--placement", args->placement,
                  "where workers run: inproc (threads of this process) | local (a process "
                  "each, items through shared memory; a dead worker is replaced)")
      ->check(CLI::IsMember({"inproc", "local"}));
  cmd->add_option("--worker-binary", args->worker_binary,
                  "local: the program started in worker mode (default: this one)");
  cmd->add_option("--max-worker-restarts", args->max_worker_restarts,
                  "local: restarts of a worker in a row without progress before the run stops");
  cmd->add_option("--shm-arena-mb", args->shm_arena_mb,
                  "local: shared-memory arena of each worker's channel in MiB (0: sized from "
                  "the batch)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{65536}));
  cmd->add_option("--route-key", args->route_key,
                  "by_key: route by this field's bytes (default: the item's key)");
  cmd->add_option("--prefetch-sources", args->prefetch_sources,
                  "broadcast: logical shards loaded ahead of the one in use")
      ->check(CLI::Range(1u, 64u));
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "save checkpoints here (at the end of every epoch, or see below)");
  cmd->add_option("--stop-after-steps", args->stop_after_steps,
                  "run N steps of the first epoch, save into --checkpoint-dir, exit 0");
  cmd->add_option("--checkpoint-every", args->checkpoint_every,
                  "also save every N steps into --checkpoint-dir");
  cmd->add_option("--resume", args->resume_dir,
                  "resume from the checkpoint in DIR (ranks and workers may differ); auto: "
                  "from --checkpoint-dir when it holds one, else start fresh");
  cmd->add_option("--device", args->device,
                  "deliver batches to a device: cuda:N (a CUDA GPU), or host (a stand-in in "
                  "host memory, for tests)");
  cmd->add_option("--device-prefetch", args->device_prefetch,
                  "batches copied to the device ahead of the trainer")
      ->check(CLI::Range(1u, 64u));
  cmd->add_flag("--check-device", args->check_device,
                "copy every batch back from the device and compare it with the host batch");
  cmd->add_option("--metrics-port", args->metrics_port,
                  "serve GET /metrics (Prometheus) and GET /status (JSON) on this port while "
                  "the run lasts (0: a free port, printed on stderr; default: "
                  "$SHARDYARD_METRICS_PORT, else none)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-address", args->metrics_address,
                  "address the metrics endpoint listens on (default 127.0.0.1, loopback only)");
  return [args, env] { return run(*args, env); };
}

}  // namespace shardyard::tools
