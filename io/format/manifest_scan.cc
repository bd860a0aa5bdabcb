#include "io/format/manifest_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "io/format/gzip.h"
#include "io/format/parallel.h"
#include "io/format/tar.h"
#include "io/fs/uri.h"
#include "runtime/hash.h"

namespace shardyard::io {

namespace {

// Groups consecutive members by key into SampleEntry records.
class SampleGrouper {
 public:
  SampleGrouper(SourceEntry* out, const std::string& source) : out_(out), source_(source) {}
  Status add(const std::string& path, uint64_t begin, uint64_t end, uint64_t size) {
    auto kf = split_key(path);
    if (!kf.is_ok())
      return corrupt(source_ + " at byte " + std::to_string(begin) + ": " + kf.status().message());
    if (has_current_ && kf->key == current_.key) {
      for (const auto& f : fields_)
        if (f == kf->field)
          return corrupt(source_ + " at byte " + std::to_string(begin) + ": member '" + path +
                         "' repeats a field of the same sample");
      current_.end = end;
      current_.payload_bytes += size;
    } else {
      flush();
      current_ = SampleEntry{std::string(kf->key), begin, end, size};
      has_current_ = true;
      fields_.clear();
    }
    fields_.emplace_back(kf->field);
    return Status::ok();
  }
  void flush() {
    if (has_current_) out_->samples.push_back(std::move(current_));
    has_current_ = false;
  }
  void drop_current() { has_current_ = false; }

 private:
  SourceEntry* out_;
  const std::string& source_;
  SampleEntry current_;
  bool has_current_ = false;
  std::vector<std::string> fields_;  // of the current sample
};

// Under kSkip, what counts as damage of one source rather than a failure of the run: a
// malformed shard, and for a remote shard also one that stays unreachable after retries.
bool is_damage(const Status& st, const SourceRef& ref) {
  if (st.code() == StatusCode::kCorrupt) return true;
  return is_remote_uri(ref.uri) &&
         (st.code() == StatusCode::kIoError || st.code() == StatusCode::kUnavailable ||
          st.code() == StatusCode::kNotFound);
}

Status scan_tar_source(std::shared_ptr<RandomAccessFile> shared, const SourceRef& ref,
                       SourceEntry* e, OnCorrupt policy) {
  e->size_bytes = shared->size();
  bool gz = ref.kind == SourceKind::kTarGz || looks_gzip(*shared);
  if (gz) e->kind = SourceKind::kTarGz;
  auto stream = gz ? gzip_stream(shared) : file_stream(shared);
  // Messages name the shard; a remote one without its query string (a presigned URL's
  // signature must not reach a log).
  const std::string name = is_remote_uri(ref.uri) ? redact_url(ref.uri) : ref.uri;
  SampleGrouper group(e, name);
  Status st = scan_tar(*stream, name, [&](const TarEntry& t) -> Status {
    if (!t.regular) return Status::ok();
    return group.add(t.path, t.start_offset, t.end_offset(), t.size);
  });
  if (!st.is_ok()) {
    if (policy == OnCorrupt::kFail || !is_damage(st, ref)) return st;
    group.drop_current();  // the sample in progress may be incomplete
    e->damaged = true;
    // A skip can carry a file stream's position past the end of the file; keep it inside.
    e->damaged_at = gz ? stream->position() : std::min(stream->position(), e->size_bytes);
    e->damage = st.message();
    return Status::ok();
  }
  group.flush();
  if (e->samples.empty()) {
    Status empty = corrupt(name + ": shard has no samples (empty archive)");
    if (policy == OnCorrupt::kFail) return empty;
    e->damaged = true;
    e->damage = empty.message();
  }
  return Status::ok();
}

Status scan_directory_source(FileSystem& fs, const SourceRef& ref, SourceEntry* e,
                             OnCorrupt policy) {
  SY_ASSIGN_OR_RETURN(e->files, fs.list(ref.uri));
  SampleGrouper group(e, ref.uri);
  for (size_t i = 0; i < e->files.size(); ++i) {
    SY_ASSIGN_OR_RETURN(auto info, fs.stat(ref.uri + "/" + e->files[i]));
    e->size_bytes += info.size;
    Status st = group.add(e->files[i], i, i + 1, info.size);
    if (!st.is_ok()) {
      if (policy == OnCorrupt::kFail) return st;
      e->damaged = true;
      e->damaged_at = i;
      e->damage = st.message();
      group.drop_current();
      e->files.resize(i);  // keep only files before the damage
      return Status::ok();
    }
  }
  group.flush();
  if (e->samples.empty()) {
    Status empty = corrupt(ref.uri + ": directory has no samples");
    if (policy == OnCorrupt::kFail) return empty;
    e->damaged = true;
    e->damage = empty.message();
  }
  return Status::ok();
}

// Threads for work on these sources: remote requests wait on the network, not the CPU,
// so they get many more than the cores.
unsigned scan_threads(const ScanOptions& o, const std::vector<SourceRef>& refs) {
  unsigned threads = o.threads ? o.threads : std::thread::hardware_concurrency();
  for (const auto& r : refs)
    if (is_remote_uri(r.uri)) return std::max(threads, o.remote_connections);
  return threads;
}

std::string cache_key(const std::vector<SourceRef>& refs) {
  Hasher h;
  for (const auto& r : refs) h.add_string(r.uri);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h.digest()));
  return buf;
}

// A cached manifest is fresh when it lists the same sources with the same size and mtime
// (for a remote object: its version stamp). Sources are checked in parallel: for remote
// ones each check is a HEAD.
bool cache_fresh(FileSystem& fs, const Manifest& m, const std::vector<SourceRef>& refs,
                 unsigned threads) {
  if (m.sources.size() != refs.size()) return false;
  for (size_t i = 0; i < refs.size(); ++i)
    if (m.sources[i].uri != refs[i].uri) return false;
  std::atomic<bool> fresh{true};
  parallel_for(refs.size(), threads, [&](size_t i) {
    if (!fresh) return;
    const auto& s = m.sources[i];
    auto info = fs.stat(s.uri);
    if (!info.is_ok()) {
      bool still_missing = info.status().code() == StatusCode::kNotFound;
      if (!(s.damaged && s.samples.empty() && still_missing)) fresh = false;
      return;
    }
    // A directory is fresh while it lists the same files (listing costs no stat per file).
    // A loose file rewritten in place with the same name is not noticed: use --no-cache.
    if (s.kind == SourceKind::kDirectory) {
      auto files = fs.list(s.uri);
      if (!files.is_ok() || *files != s.files) fresh = false;
      return;
    }
    if (info->size != s.size_bytes || info->mtime_ns != s.mtime_ns) fresh = false;
  });
  return fresh;
}

Status make_dirs(const std::string& dir) {
  std::string at;
  std::stringstream in(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') at = "/";
  while (std::getline(in, part, '/')) {
    if (part.empty()) continue;
    at += part + "/";
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST)
      return io_error("cannot create directory " + at + ": " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace

Result<SourceEntry> scan_source(FileSystem& fs, const SourceRef& ref, OnCorrupt on_corrupt) {
  SourceEntry e;
  e.uri = ref.uri;
  e.kind = ref.kind;
  if (is_remote_uri(ref.uri)) {
    // One request less per shard: open() learns the size and version itself.
    auto file = fs.open(ref.uri);
    if (!file.is_ok()) {
      const Status& st = file.status();
      std::string what =
          st.code() == StatusCode::kNotFound ? "missing shard: " : "unreachable shard: ";
      if (on_corrupt == OnCorrupt::kFail || !is_damage(st, ref))
        return Status(st.code(), what + st.message());
      e.damaged = true;
      e.damage = what + st.message();
      return e;
    }
    e.mtime_ns = (*file)->version();
    SY_RETURN_IF_ERROR(scan_tar_source(std::shared_ptr<RandomAccessFile>(std::move(file).value()),
                                       ref, &e, on_corrupt));
    return e;
  }
  auto info = fs.stat(ref.uri);
  if (!info.is_ok()) {
    if (info.status().code() != StatusCode::kNotFound) return info.status();
    if (on_corrupt == OnCorrupt::kFail)
      return Status(info.status().code(), "missing shard: " + info.status().message());
    e.damaged = true;
    e.damage = "missing shard: " + info.status().message();
    return e;
  }
  e.mtime_ns = info->mtime_ns;
  if (info->is_directory) {
    e.kind = SourceKind::kDirectory;
    SY_RETURN_IF_ERROR(scan_directory_source(fs, ref, &e, on_corrupt));
  } else {
    SY_ASSIGN_OR_RETURN(auto file, fs.open(ref.uri));
    SY_RETURN_IF_ERROR(scan_tar_source(std::move(file), ref, &e, on_corrupt));
  }
  return e;
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("SHARDYARD_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/shardyard";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/shardyard";
  return "/tmp/shardyard-cache";
}

Result<Manifest> build_manifest(FileSystem& fs, const std::vector<std::string>& patterns,
                                const ScanOptions& options, ScanReport* report) {
  ScanReport local;
  if (report == nullptr) report = &local;
  SY_ASSIGN_OR_RETURN(auto refs, resolve_sources(fs, patterns));
  const unsigned threads = scan_threads(options, refs);

  std::string cache_path;
  if (!options.cache_dir.empty()) {
    cache_path = options.cache_dir + "/" + cache_key(refs) + ".manifest";
    report->cache_path = cache_path;
    auto cached = load_manifest(cache_path);
    if (cached.is_ok() && cache_fresh(fs, *cached, refs, threads)) {
      // A cached manifest with damage is only valid under the policy that accepts it.
      if (options.on_corrupt == OnCorrupt::kSkip || cached->num_damaged() == 0) {
        report->from_cache = true;
        for (const auto& s : cached->sources)
          if (s.damaged) report->warnings.push_back(s.damage);
        return std::move(cached).value();
      }
    }
  }

  Manifest m;
  m.sources.resize(refs.size());
  std::vector<Status> errors(refs.size());
  std::atomic<bool> failed{false};
  parallel_for(refs.size(), threads, [&](size_t i) {
    if (failed) return;  // the run fails anyway: do not fetch the rest
    auto r = scan_source(fs, refs[i], options.on_corrupt);
    if (r.is_ok()) {
      m.sources[i] = std::move(r).value();
    } else {
      errors[i] = r.status();
      failed = true;
    }
  });
  for (const auto& e : errors) SY_RETURN_IF_ERROR(e);  // the first source's error wins
  for (const auto& s : m.sources)
    if (s.damaged) report->warnings.push_back(s.damage);
  if (m.num_samples() == 0) return corrupt("the dataset has no readable samples");
  m.fingerprint = compute_fingerprint(m);

  if (!cache_path.empty()) {
    // A cache that cannot be written costs speed, not correctness: warn and go on.
    Status st = make_dirs(options.cache_dir);
    if (st.is_ok()) st = save_manifest(m, cache_path);
    if (!st.is_ok()) report->warnings.push_back("manifest cache not written: " + st.message());
  }
  return m;
}

Status save_manifest(const Manifest& m, const std::string& path) {
  // Windows are implicit and the format has no place for a WindowSpec: a records manifest
  // is rebuilt from stat calls every time (io/format/record_scan.h), never saved.
  if (m.windows.enabled())
    return invalid_argument(path + ": a windows (records) manifest is not saved; it is rebuilt");
  return write_file_atomic(path, encode_manifest(m), /*sync_dir=*/false);
}

Result<Manifest> load_manifest(const std::string& path) {
  // Decoded block by block: the file's bytes are never all in memory next to the manifest.
  auto file = local_file_system().open(path);
  if (!file.is_ok()) {
    if (file.status().code() == StatusCode::kNotFound)
      return not_found(path + ": no manifest here");
    return file.status();
  }
  RandomAccessFile& f = **file;
  uint64_t at = 0;
  ManifestSource source = [&](char* dst, size_t n) -> Result<size_t> {
    SY_ASSIGN_OR_RETURN(size_t got, f.read_at(at, dst, n));
    at += got;
    return got;
  };
  return decode_manifest(source, f.size(), path);
}

}  // namespace shardyard::io
