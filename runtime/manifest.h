// Manifest: what a dataset holds, per source, and the dataset's fingerprint.
//
// A manifest lists every source (a tar shard, a gzip-compressed tar shard, or a directory
// of sample files) with its samples: key and where the sample's members lie. Planning
// (logical shards, the global order, steps per epoch) is a pure function of the item
// counts; readers use the byte ranges to read a run of samples without scanning the source
// again. Building a manifest needs I/O and lives in io/format/manifest_scan.h; this header is
// plain data plus its versioned on-disk format (see docs/manifest-format.md).
//
// A windows dataset (docs/windows.md) has kRecords sources of fixed-size records and a
// WindowSpec; its items are windows, implicit: a source stores its record and window
// counts, never one entry per window. Code that needs a source's item count or an item's
// key goes through source_items() and item_key(), which work for every kind. A records
// manifest is built from stat calls (io/format/record_scan.h) and is never cached or encoded.
//
// Thread-compatible: a Manifest is immutable once built and may be shared read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sample_table.h"
#include "runtime/status.h"
#include "runtime/window.h"

namespace shardyard {

// The default bound on one sample's bytes (LoaderOptions::max_sample_bytes,
// `shardyard run --max-sample-bytes`).
inline constexpr uint64_t kDefaultMaxSampleBytes = uint64_t{256} << 20;

enum class SourceKind : uint8_t {
  kTar = 0,        // seekable tar file: byte ranges are file offsets
  kTarGz = 1,      // gzip-compressed tar: byte ranges are offsets in the uncompressed stream
  kDirectory = 2,  // directory of sample files: ranges index `files`
  kRecords = 3,    // raw fixed-size records; items are the manifest's windows (implicit)
};
const char* source_kind_name(SourceKind kind);

struct SourceEntry {
  std::string uri;  // as given by the user after pattern expansion
  SourceKind kind = SourceKind::kTar;
  // What the scan saw, for the cache's freshness check (io/format/manifest_scan.h): a cached
  // manifest is stale when any of them differs now. size_bytes: the file's size (a
  // directory: sum of its files); mtime_ns: its modification time (a remote object: a
  // stamp of Last-Modified and ETag); ctime_ns and inode: a local file's status change time
  // and inode number, which a copy with the old size and mtime (`cp -p`) does not keep;
  // files_digest: a directory's digest of every file's name, size, times and inode.
  uint64_t size_bytes = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  uint64_t files_digest = 0;
  SampleTable samples;             // packed (runtime/sample_table.h)
  std::vector<std::string> files;  // kDirectory only: member files relative to uri, sorted
  // kRecords only: size_bytes / record_bytes, and how many windows the source yields
  // (window_count() with the next source's records).
  uint64_t records = 0;
  uint64_t windows = 0;
  // Set when the scan met damage and the policy was to skip it: the samples above are the
  // intact ones before `damaged_at`, a byte offset (or file index); the rest is skipped.
  bool damaged = false;
  uint64_t damaged_at = 0;
  std::string damage;  // what was wrong, for the warning
  // Members in no sample, skipped as WebDataset skips them (docs/tar.md): directories,
  // links and other non-file types, names without a key.ext form, metadata names.
  uint64_t members_skipped = 0;
};

// What building a manifest does with a damaged source: stop with the first error (file and
// byte offset), or keep the intact samples before the damage, mark the source damaged and
// go on (io/format/manifest_scan.h).
enum class OnCorrupt { kFail, kSkip };

// How a manifest was obtained.
struct ScanReport {
  bool from_cache = false;
  std::string cache_path;             // where it was read from or written to
  std::vector<std::string> skipped;   // one per damaged source (kSkip): what was skipped
  std::vector<std::string> warnings;  // other news, such as a cache that was not written
};

struct Manifest {
  std::vector<SourceEntry> sources;
  uint64_t fingerprint = 0;  // see compute_fingerprint()
  WindowSpec windows;        // enabled() iff the sources are kRecords
  // Scanned with ScanOptions::strict_members: skipped members other than directories were
  // errors (or damage), so a cache built otherwise does not stand for such a scan.
  bool strict_members = false;

  // Items of source i: its samples, or its windows for a kRecords source.
  uint64_t source_items(size_t i) const;
  // Key of item `index` of source i: the sample's key, or "<base name>@<first record>".
  std::string item_key(size_t i, uint64_t index) const;
  // Payload bytes of one window (x, plus y with a target); 0 without windows.
  uint64_t window_payload_bytes() const;
  uint64_t num_samples() const;  // items of all sources (samples or windows)
  uint64_t payload_bytes() const;
  size_t num_damaged() const;
  uint64_t members_skipped() const;  // over all sources
  // True when every source can be read at any sample without reading those before it.
  bool seekable() const;
  std::string fingerprint_hex() const;
};

// The fingerprint identifies the dataset's content layout, not where it is stored: it
// hashes each source's base name and kind and each sample's key and byte range, so the
// same shards copied elsewhere (or served over HTTP) keep their fingerprint, while a
// changed, added, removed or reordered shard changes it. A records source contributes its
// base name, size and record count, and the WindowSpec is hashed too, so other windows
// over the same files are another dataset.
uint64_t compute_fingerprint(const Manifest& m);

// Versioned binary encoding (magic "SYMANIF\0", format version, body, 64-bit checksum).
// With checksum false the checksum is 0 (not computed): only for decode_manifest() with
// ManifestCheck::kLayout.
std::string encode_manifest(const Manifest& m, bool checksum = true);

// What decode_manifest() checks beyond the magic, the version and the layout (which it
// always checks, so that damage is an error, never a crash). Only kFull checks that each
// sample table is coded as this build codes it (SampleTable::Check::kCanonical); the
// others take the tables' bounds only, vouched for by the checksum or the rank.
enum class ManifestCheck {
  // Nothing more: for bytes that a process of the same job encoded moments before and
  // handed over in memory (a rank's manifest for its worker processes), whose fingerprint
  // the reader compares with the one it was told.
  kLayout,
  // The checksum, and the stored fingerprint taken as it is: for a manifest cache file,
  // which build_manifest() wrote (this build, or another of the same format version).
  // Computing the fingerprint again walks every key and range through a byte-wise hash,
  // most of the time a cached manifest takes to load (docs/performance.md, "Opening a
  // cached manifest"). Taking it as stored is sound because decoding refuses any format
  // version but the current one, and a change to compute_fingerprint() is a change of that
  // version (tests/runtime/manifest_test.cc pins its value).
  kChecksum,
  // The checksum, and the fingerprint computed again from the content and compared with
  // the stored one: for a manifest file a user names (shardyard manifest show FILE).
  kFull,
};

// Decodes and validates magic, version, layout and what `check` adds; `name` is used in
// error messages.
// With `keep` set, `bytes` stay unchanged while `keep` lives (a memory-mapped manifest file,
// shared by every process of the node that maps it) and the sample tables borrow them
// instead of holding copies (runtime/sample_table.h).
Result<Manifest> decode_manifest(std::string_view bytes, const std::string& name,
                                 ManifestCheck check = ManifestCheck::kFull,
                                 std::shared_ptr<const void> keep = nullptr);
// The same, reading the encoded bytes (`total_bytes` of them) from `source` block by block,
// so the file is never held in memory whole. `source` returns how many bytes it wrote (0 at
// the end) or an error.
using ManifestSource = std::function<Result<size_t>(char* dst, size_t n)>;
Result<Manifest> decode_manifest(const ManifestSource& source, uint64_t total_bytes,
                                 const std::string& name,
                                 ManifestCheck check = ManifestCheck::kFull);

// Version 2 added members_skipped, strict_members, ctime_ns, inode and files_digest;
// version 3 stores each source's samples as SampleTable packs them. Older files are refused
// (as stale: a cache rebuilds them), never read with defaults.
inline constexpr uint32_t kManifestFormatVersion = 3;

}  // namespace shardyard
