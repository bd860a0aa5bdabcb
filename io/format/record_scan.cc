#include "io/format/record_scan.h"

#include "io/format/parallel.h"
#include "io/format/sources.h"
#include "io/fs/uri.h"

namespace shardyard::io {

Result<std::vector<std::string>> resolve_record_sources(FileSystem& fs,
                                                        const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const auto& p : patterns) {
    SY_ASSIGN_OR_RETURN(auto uris, expand_braces(p));
    for (auto& uri : uris) {
      bool folder = false;
      if (is_remote_uri(uri)) {
        folder = !uri.empty() && uri.back() == '/';
      } else {
        auto info = fs.stat(uri);
        folder = info.is_ok() && info->is_directory;
      }
      if (!folder) {
        out.push_back(std::move(uri));  // a missing file is reported by the stat that follows
        continue;
      }
      SY_ASSIGN_OR_RETURN(auto files, fs.list(uri));
      if (files.empty()) return not_found(redact_url(uri) + ": no record files in it");
      std::string dir = uri;
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
      for (const auto& f : files) out.push_back(dir + "/" + f);
    }
  }
  if (out.empty()) return invalid_argument("no sources given");
  return out;
}

Result<Manifest> build_record_manifest(FileSystem& fs, const std::vector<std::string>& sources,
                                       const WindowSpec& spec, unsigned threads) {
  SY_RETURN_IF_ERROR(validate_window_spec(spec));
  SY_ASSIGN_OR_RETURN(auto uris, resolve_record_sources(fs, sources));

  Manifest m;
  m.windows = spec;
  m.sources.resize(uris.size());
  std::vector<Status> errors(uris.size());
  bool remote = false;
  for (const auto& u : uris) remote = remote || is_remote_uri(u);
  parallel_for(uris.size(), remote ? std::max(threads, 32u) : std::max(threads, 1u), [&](size_t i) {
    auto info = fs.stat(uris[i]);
    if (!info.is_ok()) {
      errors[i] = info.status();
      return;
    }
    auto& s = m.sources[i];
    s.uri = uris[i];
    s.kind = SourceKind::kRecords;
    s.size_bytes = info->size;
    s.mtime_ns = info->mtime_ns;
  });
  for (const auto& e : errors) SY_RETURN_IF_ERROR(e);

  const uint64_t rb = spec.record_bytes;
  for (auto& s : m.sources) {
    const std::string name = redact_url(s.uri);
    if (s.size_bytes == 0)
      return invalid_argument(name + ": empty record file (0 bytes): it holds no record");
    if (s.size_bytes % rb != 0)
      return invalid_argument(name + ": size " + std::to_string(s.size_bytes) +
                              " bytes is not a multiple of --record-bytes " + std::to_string(rb) +
                              " (remainder " + std::to_string(s.size_bytes % rb) +
                              " bytes): wrong record size, or a truncated file?");
    s.records = s.size_bytes / rb;
    if (!spec.stitch && s.records < spec.span())
      return invalid_argument(name + ": " + std::to_string(s.records) +
                              " records are fewer than a window's span of " +
                              std::to_string(spec.span()) +
                              " records (LENGTH + TARGET); use --stitch to complete windows "
                              "with the head of the next source");
  }
  for (size_t i = 0; i < m.sources.size(); ++i) {
    auto& s = m.sources[i];
    const uint64_t next = i + 1 < m.sources.size() ? m.sources[i + 1].records : 0;
    s.windows = window_count(spec, s.records, next);
    if (s.windows == 0)
      return invalid_argument(
          redact_url(s.uri) + ": yields no window (" + std::to_string(s.records) +
          " records, a window spans " + std::to_string(spec.span()) + " records" +
          (i + 1 < m.sources.size() ? ", the next source has " + std::to_string(next)
                                    : ", and it is the last source, which has no next") +
          "); give fewer or shorter windows or leave this source out");
  }
  m.fingerprint = compute_fingerprint(m);
  return m;
}

}  // namespace shardyard::io
