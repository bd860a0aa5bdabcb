// WorkerLaunch (actors/state/worker_process.h): what every worker process of one job needs,
// made once per job: the job frame, the manifest segment, the arena size, the mapping of
// file ranges, the images of loaded shards.
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>

#include "actors/state/worker_frames.h"
#include "actors/state/worker_process.h"
#include "io/format/sample_reader.h"
#include "io/fs/file_system.h"
#include "io/fs/uri.h"
#include "io/remote/remote_file_system.h"
#include "io/transport/shm_channel.h"
#include "runtime/pipeline.h"

namespace shardyard::actors {

namespace {

// The source files of a job as the rank maps them for file ranges. Each file is mapped
// whole, once, and every range of it is a view into that one mapping: a run of large
// samples costs no mmap, munmap or page-cache walk per item, only one per shard. The last
// few files stay mapped (a worker's items come from one shard after another); a mapping
// lives on while an item still holds a view of it. In a job that reads large members into
// the batch (JobData::unread_field_bytes), nothing is mapped: a range gets a reader of its
// file and its fields stay unread until the batch is built. Such a file costs only its
// descriptor, so as many stay open as a SampleReader keeps: the workers interleave their
// units' shards, and with 8 open files a run over 32 shards reopened one for about every
// second item (an open, an fstat and a read-ahead hint each).
class SourceFiles {
 public:
  SourceFiles(std::shared_ptr<const Manifest> manifest, bool unread)
      : manifest_(std::move(manifest)), unread_(unread) {}

  Result<io::FileView> map(uint32_t source, uint64_t offset, uint64_t size) {
    if (source >= manifest_->sources.size())
      return corrupt("a file range of source " + std::to_string(source) + ", of " +
                     std::to_string(manifest_->sources.size()));
    const SourceEntry& src = manifest_->sources[source];
    if (src.kind != SourceKind::kTar)
      return corrupt("a file range of " + src.uri + ", which is not a tar file");
    if (offset > src.size_bytes || size > src.size_bytes - offset)
      return corrupt("a file range of " + src.uri + " at " + std::to_string(offset) + " + " +
                     std::to_string(size) + ", past its " + std::to_string(src.size_bytes) +
                     " bytes");
    SY_ASSIGN_OR_RETURN(Open file, open(source));
    if (file.reader) return io::FileView{nullptr, nullptr, std::move(file.reader)};
    if (file.whole) {
      const uint8_t* data = file.whole->data() + offset;
      return io::FileView{data, std::move(file.whole), nullptr};
    }
    // Not mappable (or past the guard's slots): read the range.
    auto bytes = std::make_shared<std::string>(static_cast<size_t>(size), '\0');
    SY_RETURN_IF_ERROR(io::read_exact(*file.file, offset, bytes->data(), bytes->size()));
    const auto* data = reinterpret_cast<const uint8_t*>(bytes->data());
    return io::FileView{data, std::move(bytes), nullptr};
  }

 private:
  static constexpr size_t kMappedFiles = 8;
  size_t open_files() const {
    return unread_ ? io::SampleReaderOptions{}.max_open_files : kMappedFiles;
  }

  struct Open {
    uint32_t source = 0;
    std::shared_ptr<RandomAccessFile> file;
    std::shared_ptr<const MappedRange> whole;  // null: read instead
    std::shared_ptr<const FileReader> reader;  // set instead of mapping: fields stay unread
  };

  Result<Open> open(uint32_t source) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < open_.size(); ++i)
      if (open_[i].source == source) {
        Open hit = open_[i];
        open_.erase(open_.begin() + static_cast<ptrdiff_t>(i));
        open_.push_front(hit);
        return hit;
      }
    const SourceEntry& src = manifest_->sources[source];
    SY_ASSIGN_OR_RETURN(auto file, io::default_file_system().open(src.uri));
    Open made;
    made.source = source;
    made.file = std::move(file);
    if (unread_) {
      made.reader = io::source_file_reader(io::default_file_system(), made.file, src);
    } else if (src.size_bytes > 0) {
      SY_ASSIGN_OR_RETURN(made.whole, made.file->map(0, static_cast<size_t>(src.size_bytes)));
    }
    open_.push_front(made);
    if (open_.size() > open_files()) open_.pop_back();
    return made;
  }

  const std::shared_ptr<const Manifest> manifest_;
  const bool unread_;
  std::mutex mu_;
  std::deque<Open> open_;  // guarded by mu_, the most recently used first
};

}  // namespace

Result<std::shared_ptr<WorkerLaunch>> WorkerLaunch::create(const JobData& job,
                                                           WorkerProcessOptions options) {
  auto launch = std::shared_ptr<WorkerLaunch>(new WorkerLaunch());
  WorkerJob& j = launch->job_;
  j.fingerprint = job.manifest->fingerprint;
  j.plan = job.plan;
  j.pipeline = spec_to_string(job.pipeline);
  j.topology = job.topology;
  j.batch_size = job.batch_size;
  j.exact_order = job.exact_order;
  j.dispatch = dispatch_name(job.dispatch);
  j.prefetch_shards = job.prefetch_shards;
  j.route_key_field = job.route_key_field;
  j.max_sample_bytes = job.reader.max_sample_bytes;
  j.read_into_batch_bytes = job.unread_field_bytes;
  j.packet_items = job.packet_items;
  j.packet_bytes = job.packet_bytes;
  const WindowSpec& spec = job.manifest->windows;
  if (spec.enabled()) {
    j.windows = spec;
    j.scan_threads = options.scan_threads;
    j.sources = options.sources;
  } else {
    // The manifest once, in a segment every worker process maps read-only to decode it
    // (without a checksum: they decode it without verifying, rebuild_job()).
    const std::string encoded = encode_manifest(*job.manifest, /*checksum=*/false);
    io::SegmentOptions seg;
    seg.dir = options.shm_dir;
    seg.what = "the job's manifest for its worker processes";
    SY_ASSIGN_OR_RETURN(auto segment, io::ShmSegment::create(encoded.size(), seg));
    {
      SY_ASSIGN_OR_RETURN(auto map, segment.map(io::ShmSegment::Access::kReadWrite));
      std::memcpy(map->writable_data(), encoded.data(), encoded.size());
    }
    launch->manifest_.emplace(std::move(segment));
    j.manifest_bytes = encoded.size();
    auto files = std::make_shared<SourceFiles>(job.manifest, job.unread_field_bytes > 0);
    launch->file_ranges_ = [files](uint32_t source, uint64_t offset, uint64_t size) {
      return files->map(source, offset, size);
    };
  }
  const size_t frame_bytes = encode_job(j).size();
  if (frame_bytes + 64 > kControlFrameBytes)
    return invalid_argument("the job's description for worker processes takes " +
                            std::to_string(frame_bytes) + " bytes, more than a control frame");
  // The arena holds what is in flight from one worker: its packets (4 sent and one being
  // written, each at most 128 items or 4 MiB plus the item that crossed) and the items of
  // it the loader keeps until they are collated: those of the batches its collators are
  // building (at most 2; a prefetched batch is built, its items dropped) and of the one
  // being merged. Where the rank order takes the workers' items in turn (strided, without
  // routing by key) a batch holds about 1/W of a worker's items; twice that leaves room
  // for unevenness (windows, all one size, need none). Elsewhere a batch may come from one
  // worker alone.
  // Windows are all one size, so a packet's room is known exactly: there the arena holds
  // two packets (one being written, one the loader reads) and what the loader keeps, and
  // the worker waits for room beyond that instead of running 4 packets ahead. Its pages
  // are touched as the ring goes round and count once per worker process; a broadcast
  // job's windows are copies out of the shared image, and 4 workers' arenas of the larger
  // size were most of what W=4 added to the tree's memory over W=1 (docs/performance.md,
  // "Worker processes"), without making it faster.
  // Fields that cross as file ranges take no room: without a dispatcher (whose items reach
  // a worker through its input channel, not from a mapping of its own), a sample of a local
  // tar shard that is always read by mapping (as long as the reader's mapping threshold) or
  // left unread (as long as JobData::unread_field_bytes) counts a page for its small fields
  // (a large one's neighbours: a label, JSON metadata), or its payload where that is less.
  // A smaller sample is read whole: into the data arena where there is one (below), where it
  // crosses by its place and takes the room of its descriptor only, or else into a buffer
  // it is copied from. The manifest does not say how a sample's payload splits into fields;
  // where the small ones are larger the arena fills sooner and its worker waits for the
  // loader, which costs speed, not correctness. Counting the threshold of a field that
  // crosses as a file range (64 KiB) instead made the arena of a 512 KiB-sample job 24 MiB,
  // whose first fill cost a short run more than the room gave back (docs/performance.md,
  // "Worker processes").
  const bool tar_job = !spec.enabled() && job.dispatch == Dispatch::kNone;
  const uint64_t payload =
      spec.enabled() ? job.manifest->window_payload_bytes()
                     : job.manifest->payload_bytes() / std::max<uint64_t>(1, job.index.num_items());
  uint64_t copied = payload;    // per item: what crosses without a data arena
  uint64_t copied_fields = 0;   // per item: the small fields of samples named by file range
  uint64_t copied_largest = 0;  // the largest sample that is read whole
  if (tar_job) {
    const uint64_t small_fields = 4096;
    const uint64_t mapped =
        job.unread_field_bytes > 0
            ? std::min<uint64_t>(job.reader.map_threshold_bytes, job.unread_field_bytes)
            : job.reader.map_threshold_bytes;
    uint64_t total = 0, fields = 0, items = 0;
    for (const auto& src : job.manifest->sources) {
      const bool ranges = src.kind == SourceKind::kTar && !io::is_remote_uri(src.uri);
      items += src.samples.size();
      const auto& sums = src.samples.totals();
      if (!ranges || sums.max_range < mapped) {  // every sample read whole: no walk
        total += sums.payload_bytes;
        copied_largest = std::max(copied_largest, sums.max_payload);
        continue;
      }
      for (const auto& sample : src.samples) {
        if (sample.end - sample.begin >= mapped) {
          fields += std::min(sample.payload_bytes, small_fields);
        } else {
          total += sample.payload_bytes;
          copied_largest = std::max(copied_largest, sample.payload_bytes);
        }
      }
    }
    copied = (total + fields) / std::max<uint64_t>(1, items);
    copied_fields = fields / std::max<uint64_t>(1, items);
  }
  const uint32_t workers = job.topology.workers;
  const uint64_t building = std::min<uint64_t>(options.prefetch_batches, 2);
  const bool even = job.plan.worker_strategy == "strided" &&
                    (job.dispatch == Dispatch::kNone || job.dispatch == Dispatch::kRoundRobin ||
                     job.dispatch == Dispatch::kBroadcast);
  // What the loader keeps of one worker's items of `mean` bytes each.
  auto held_of = [&](uint64_t mean) {
    const uint64_t held = uint64_t{job.batch_size} * mean * (std::max<uint64_t>(building, 1) + 1);
    if (even && spec.enabled() && workers > 1) return held / workers + mean;
    if (even && workers > 2) return held * 2 / workers;
    return held;
  };
  // The data arena (io/transport/shm_arena.h ArenaChunks): where a worker reads the ranges of
  // tar shards it does not map, so that their items cross without a copy. A chunk that
  // finds it full goes to the worker's buffer pool and its items are copied into the arena
  // above, so this sizes for speed, not correctness, and both ways cost:
  // - Chunks read whole (shuffle, sequential, windows) stay until the loader has collated
  //   their items, a shuffle buffer's worth: the ring holds a chunk per logical shard the
  //   worker interleaves, as much again, and the items the loader holds. A smaller ring
  //   cost the shuffled small benchmark set 9% more time (2-4 MiB against the 9 MiB this
  //   gives).
  // - Chunks of a few items (reads in order, "Smaller reads where the order allows them"
  //   in docs/performance.md) leave soon: about one per logical shard is being taken from
  //   at a time. The ring is written where it came round to, bytes last written the whole
  //   ring ago, so a larger ring only writes into colder cache lines, while a chunk that
  //   does not fit goes to the pool's most recently freed buffer, still in the cache: on
  //   the small set a ring of 1 MiB per worker ran the loop 12-16% faster than one of
  //   4 MiB, with 20-30% of the chunks copied instead of 2-12% ("Worker processes").
  // Workers fed by a dispatcher read nothing, and ranges that are mapped or walked (large
  // members left unread, the small ones read beside them on the heap) need no room.
  if (tar_job) {
    uint64_t span = 0, items = 0;
    bool reads = false;
    for (const auto& src : job.manifest->sources) {
      if (src.kind != SourceKind::kTar && src.kind != SourceKind::kTarGz) continue;
      if (src.kind == SourceKind::kTarGz || io::is_remote_uri(src.uri)) reads = true;
      span += src.samples.totals().range;
      items += src.samples.size();
    }
    const uint64_t chunk = uint64_t{job.read_items} * (span / std::max<uint64_t>(1, items));
    // Without `reads` every tar source is a local .tar, whose large members are then walked.
    const bool walked = job.collates_from_files();
    if (items > 0 && (reads || (chunk < job.reader.map_threshold_bytes && !walked))) {
      const uint64_t per_worker = job.shards_per_worker();
      const bool small_reads = job.read_items < job.plan.chunk_items;
      const uint64_t data = small_reads ? chunk * (per_worker + 2)
                                        : 2 * chunk * (per_worker + 2) + held_of(copied + 256);
      // At most 256 MiB; at least 1 MiB and room for 4 chunks (ArenaChunks takes none over a
      // quarter of its ring).
      const uint64_t smallest = std::max<uint64_t>(1ull << 20, 4 * chunk + 4096);
      launch->data_bytes_ = options.arena_bytes
                                ? options.arena_bytes
                                : std::max(smallest, std::min<uint64_t>(data, 256ull << 20));
    }
  }
  const uint64_t packet_items = job.items_per_packet(payload);
  auto packet_of = [&](uint64_t mean) { return packet_items * mean + mean; };
  // At least 1 MiB all the same (the per-item 256 bytes are an estimate of descriptors).
  // Without a data arena, a tar job's arena keeps its floor of 8 MiB.
  uint64_t least = spec.enabled() ? 1ull << 20 : 8ull << 20;
  uint64_t mean = copied + 256;
  if (launch->data_bytes_ > 0) {
    // The read samples cross in the data arena, and this arena holds their descriptors.
    // A chunk that finds the data arena full is copied through this one instead: room for
    // two such packets, or two copies of the largest sample, keeps that from stalling.
    mean = copied_fields + 256;
    least = std::max({uint64_t{1} << 20, 2 * packet_of(copied + 256), 2 * (copied_largest + 256)});
  }
  const uint64_t wanted =
      spec.enabled() ? 2 * packet_of(mean) + held_of(mean) : 5 * packet_of(mean) + held_of(mean);
  launch->arena_bytes_ =
      options.arena_bytes ? options.arena_bytes : std::clamp<uint64_t>(wanted, least, 1ull << 30);
  launch->rooms_->enabled = !spec_reads_bytes(job.pipeline);
  launch->options_ = std::move(options);
  return launch;
}

Result<io::UniqueFd> WorkerLaunch::manifest_fd() const {
  if (!manifest_) return invalid_argument("this job has no manifest segment");
  return manifest_->read_only_fd();
}

void WorkerLaunch::log(const std::string& line) const {
  if (options_.log)
    options_.log(line);
  else
    std::fprintf(stderr, "shardyard: %s\n", line.c_str());
}

std::vector<io::ShmImageRoom> WorkerLaunch::Rooms::keep(std::vector<io::ShmImageRoom> given) {
  std::vector<io::ShmImageRoom> freed;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& room : given) idle.push_back(std::move(room));
  while (idle.size() > 2) {
    freed.push_back(std::move(idle.front()));
    idle.erase(idle.begin());
  }
  return freed;
}

Result<std::shared_ptr<SharedImage>> WorkerLaunch::shard_image(
    uint32_t rank, const std::shared_ptr<const io::SharedShard>& shard) {
  std::lock_guard<std::mutex> lock(images_mu_);
  for (auto it = images_.begin(); it != images_.end();)
    it = it->second.image.expired() ? images_.erase(it) : std::next(it);
  Image& slot = images_[{rank, shard.get()}];
  if (auto image = slot.image.lock(); image && slot.shard.lock() == shard) return image;
  io::SegmentOptions seg;
  seg.dir = options_.shm_dir;
  seg.what = "the image of logical shard " + std::to_string(shard->shard) + " for rank " +
             std::to_string(rank) + "'s worker processes";
  std::vector<io::ShmImageRoom> rooms;
  {
    std::lock_guard<std::mutex> idle(rooms_->mu);
    rooms.swap(rooms_->idle);
  }
  auto made = io::ShmShardImage::create(*shard, seg, &rooms);
  if (!made.is_ok() && !rooms.empty()) {
    // No room fitted, and a new segment found no space: free the idle ones and try again.
    rooms.clear();
    made = io::ShmShardImage::create(*shard, seg);
  }
  rooms_->keep(std::move(rooms));
  if (!made.is_ok()) return made.status();
  std::shared_ptr<Rooms> keep = rooms_;
  auto image = std::shared_ptr<SharedImage>(
      new SharedImage(std::move(made).value()), [keep](SharedImage* done) {
        std::vector<io::ShmImageRoom> room;
        if (keep->enabled && done->parts.load() == done->handed.load())
          room.push_back(std::move(done->image).take_room());
        delete done;
        if (!room.empty()) keep->keep(std::move(room));
      });
  slot.shard = shard;
  slot.image = image;
  return image;
}

}  // namespace shardyard::actors
