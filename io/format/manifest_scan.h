// Building manifests: a header scan of every source, in parallel, with a cache.
//
// Local tar shards are scanned header by header through a small read-ahead window: a
// payload larger than the window is skipped with a seek and never read (for a remote shard
// the read after such a seek is one small ranged GET); gzip-compressed
// shards are inflated once; a directory source is listed and its files stat'ed. Members
// are grouped into samples by WebDataset's rule (io/format/tar.h: split_key); members that rule
// leaves out are skipped and counted (SourceEntry::members_skipped), or with
// strict_members are damage. Damage is handled by policy: kFail returns the first error
// (file and byte offset); kSkip keeps every whole sample, marks the source damaged and
// goes on: past a damaged sample (a repeated field) to the next one, and up to the damage
// when the archive itself is broken there (nothing after it can be trusted).
//
// The cache holds one manifest file per list of sources, reused while every source keeps
// what the scan saw: a local file its size, modification and status change times and
// inode; a directory its file list and every file's; a remote object its size,
// Last-Modified and ETag (one HEAD each, in parallel). Under kSkip a remote shard that
// stays unreachable after the client's retries is damage too: skipped, counted and warned
// about.
//
// Thread-safe: functions only; scanning uses its own threads and joins them.
#pragma once

#include <string>
#include <vector>

#include "io/format/sources.h"
#include "io/fs/file_system.h"
#include "runtime/manifest.h"

namespace shardyard::io {

using shardyard::OnCorrupt;  // runtime/manifest.h

enum class CacheMode {
  kUse,      // read the cached manifest when it is fresh, else scan and write it
  kRebuild,  // scan and write it, whatever is cached (`shardyard manifest build`)
  // Scan and write nothing, but remove a cached manifest of these sources that differs
  // from the scan (stale or damaged), so no later run reads it (`--no-cache`).
  kBypass,
};

struct ScanOptions {
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  // A member WebDataset's rule skips, other than a directory entry, is damage instead of
  // a skipped member: an error under kFail, a damaged source under kSkip.
  bool strict_members = false;
  unsigned threads = 2;  // sources scanned in parallel; 0 = hardware concurrency
  // At least this many in parallel when a source is remote (http://, https://, s3://):
  // each is a few round trips that wait on the network, not on the CPU.
  unsigned remote_connections = 32;
  std::string cache_dir;  // empty: no cache at all
  CacheMode cache_mode = CacheMode::kUse;
};

using shardyard::ScanReport;  // runtime/manifest.h

// Scans one source.
Result<SourceEntry> scan_source(FileSystem& fs, const SourceRef& ref, OnCorrupt on_corrupt,
                                bool strict_members = false);

// Resolves the patterns, then loads the manifest from the cache or scans and caches it.
Result<Manifest> build_manifest(FileSystem& fs, const std::vector<std::string>& patterns,
                                const ScanOptions& options, ScanReport* report);

// Atomic write (temporary file, fsync, rename) and validated read of a manifest file.
// build_manifest() loads its cache files with ManifestCheck::kChecksum (they are its own).
Status save_manifest(const Manifest& m, const std::string& path);
Result<Manifest> load_manifest(const std::string& path, ManifestCheck check = ManifestCheck::kFull);

// The default cache folder: $SHARDYARD_CACHE_DIR, else $XDG_CACHE_HOME/shardyard, else
// ~/.cache/shardyard.
std::string default_cache_dir();

}  // namespace shardyard::io
