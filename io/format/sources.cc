#include "io/format/sources.h"

#include <algorithm>

#include "io/fs/uri.h"

namespace shardyard::io {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

Result<std::vector<std::string>> expand_braces(const std::string& pattern) {
  auto open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos)
      return invalid_argument("source pattern '" + pattern + "' has '}' without '{'");
    return std::vector<std::string>{pattern};
  }
  auto close = pattern.find('}', open);
  if (close == std::string::npos)
    return invalid_argument("source pattern '" + pattern + "' has '{' without '}'");
  std::string inner = pattern.substr(open + 1, close - open - 1);
  std::string head = pattern.substr(0, open);
  SY_ASSIGN_OR_RETURN(auto tails, expand_braces(pattern.substr(close + 1)));

  std::vector<std::string> choices;
  auto dots = inner.find("..");
  if (dots != std::string::npos) {
    std::string lo = inner.substr(0, dots), hi = inner.substr(dots + 2);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18)
      return invalid_argument("source pattern '" + pattern + "': range {" + inner +
                              "} must be two non-negative integers, as in {000..127}");
    uint64_t a = std::stoull(lo), b = std::stoull(hi);
    if (a > b)
      return invalid_argument("source pattern '" + pattern + "': range {" + inner +
                              "} goes backwards");
    if (b - a > 10000000)
      return invalid_argument("source pattern '" + pattern + "': range {" + inner +
                              "} is too large");
    size_t width = (lo.size() > 1 && lo[0] == '0') ? lo.size() : 0;
    for (uint64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      choices.push_back(std::move(s));
    }
  } else {
    size_t pos = 0;
    for (;;) {
      auto comma = inner.find(',', pos);
      choices.push_back(inner.substr(pos, comma - pos));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  std::vector<std::string> out;
  out.reserve(choices.size() * tails.size());
  for (const auto& c : choices)
    for (const auto& t : tails) out.push_back(head + c + t);
  return out;
}

SourceKind kind_from_name(const std::string& uri) {
  if (ends_with(uri, ".tar.gz") || ends_with(uri, ".tgz")) return SourceKind::kTarGz;
  return SourceKind::kTar;
}

Result<std::vector<SourceRef>> resolve_sources(FileSystem& fs,
                                               const std::vector<std::string>& patterns) {
  std::vector<SourceRef> out;
  for (const auto& p : patterns) {
    SY_ASSIGN_OR_RETURN(auto uris, expand_braces(p));
    for (auto& uri : uris) {
      if (is_remote_uri(uri)) {
        // Never a request per shard here (a HEAD each would delay the first batch by
        // thousands of round trips): an object is taken as named, and only a folder
        // ("s3://bucket/prefix/") costs a listing.
        if (uri.back() != '/') {
          out.push_back({uri, kind_from_name(uri)});
          continue;
        }
        SY_ASSIGN_OR_RETURN(auto files, fs.list(uri));
        const size_t before = out.size();
        for (const auto& f : files)
          if (ends_with(f, ".tar") || ends_with(f, ".tar.gz") || ends_with(f, ".tgz"))
            out.push_back({uri + f, kind_from_name(f)});
        if (out.size() == before)
          return not_found(redact_url(uri) + ": no .tar, .tar.gz or .tgz objects under it");
        continue;
      }
      auto info = fs.stat(uri);
      if (info.is_ok() && info->is_directory) {
        SY_ASSIGN_OR_RETURN(auto files, fs.list(uri));
        std::vector<std::string> shards;
        for (const auto& f : files)
          if (ends_with(f, ".tar") || ends_with(f, ".tar.gz") || ends_with(f, ".tgz"))
            shards.push_back(f);
        std::string dir = uri;
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        if (shards.empty()) {
          out.push_back({dir, SourceKind::kDirectory});
        } else {
          for (const auto& s : shards) {
            std::string full = dir + "/" + s;
            out.push_back({full, kind_from_name(full)});
          }
        }
        continue;
      }
      // Missing files are kept: the scan reports them (or skips them, by policy).
      out.push_back({uri, kind_from_name(uri)});
    }
  }
  if (out.empty()) return invalid_argument("no sources given");
  return out;
}

}  // namespace shardyard::io
