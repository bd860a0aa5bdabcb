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

// A member as the grouper sees it: a tar entry, or a loose file of a directory source.
struct ScannedMember {
  std::string_view path;
  char type = '0';      // tar typeflag; '0' for a loose file
  bool regular = true;  // a file with data (tar: '0', NUL, '7', 'S')
  bool sparse = false;  // a GNU sparse file
  uint64_t begin = 0, end = 0, size = 0;
};

std::string type_name(char type) {
  switch (type) {
    case '1':
      return "a hard link";
    case '2':
      return "a symbolic link";
    case '3':
    case '4':
      return "a device";
    case '6':
      return "a FIFO";
    default:
      return std::string("a member of tar type '") + type + "'";
  }
}

// Groups members into SampleEntry records as WebDataset does: consecutive members with
// one key make a sample, members without a key are skipped (counted) and do not end the
// sample around them. Damage confined to one sample (a repeated field, a sparse file)
// drops that sample and goes on under kSkip; damage of the archive itself ends the scan
// (stop()), keeping every sample whose members are whole.
class SampleGrouper {
 public:
  SampleGrouper(SourceEntry* out, const std::string& source, OnCorrupt policy, bool strict)
      : out_(out), source_(source), policy_(policy), strict_(strict) {}

  Status add(const ScannedMember& m) {
    last_in_current_ = false;
    if (!m.regular) {
      ++out_->members_skipped;
      if (!strict_ || m.type == '5') return Status::ok();  // a directory holds no data
      return damage(m.begin,
                    member(m) + " is " + type_name(m.type) + ", which WebDataset skips (--strict)");
    }
    auto kf = split_key(m.path);
    if (!kf) {
      ++out_->members_skipped;
      if (!strict_) return Status::ok();
      return damage(m.begin, member(m) + " " + unmatched_reason(m.path) +
                                 ", which WebDataset skips (--strict)");
    }
    if (has_current_ && kf->key == current_.key) {
      current_.end = m.end;
      current_.payload_bytes += m.size;
    } else {
      flush();
      current_ = SampleEntry{std::string(kf->key), m.begin, m.end, m.size};
      has_current_ = true;
      bad_ = false;
      fields_.clear();
    }
    last_in_current_ = true;
    if (m.sparse)
      return damage_sample(m.begin, member(m) +
                                        " is a GNU sparse file, which shardyard does not read "
                                        "(write the shard without --sparse)");
    for (const auto& f : fields_)
      if (f == kf->field)
        return damage_sample(m.begin, member(m) + " repeats a field of the same sample ('" + f +
                                          "' of '" + current_.key + "')");
    fields_.push_back(std::move(kf->field));
    return Status::ok();
  }

  // The archive is damaged at stream position `at` (kSkip): nothing after it is read. The
  // sample in progress is kept unless the damage lies in one of its members' payloads.
  void stop(const Status& st, uint64_t at, bool in_last_payload) {
    if (in_last_payload && last_in_current_) bad_ = true;
    flush();
    note(at, st.message());
  }

  void finish() {
    flush();
    out_->samples.shrink_to_fit();
    if (damages_ > 1) out_->damage += " (and " + std::to_string(damages_ - 1) + " more)";
  }

 private:
  std::string member(const ScannedMember& m) const {
    return source_ + " at byte " + std::to_string(m.begin) + ": member '" + std::string(m.path) +
           "'";
  }
  void flush() {
    if (has_current_ && !bad_) out_->samples.push_back(current_);
    has_current_ = false;
  }
  void note(uint64_t at, const std::string& message) {
    if (damages_++ > 0) return;
    out_->damaged = true;
    out_->damaged_at = at;
    out_->damage = message;
  }
  // A member that is damage on its own: an error under kFail, noted under kSkip.
  Status damage(uint64_t at, std::string message) {
    if (policy_ == OnCorrupt::kFail) return corrupt(std::move(message));
    note(at, message);
    return Status::ok();
  }
  // Damage that spoils the sample in progress: under kSkip it is dropped whole.
  Status damage_sample(uint64_t at, std::string message) {
    bad_ = true;
    return damage(at, std::move(message));
  }

  SourceEntry* out_;
  const std::string& source_;
  const OnCorrupt policy_;
  const bool strict_;
  SampleEntry current_;
  bool has_current_ = false;
  bool bad_ = false;                 // the sample in progress is damaged: dropped at flush()
  bool last_in_current_ = false;     // the last member added belongs to the sample in progress
  std::vector<std::string> fields_;  // of the current sample
  uint64_t damages_ = 0;
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
                       SourceEntry* e, OnCorrupt policy, bool strict) {
  e->size_bytes = shared->size();
  bool gz = ref.kind == SourceKind::kTarGz || looks_gzip(*shared);
  if (gz) e->kind = SourceKind::kTarGz;
  auto stream = gz ? gzip_stream(shared) : file_stream(shared);
  // Messages name the shard; a remote one without its query string (a presigned URL's
  // signature must not reach a log).
  const std::string name = is_remote_uri(ref.uri) ? redact_url(ref.uri) : ref.uri;
  SampleGrouper group(e, name, policy, strict);
  bool in_payload = false;
  Status st = scan_tar(
      *stream, name,
      [&](const TarEntry& t) -> Status {
        return group.add(
            {t.path, t.type, t.regular, t.sparse, t.start_offset, t.end_offset(), t.size});
      },
      &in_payload);
  if (!st.is_ok()) {
    if (policy == OnCorrupt::kFail || !is_damage(st, ref)) return st;
    // A skip can carry a file stream's position past the end of the file; keep it inside.
    group.stop(st, gz ? stream->position() : std::min(stream->position(), e->size_bytes),
               in_payload);
  }
  group.finish();
  if (e->samples.empty() && !e->damaged) {
    Status empty =
        corrupt(name + ": shard has no samples (" +
                (e->members_skipped > 0 ? std::to_string(e->members_skipped) + " members skipped"
                                        : std::string("empty archive")) +
                ")");
    if (policy == OnCorrupt::kFail) return empty;
    e->damaged = true;
    e->damage = empty.message();
  }
  return Status::ok();
}

// Stats every file of a directory source: sizes, and the digest of each file's name,
// size, times and inode that tells a cached manifest whether a file changed in place.
Status stat_files(FileSystem& fs, const std::string& dir, const std::vector<std::string>& files,
                  std::vector<uint64_t>* sizes, uint64_t* digest) {
  Hasher h;
  sizes->clear();
  for (const auto& f : files) {
    SY_ASSIGN_OR_RETURN(auto info, fs.stat(dir + "/" + f));
    h.add_string(f);
    h.add_u64(info.size);
    h.add_u64(static_cast<uint64_t>(info.mtime_ns));
    h.add_u64(static_cast<uint64_t>(info.ctime_ns));
    h.add_u64(info.inode);
    sizes->push_back(info.size);
  }
  *digest = h.digest();
  return Status::ok();
}

Status scan_directory_source(FileSystem& fs, const SourceRef& ref, SourceEntry* e, OnCorrupt policy,
                             bool strict) {
  SY_ASSIGN_OR_RETURN(e->files, fs.list(ref.uri));
  std::vector<uint64_t> sizes;
  SY_RETURN_IF_ERROR(stat_files(fs, ref.uri, e->files, &sizes, &e->files_digest));
  SampleGrouper group(e, ref.uri, policy, strict);
  for (size_t i = 0; i < e->files.size(); ++i) {
    e->size_bytes += sizes[i];
    SY_RETURN_IF_ERROR(group.add({e->files[i], '0', true, false, i, i + 1, sizes[i]}));
  }
  group.finish();
  if (e->samples.empty() && !e->damaged) {
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

// A cached manifest is fresh when it lists the same sources and each still is what the scan
// saw: a local file's size, mtime, ctime and inode (a copy made with `cp -p` keeps size and
// mtime, never ctime), a remote object's size and version stamp, a directory's file list
// and files_digest. Sources are checked in parallel: for remote ones each check is a HEAD.
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
    // A directory: the same files, none of them changed (a stat per file, as its scan).
    if (s.kind == SourceKind::kDirectory) {
      auto files = fs.list(s.uri);
      std::vector<uint64_t> sizes;
      uint64_t digest = 0;
      if (!files.is_ok() || *files != s.files ||
          !stat_files(fs, s.uri, *files, &sizes, &digest).is_ok() || digest != s.files_digest)
        fresh = false;
      return;
    }
    if (info->size != s.size_bytes || info->mtime_ns != s.mtime_ns ||
        info->ctime_ns != s.ctime_ns || info->inode != s.inode)
      fresh = false;
  });
  return fresh;
}

// Whether a cached manifest stands for a scan with these options. One with damaged sources
// only under kSkip (kFail rescans, which reports the damage). One scanned with the other
// strict_members setting only when that cannot have mattered: a strict one without damage,
// a lenient one that skipped no member.
bool cache_usable(const Manifest& m, const ScanOptions& o) {
  if (o.on_corrupt == OnCorrupt::kFail && m.num_damaged() > 0) return false;
  if (m.strict_members == o.strict_members) return true;
  return m.strict_members ? m.num_damaged() == 0 : m.members_skipped() == 0;
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

Result<SourceEntry> scan_source(FileSystem& fs, const SourceRef& ref, OnCorrupt on_corrupt,
                                bool strict_members) {
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
                                       ref, &e, on_corrupt, strict_members));
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
  // Taken before the scan: a change during the scan makes the cached manifest stale.
  e.mtime_ns = info->mtime_ns;
  e.ctime_ns = info->ctime_ns;
  e.inode = info->inode;
  if (info->is_directory) {
    e.kind = SourceKind::kDirectory;
    SY_RETURN_IF_ERROR(scan_directory_source(fs, ref, &e, on_corrupt, strict_members));
  } else {
    SY_ASSIGN_OR_RETURN(auto file, fs.open(ref.uri));
    SY_RETURN_IF_ERROR(scan_tar_source(std::move(file), ref, &e, on_corrupt, strict_members));
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
  }
  if (!cache_path.empty() && options.cache_mode == CacheMode::kUse) {
    auto cached = load_manifest(cache_path, ManifestCheck::kChecksum);
    if (cached.is_ok() && cache_usable(*cached, options) &&
        cache_fresh(fs, *cached, refs, threads)) {
      report->from_cache = true;
      for (const auto& s : cached->sources)
        if (s.damaged) report->skipped.push_back(s.damage);
      return std::move(cached).value();
    }
  }

  Manifest m;
  m.strict_members = options.strict_members;
  m.sources.resize(refs.size());
  std::vector<Status> errors(refs.size());
  std::atomic<bool> failed{false};
  parallel_for(refs.size(), threads, [&](size_t i) {
    if (failed) return;  // the run fails anyway: do not fetch the rest
    auto r = scan_source(fs, refs[i], options.on_corrupt, options.strict_members);
    if (r.is_ok()) {
      m.sources[i] = std::move(r).value();
    } else {
      errors[i] = r.status();
      failed = true;
    }
  });
  for (const auto& e : errors) SY_RETURN_IF_ERROR(e);  // the first source's error wins
  for (const auto& s : m.sources)
    if (s.damaged) report->skipped.push_back(s.damage);
  if (m.num_samples() == 0) return corrupt("the dataset has no readable samples");
  m.fingerprint = compute_fingerprint(m);

  if (!cache_path.empty()) {
    // A cache that cannot be written (or removed) costs speed, not correctness: warn and go
    // on. A bypassed cache that differs from the scan is removed: stale, it must not be
    // read by the next run that uses the cache.
    Status st;
    if (options.cache_mode == CacheMode::kBypass) {
      auto cached = load_manifest(cache_path, ManifestCheck::kChecksum);
      bool stale = cached.is_ok() ? encode_manifest(*cached) != encode_manifest(m)
                                  : cached.status().code() != StatusCode::kNotFound;
      if (stale && ::unlink(cache_path.c_str()) != 0 && errno != ENOENT)
        st = io_error("cannot remove the stale cached manifest " + cache_path + ": " +
                      std::strerror(errno));
    } else {
      st = make_dirs(options.cache_dir);
      if (st.is_ok()) st = save_manifest(m, cache_path);
      if (!st.is_ok()) st = Status(st.code(), "manifest cache not written: " + st.message());
    }
    if (!st.is_ok()) report->warnings.push_back(st.message());
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

Result<Manifest> load_manifest(const std::string& path, ManifestCheck check) {
  auto file = local_file_system().open(path);
  if (!file.is_ok()) {
    if (file.status().code() == StatusCode::kNotFound)
      return not_found(path + ": no manifest here");
    return file.status();
  }
  RandomAccessFile& f = **file;
  // Mapped: the sample tables borrow the file's pages, which every process of the node that
  // loads this manifest shares (the cache is replaced by rename, never rewritten in place;
  // a file cut short anyway reads zeros, io/fs/mapping_guard.h, and its samples then fail
  // to match the shards). Where it cannot be mapped, it is decoded block by block, so the
  // file's bytes are never all in memory next to the manifest.
  if (f.size() > 0) {
    auto mapped = f.map(0, static_cast<size_t>(f.size()));
    if (mapped.is_ok() && *mapped) {
      const MappedRange& m = **mapped;
      return decode_manifest(std::string_view(reinterpret_cast<const char*>(m.data()), m.size()),
                             path, check, std::shared_ptr<const void>(*mapped));
    }
  }
  uint64_t at = 0;
  ManifestSource source = [&](char* dst, size_t n) -> Result<size_t> {
    SY_ASSIGN_OR_RETURN(size_t got, f.read_at(at, dst, n));
    at += got;
    return got;
  };
  return decode_manifest(source, f.size(), path, check);
}

}  // namespace shardyard::io
