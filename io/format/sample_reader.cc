#include "io/format/sample_reader.h"

#include <algorithm>
#include <cstring>

#include "io/format/gzip.h"
#include "io/format/tar.h"
#include "io/fs/mapping_guard.h"
#include "io/fs/uri.h"
#include "runtime/window.h"

namespace shardyard::io {

struct SampleReader::GzCursor {
  std::unique_ptr<ByteStream> stream;
};

// The members of a run read beside its unread ones, copied out of the walk's window into
// blocks that never move (a run's items view them).
class SampleReader::SmallBytes {
 public:
  const uint8_t* add(const uint8_t* data, size_t n) {
    if (n == 0) return data;
    if (left_ < n) {
      const size_t cap = std::max(n, kBlock);
      blocks_.emplace_back(new uint8_t[cap]);  // not zeroed: only what is copied is touched
      next_ = blocks_.back().get();
      left_ = cap;
    }
    std::memcpy(next_, data, n);
    const uint8_t* at = next_;
    next_ += n;
    left_ -= n;
    return at;
  }

 private:
  static constexpr size_t kBlock = 16 << 10;
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;
  uint8_t* next_ = nullptr;
  size_t left_ = 0;
};

namespace {

// What the manifest says of a source and what its file says now, or empty when they agree.
std::string difference(const SourceEntry& src, const RandomAccessFile& f) {
  if (src.kind != SourceKind::kTar && src.kind != SourceKind::kTarGz &&
      src.kind != SourceKind::kRecords)
    return {};
  if (f.size() != src.size_bytes)
    return "it is " + std::to_string(f.size()) + " bytes, the manifest has " +
           std::to_string(src.size_bytes);
  if (src.mtime_ns != 0 && f.version() != 0 && f.version() != src.mtime_ns)
    return "its modification time (or version) is not the manifest's";
  return {};
}

Status changed_error(const std::string& uri, const std::string& what) {
  return corrupt(uri + ": changed since its manifest was built: " + what +
                 "; rebuild the manifest (shardyard manifest build --source ..., or run with "
                 "--no-cache) or restore the shard");
}

// After a failed read of a file source: "changed" when the file's size or version is not
// the manifest's any more (it is not "truncated": it is another file now), else OK. A
// remote file opened with the manifest's size and version (FileSystem::open_known) learns
// of a change at its first read, not at its open.
Status source_changed(FileSystem& fs, const std::string& uri, uint64_t manifest_bytes,
                      int64_t manifest_version) {
  auto info = fs.stat(uri);
  if (!info.is_ok()) return Status::ok();
  if (info->size != manifest_bytes)
    return changed_error(uri, "it is now " + std::to_string(info->size) +
                                  " bytes, the manifest has " + std::to_string(manifest_bytes));
  if (manifest_version != 0 && info->mtime_ns != 0 && info->mtime_ns != manifest_version)
    return changed_error(uri, "its modification time (or version) is not the manifest's");
  return Status::ok();
}

class SourceFileReader final : public FileReader {
 public:
  SourceFileReader(FileSystem& fs, std::shared_ptr<RandomAccessFile> file, const SourceEntry& src)
      : fs_(fs),
        file_(std::move(file)),
        uri_(src.uri),
        size_bytes_(src.size_bytes),
        version_(src.mtime_ns) {}
  // Positioned reads (a local file's pread) are safe from several threads at once.
  Status read(uint64_t offset, uint8_t* dst, size_t n) const override {
    Status st = read_exact(*file_, offset, dst, n);
    if (st.is_ok()) return st;
    if (Status changed = source_changed(fs_, uri_, size_bytes_, version_); !changed.is_ok())
      return changed;
    return st;
  }

 private:
  FileSystem& fs_;
  const std::shared_ptr<RandomAccessFile> file_;
  const std::string uri_;
  const uint64_t size_bytes_;
  const int64_t version_;
};

// What one sample occupies when read: its members with their headers, or its files.
uint64_t sample_bytes(const SourceEntry& src, const SampleEntry& e) {
  return src.kind == SourceKind::kDirectory ? e.payload_bytes : e.end - e.begin;
}

Status too_large(const std::string& what, uint64_t bytes, uint64_t max) {
  return invalid_argument(what + " is " + std::to_string(bytes) +
                          " bytes, more than the bound of " + std::to_string(max) +
                          " bytes on one sample (--max-sample-bytes); raise the bound if such "
                          "samples are expected");
}

Status check_windows(const Manifest& m, uint64_t max) {
  const uint64_t window = m.window_payload_bytes();
  return window <= max ? Status::ok() : too_large("a window", window, max);
}

// Samples [first, last) of a source within the bound, or an error naming the first that is
// not. The source's largest sample within it (its table's totals): nothing to walk.
Status check_samples(const SourceEntry& src, uint64_t first, uint64_t last, uint64_t max) {
  const auto& t = src.samples.totals();
  if ((src.kind == SourceKind::kDirectory ? t.max_payload : t.max_range) <= max)
    return Status::ok();
  auto at = src.samples.iterator_at(first);
  for (uint64_t s = first; s < last; ++s, ++at) {
    const uint64_t bytes = sample_bytes(src, *at);
    if (bytes > max) return too_large(src.uri + ": sample '" + at->key + "'", bytes, max);
  }
  return Status::ok();
}

}  // namespace

std::shared_ptr<const FileReader> source_file_reader(FileSystem& fs,
                                                     std::shared_ptr<RandomAccessFile> file,
                                                     const SourceEntry& src) {
  return std::make_shared<SourceFileReader>(fs, std::move(file), src);
}

Status check_sample_bytes(const Manifest& manifest, uint64_t max_sample_bytes) {
  if (manifest.windows.enabled()) return check_windows(manifest, max_sample_bytes);
  for (const auto& src : manifest.sources)
    SY_RETURN_IF_ERROR(check_samples(src, 0, src.samples.size(), max_sample_bytes));
  return Status::ok();
}

SampleReader::SampleReader(FileSystem& fs, std::shared_ptr<const Manifest> manifest,
                           std::shared_ptr<BufferPool> pool, SampleReaderOptions options)
    : fs_(fs),
      manifest_(std::move(manifest)),
      pool_(std::move(pool)),
      max_open_(std::max<size_t>(1, options.max_open_files)),
      map_threshold_(options.map_threshold_bytes),
      max_sample_bytes_(options.max_sample_bytes) {
  const auto& sources = manifest_->sources;
  if (!sources.empty() && std::all_of(sources.begin(), sources.end(),
                                      [](const SourceEntry& s) { return is_remote_uri(s.uri); }))
    max_open_ = std::max(max_open_, options.max_open_remote_files);
}

SampleReader::~SampleReader() = default;

Result<std::shared_ptr<RandomAccessFile>> SampleReader::file(uint32_t source) {
  if (auto it = open_.find(source); it != open_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.place);
    return it->second.file;
  }
  const auto& src = manifest_->sources[source];
  // The manifest's size and version go with the open: a remote file system then checks
  // them on its reads instead of asking for them (a HEAD per file, one round trip each).
  FileInfo known;
  known.uri = src.uri;
  known.size = src.size_bytes;
  known.mtime_ns = src.mtime_ns;
  SY_ASSIGN_OR_RETURN(auto f, fs_.open_known(known));
  if (std::string diff = difference(src, *f); !diff.empty()) return changed_error(src.uri, diff);
  std::shared_ptr<RandomAccessFile> shared(std::move(f));
  if (open_.size() >= max_open_) {
    open_.erase(lru_.back());
    gz_.erase(lru_.back());
    cursors_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(source);
  open_[source] = OpenFile{shared, lru_.begin()};
  return shared;
}

Status SampleReader::read(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                          std::vector<Item>* out) {
  const auto& src = manifest_->sources.at(source);
  if (first >= last) return Status::ok();
  const uint64_t items = manifest_->source_items(source);
  if (last > items)
    return internal_error(src.uri + ": asked for items up to " + std::to_string(last) + " of " +
                          std::to_string(items));
  SY_RETURN_IF_ERROR(check_sizes(source, first, last));
  if (src.kind == SourceKind::kRecords) return read_records(source, first, last, id, out);
  if (src.kind == SourceKind::kDirectory) return read_dir(source, first, last, id, out);
  return read_tar(source, first, last, id, out);
}

Status SampleReader::check_sizes(uint32_t source, uint64_t first, uint64_t last) const {
  if (manifest_->windows.enabled()) return check_windows(*manifest_, max_sample_bytes_);
  return check_samples(manifest_->sources[source], first, last, max_sample_bytes_);
}

// A short read or a failed mapping of a source: the file changed when its size is not the
// manifest's any more (it is not "truncated": it is another file now); otherwise the error
// as it is.
Status SampleReader::changed(uint32_t source, const Status& st) {
  if (Status fault = mapping_fault(); !fault.is_ok()) return fault;
  const auto& src = manifest_->sources[source];
  if (src.kind != SourceKind::kDirectory)
    if (Status changed = source_changed(fs_, src.uri, src.size_bytes, src.mtime_ns);
        !changed.is_ok())
      return changed;
  if (st.code() != StatusCode::kCorrupt) return st;
  return Status(st.code(), st.message() + " (changed since its manifest was built?)");
}

void SampleReader::will_need(uint32_t source, uint64_t first, uint64_t last) {
  const auto& src = manifest_->sources.at(source);
  if (first >= last || last > manifest_->source_items(source)) return;
  if (src.kind == SourceKind::kRecords) {
    const auto& spec = manifest_->windows;
    const auto range = window_records(spec, first, last);
    const uint64_t own_end = std::min(range.end, src.records);
    if (auto f = file(source); f.is_ok())
      (*f)->will_need(range.begin * spec.record_bytes,
                      static_cast<size_t>((own_end - range.begin) * spec.record_bytes));
    if (range.end > src.records && source + 1 < manifest_->sources.size())
      if (auto g = file(source + 1); g.is_ok())
        (*g)->will_need(0, static_cast<size_t>((range.end - src.records) * spec.record_bytes));
    return;
  }
  if (src.kind != SourceKind::kTar) return;
  auto f = file(source);
  if (!f.is_ok() || !(*f)->wants_hints()) return;
  const auto [begin, end] = src.samples.byte_range(first, last);
  (*f)->will_need(begin, static_cast<size_t>(end - begin));
}

uint64_t SampleReader::hint_bytes(uint32_t source) {
  if (manifest_->sources.at(source).kind != SourceKind::kTar) return 0;
  auto f = file(source);
  return f.is_ok() ? (*f)->hint_bytes() : 0;
}

uint64_t SampleReader::tar_bytes(uint32_t source, uint64_t first, uint64_t last) const {
  const auto& src = manifest_->sources.at(source);
  if (src.kind != SourceKind::kTar || first >= last || last > manifest_->source_items(source))
    return 0;
  const auto [begin, end] = src.samples.byte_range(first, last);
  return end - begin;
}

Status SampleReader::read_tar(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                              std::vector<Item>* out) {
  const auto& src = manifest_->sources[source];
  const auto [begin, end] = src.samples.byte_range(first, last);
  SY_ASSIGN_OR_RETURN(auto f, file(source));
  if (unread_bytes_ > 0 && src.kind == SourceKind::kTar && !is_remote_uri(src.uri) &&
      (end - begin) / (last - first) >= unread_bytes_)
    return read_tar_unread(source, f, first, last, id, out);
  // A remote file "maps" a range it has fetched ahead (io/remote/read_ahead.h): the items
  // view the fetched block instead of a copy of it, whatever the size.
  const bool remote = is_remote_uri(src.uri);
  if (src.kind == SourceKind::kTar && (remote || end - begin >= map_threshold_)) {
    auto mapped = f->map(begin, end - begin);
    if (!mapped.is_ok()) return changed(source, mapped.status());
    if (*mapped) {
      bytes_read_ += end - begin;
      const auto& m = **mapped;
      // The items' owner says where the bytes lie in a local file (runtime/item.h
      // FileBytes), which another process can map itself; a remote file's block is memory.
      auto owner =
          remote ? std::shared_ptr<const void>(*mapped)
                 : file_bytes_owner(FileBytes{*mapped, m.data(), m.size(), source, begin, {}});
      return parse_buffer(source, m.data(), m.size(), std::move(owner), begin, first, last, id,
                          out);
    }
  }
  const size_t size = static_cast<size_t>(end - begin);
  std::shared_ptr<const void> owner;
  uint8_t* data = chunks_ ? chunks_->allocate(size, &owner) : nullptr;
  if (data == nullptr) {
    auto buf = pool_->acquire(size);
    data = buf->data();
    owner = std::move(buf);
  }
  if (src.kind == SourceKind::kTarGz) {
    Status st = inflate_range(source, f, begin, size, data);
    if (!st.is_ok()) {
      gz_.erase(source);  // a stream that failed is not resumed
      return changed(source, st);
    }
  } else {
    Status st = read_exact(*f, begin, data, size);
    if (!st.is_ok()) return changed(source, st);
  }
  bytes_read_ += size;
  return parse_buffer(source, data, size, std::move(owner), begin, first, last, id, out);
}

Status SampleReader::parse_buffer(uint32_t source, const uint8_t* data, size_t size,
                                  std::shared_ptr<const void> owner, uint64_t base, uint64_t first,
                                  uint64_t last, uint64_t id, std::vector<Item>* out) {
  const std::string& uri = manifest_->sources[source].uri;
  return parse(
      source,
      [&](const TarPayloadFn& on_entry) {
        return parse_tar_buffer(data, size, base, uri, on_entry);
      },
      base + size, std::move(owner), first, last, id, out);
}

// Large members are left where they are: headers and small members come in with small
// positioned reads (walk_tar_range), the rest becomes unread fields.
Status SampleReader::read_tar_unread(uint32_t source, const std::shared_ptr<RandomAccessFile>& f,
                                     uint64_t first, uint64_t last, uint64_t id,
                                     std::vector<Item>* out) {
  const auto& src = manifest_->sources[source];
  const auto range = src.samples.byte_range(first, last);
  const uint64_t begin = range.begin, end = range.end;  // a lambda below takes them
  auto small = std::make_shared<SmallBytes>();
  FileBytes file;
  file.keep = small;
  file.source = source;
  file.reader = source_file_reader(fs_, f, src);
  const FileReader& reader = *file.reader;
  Status st = parse(
      source,
      [&](const TarPayloadFn& on_entry) {
        return walk_tar_range(reader, begin, end, src.uri, unread_bytes_, on_entry);
      },
      end, file_bytes_owner(std::move(file)), first, last, id, out, small.get());
  if (st.is_ok()) bytes_read_ += end - begin;
  return st;
}

namespace {

// Said of a shard whose bytes do not match its manifest, with the commands that fix it.
constexpr const char* kChangedSinceManifest =
    " (the shard changed since its manifest was built: rebuild the manifest with `shardyard "
    "manifest build` and the same --source, or run with --no-cache)";

}  // namespace

// Inflates uncompressed bytes [begin, begin + n) of a .tar.gz source into dst, forward from
// where this reader's stream of it stopped (skipped bytes are inflated and dropped, a
// block at a time; only [begin, begin + n) is ever held).
Status SampleReader::inflate_range(uint32_t source, const std::shared_ptr<RandomAccessFile>& f,
                                   uint64_t begin, uint64_t n, uint8_t* dst) {
  auto& cur = gz_[source];
  if (!cur || cur->stream->position() > begin) {
    cur = std::make_unique<GzCursor>();
    cur->stream = gzip_stream(f);
  }
  SY_RETURN_IF_ERROR(cur->stream->skip(begin - cur->stream->position()));
  uint64_t done = 0;
  while (done < n) {
    SY_ASSIGN_OR_RETURN(size_t got, cur->stream->read(dst + done, static_cast<size_t>(n - done)));
    if (got == 0)
      return corrupt(manifest_->sources[source].uri + ": the stream ends at uncompressed byte " +
                     std::to_string(begin + done));
    done += got;
  }
  return Status::ok();
}

Status SampleReader::parse(uint32_t source, const std::function<Status(const TarPayloadFn&)>& walk,
                           uint64_t end, std::shared_ptr<const void> owner, uint64_t first,
                           uint64_t last, uint64_t id, std::vector<Item>* out, SmallBytes* small) {
  const auto& src = manifest_->sources[source];
  // A member's field: a view of its payload (copied to `small` when given), or unread.
  auto add_field = [small](Item* item, std::string name, const TarEntry& e,
                           const uint8_t* payload) {
    const size_t size = static_cast<size_t>(e.size);
    if (payload == nullptr && size > 0) {
      item->put_field(Field{std::move(name), nullptr, size, e.data_offset});
    } else {
      item->put_field(Field{std::move(name), small ? small->add(payload, size) : payload, size, 0});
    }
  };
  uint64_t sample = first;
  out->reserve(out->size() + (last - first));
  // At `sample`: decoded once each. A logical shard's runs are read in order, so a walk
  // over an earlier run of this source usually stopped where this one starts.
  SampleTable::const_iterator want_at;
  bool found = false;
  if (auto kept = cursors_.find(source); kept != cursors_.end()) {
    auto& at = kept->second;
    auto hit =
        std::find_if(at.begin(), at.end(), [&](const auto& c) { return c.index() == first; });
    if (hit != at.end()) {
      want_at = std::move(*hit);
      at.erase(hit);
      found = true;
    }
  }
  if (!found) want_at = src.samples.iterator_at(first);
  Item* cur = nullptr;
  uint64_t cur_end = 0;  // where the current sample's byte range ends
  auto mismatch = [&](uint64_t offset, const std::string& what) {
    // Zeros from a mapping cut short read as damage: name the real cause.
    if (Status fault = mapping_fault(); !fault.is_ok()) return fault;
    return corrupt(src.uri + " at byte " + std::to_string(offset) + ": " + what +
                   kChangedSinceManifest);
  };
  Status parsed = walk([&](const TarEntry& e, const uint8_t* payload) -> Status {
    if (cur != nullptr && e.start_offset < cur_end) {
      // Inside the current sample: members WebDataset's rule skips may lie between
      // its members (a directory entry, a README); every other one has its key.
      if (!e.regular) return Status::ok();
      auto kf = split_key(e.path);
      if (!kf) return Status::ok();
      if (kf->key != cur->key || e.sparse)
        return mismatch(e.start_offset, "member '" + e.path + "' inside sample '" + cur->key + "'");
      add_field(cur, std::move(kf->field), e, payload);
      return Status::ok();
    }
    // Between samples lie the members in no sample of the manifest: skipped ones, and
    // a sample dropped as damaged under --on-corrupt skip.
    if (sample >= last) return mismatch(e.start_offset, "more samples than expected");
    const SampleEntry& want = *want_at;
    if (e.start_offset < want.begin) return Status::ok();
    auto kf = e.regular && !e.sparse ? split_key(e.path) : std::nullopt;
    if (e.start_offset != want.begin || !kf || kf->key != want.key)
      return mismatch(e.start_offset, "expected sample '" + want.key + "'");
    out->emplace_back();
    cur = &out->back();
    cur_end = want.end;
    cur->id = id + (sample - first);
    cur->key = std::string(kf->key);
    cur->owner = owner;
    cur->fields.reserve(4);
    ++sample;
    ++want_at;
    add_field(cur, std::move(kf->field), e, payload);
    return Status::ok();
  });
  if (!parsed.is_ok()) {
    if (Status fault = mapping_fault(); !fault.is_ok()) return fault;
    return parsed;
  }
  if (open_.count(source) != 0) {
    auto& at = cursors_[source];
    if (at.size() == kMaxCursorsPerSource) at.erase(at.begin());
    at.push_back(std::move(want_at));
  }
  if (sample != last)
    return mismatch(end, "found " + std::to_string(sample - first) +
                             " samples where the manifest has " + std::to_string(last - first));
  return Status::ok();
}

Status SampleReader::read_records(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                                  std::vector<Item>* out) {
  const auto& src = manifest_->sources[source];
  const auto& spec = manifest_->windows;
  const uint64_t rb = spec.record_bytes;
  const auto range = window_records(spec, first, last);
  const uint64_t own_end = std::min(range.end, src.records);  // records read from this source
  const uint64_t head = range.end - own_end;                  // records of the next source
  if (head > 0 &&
      (source + 1 >= manifest_->sources.size() || head > manifest_->sources[source + 1].records))
    return internal_error(src.uri + ": windows up to " + std::to_string(last) +
                          " run past the records that stitching can use");
  const uint64_t own_bytes = (own_end - range.begin) * rb, head_bytes = head * rb;
  const uint64_t total = own_bytes + head_bytes;
  SY_ASSIGN_OR_RETURN(auto f, file(source));

  const uint8_t* data = nullptr;
  std::shared_ptr<const void> owner;
  if (head == 0 && total >= map_threshold_) {
    auto mapped = f->map(range.begin * rb, static_cast<size_t>(total));
    if (!mapped.is_ok()) return changed(source, mapped.status());
    if (*mapped) {
      data = (*mapped)->data();
      owner = *mapped;
    }
  }
  if (owner == nullptr) {
    auto buf = pool_->acquire(static_cast<size_t>(total));
    Status st = read_exact(*f, range.begin * rb, buf->data(), static_cast<size_t>(own_bytes));
    if (!st.is_ok()) return changed(source, st);
    if (head > 0) {
      // Stitched: the next source's head follows this source's tail in the same buffer.
      SY_ASSIGN_OR_RETURN(auto g, file(source + 1));
      st = read_exact(*g, 0, buf->data() + own_bytes, static_cast<size_t>(head_bytes));
      if (!st.is_ok()) return changed(source + 1, st);
    }
    data = buf->data();
    owner = std::move(buf);
  }
  bytes_read_ += total;

  const std::string_view base = uri_base_name(src.uri);
  const size_t x_bytes = static_cast<size_t>(spec.length * rb);
  const uint64_t y_at = window_target_offset(spec);
  out->reserve(out->size() + static_cast<size_t>(last - first));
  for (uint64_t w = first; w < last; ++w) {
    const uint64_t start = window_start(spec, w);
    const uint8_t* at = data + (start - range.begin) * rb;
    Item item;
    item.id = id + (w - first);
    item.key = window_key(base, start);
    item.owner = owner;
    item.fields.reserve(spec.target > 0 ? 2 : 1);
    item.fields.push_back(Field{"x", at, x_bytes});
    if (spec.target > 0) item.fields.push_back(Field{"y", at + y_at * rb, static_cast<size_t>(rb)});
    out->push_back(std::move(item));
  }
  return Status::ok();
}

Status SampleReader::read_dir(uint32_t source, uint64_t first, uint64_t last, uint64_t id,
                              std::vector<Item>* out) {
  const auto& src = manifest_->sources[source];
  auto at = src.samples.iterator_at(first);
  for (uint64_t s = first; s < last; ++s, ++at) {
    const SampleEntry& e = *at;
    Item item;
    item.id = id + (s - first);
    item.key = e.key;
    for (uint64_t k = e.begin; k < e.end; ++k) {
      const std::string& rel = src.files.at(k);
      auto kf = split_key(rel);
      if (!kf) continue;  // a file WebDataset's rule skips, between the sample's files
      if (kf->key != e.key)
        return corrupt(src.uri + ": file '" + rel + "' is not part of sample '" + e.key + "'" +
                       kChangedSinceManifest);
      SY_ASSIGN_OR_RETURN(auto f, fs_.open(src.uri + "/" + rel));
      auto buf = pool_->acquire(f->size());
      SY_RETURN_IF_ERROR(read_exact(*f, 0, buf->data(), f->size()));
      bytes_read_ += f->size();
      item.set_field_view(std::move(kf->field), buf->data(), buf->size());
      item.owners.push_back(std::move(buf));
    }
    out->push_back(std::move(item));
  }
  return Status::ok();
}

}  // namespace shardyard::io
