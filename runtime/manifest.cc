#include "runtime/manifest.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/codec.h"
#include "runtime/hash.h"

namespace shardyard {

const char* source_kind_name(SourceKind kind) {
  switch (kind) {
    case SourceKind::kTar:
      return "tar";
    case SourceKind::kTarGz:
      return "tar.gz";
    case SourceKind::kDirectory:
      return "directory";
    case SourceKind::kRecords:
      return "records";
  }
  return "unknown";
}

uint64_t Manifest::source_items(size_t i) const {
  const auto& s = sources[i];
  return s.kind == SourceKind::kRecords ? s.windows : s.samples.size();
}

std::string Manifest::item_key(size_t i, uint64_t index) const {
  const auto& s = sources[i];
  if (s.kind == SourceKind::kRecords)
    return window_key(uri_base_name(s.uri), window_start(windows, index));
  return s.samples[index].key;
}

uint64_t Manifest::window_payload_bytes() const {
  if (!windows.enabled()) return 0;
  return (windows.length + (windows.target > 0 ? 1 : 0)) * windows.record_bytes;
}

uint64_t Manifest::num_samples() const {
  uint64_t n = 0;
  for (size_t i = 0; i < sources.size(); ++i) n += source_items(i);
  return n;
}

uint64_t Manifest::payload_bytes() const {
  uint64_t n = 0;
  for (const auto& s : sources) {
    if (s.kind == SourceKind::kRecords) {
      n += s.windows * window_payload_bytes();
      continue;
    }
    n += s.samples.totals().payload_bytes;
  }
  return n;
}

size_t Manifest::num_damaged() const {
  size_t n = 0;
  for (const auto& s : sources) n += s.damaged ? 1 : 0;
  return n;
}

uint64_t Manifest::members_skipped() const {
  uint64_t n = 0;
  for (const auto& s : sources) n += s.members_skipped;
  return n;
}

bool Manifest::seekable() const {
  for (const auto& s : sources)
    if (s.kind == SourceKind::kTarGz) return false;
  return true;
}

std::string Manifest::fingerprint_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fingerprint));
  return buf;
}

uint64_t compute_fingerprint(const Manifest& m) {
  Hasher h;
  h.add_u64(m.sources.size());
  for (const auto& s : m.sources) {
    h.add_string(uri_base_name(s.uri));
    h.add_u64(static_cast<uint64_t>(s.kind));
    if (s.kind == SourceKind::kRecords) {
      h.add_u64(s.size_bytes);
      h.add_u64(s.records);
      continue;
    }
    h.add_u64(s.samples.size());
    for (const auto& e : s.samples) {
      h.add_string(e.key);
      h.add_u64(e.begin);
      h.add_u64(e.end);
      h.add_u64(e.payload_bytes);
    }
  }
  // Only windows datasets hash a spec, so the fingerprints of tar datasets (and the
  // checkpoints that name them) stay what they were.
  if (m.windows.enabled()) {
    h.add_string("windows");
    h.add_u64(m.windows.record_bytes);
    h.add_u64(m.windows.length);
    h.add_u64(m.windows.stride);
    h.add_u64(m.windows.target);
    h.add_u64(m.windows.stitch ? 1 : 0);
  }
  return h.digest();
}

// ---- encoding ----------------------------------------------------------------------------
// Layout (all integers little-endian):
//   magic "SYMANIF\0" (8) | u32 version | u32 flags (0) | u64 body_size | body | u64 checksum
// checksum = Hasher over body. body (version 3):
//   u64 fingerprint | u8 strict_members | u64 num_sources | per source:
//     str uri | u8 kind | u64 size_bytes | i64 mtime_ns | i64 ctime_ns | u64 inode |
//     u64 files_digest | u8 damaged | u64 damaged_at | str damage | u64 members_skipped |
//     u64 num_files | str file... | u64 num_samples | u64 table_bytes |
//     table: the samples as SampleTable packs them (runtime/sample_table.h)
//   str = u32 length + bytes; a u8 flag is 0 or 1.

namespace {
constexpr char kMagic[8] = {'S', 'Y', 'M', 'A', 'N', 'I', 'F', '\0'};

// Reads the body from a ManifestSource in blocks (the whole file is never held at once),
// hashing every consumed byte for the checksum that follows the body.
struct Reader {
  const ManifestSource* source = nullptr;
  uint64_t body_size = 0;
  uint64_t left = 0;  // body bytes not yet fetched from the source
  std::string buf;
  size_t pos = 0;
  bool failed = false;
  Status io;  // a read error of the source
  Hasher hash;
  bool hashing = true;

  bool need(size_t n) {
    if (failed) return false;
    if (buf.size() - pos >= n) return true;
    buf.erase(0, pos);
    pos = 0;
    while (buf.size() < n && left > 0) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(left, std::max<size_t>(n, 1u << 20)));
      size_t at = buf.size();
      buf.resize(at + want);
      auto got = (*source)(buf.data() + at, want);
      if (!got.is_ok() || *got == 0) {
        if (!got.is_ok()) io = got.status();
        buf.resize(at);
        break;
      }
      buf.resize(at + *got);
      left -= *got;
    }
    if (buf.size() < n) failed = true;
    return !failed;
  }
  std::string_view take(size_t n) {
    std::string_view v(buf.data() + pos, n);
    if (hashing) hash.add(v);
    pos += n;
    return v;
  }
  uint64_t uint(int bytes) {
    if (!need(static_cast<size_t>(bytes))) return 0;
    auto v = take(static_cast<size_t>(bytes));
    uint64_t out = 0;
    for (int i = 0; i < bytes; ++i)
      out |= static_cast<uint64_t>(static_cast<unsigned char>(v[i])) << (8 * i);
    return out;
  }
  std::string str() {
    auto n = uint(4);
    if (!need(n)) return {};
    return std::string(take(n));
  }
  bool done() const { return left == 0 && pos == buf.size(); }
  // Offset in the body of the next byte take() returns.
  uint64_t body_pos() const { return body_size - left - (buf.size() - pos); }
  // Hashes everything of the body not consumed yet (after a decode error).
  void drain() {
    hash.add(std::string_view(buf).substr(pos));
    pos = buf.size();
    std::string block(1u << 20, '\0');
    while (left > 0 && io.is_ok()) {
      auto got =
          (*source)(block.data(), static_cast<size_t>(std::min<uint64_t>(left, block.size())));
      if (!got.is_ok() || *got == 0) {
        if (!got.is_ok()) io = got.status();
        break;
      }
      hash.add(std::string_view(block.data(), *got));
      left -= *got;
    }
  }
};

// The smallest encodings of a source and of a file name: a count larger than the
// body divided by these is damage, refused before anything is allocated for it.
constexpr uint64_t kMinSourceBytes = 4 + 1 + 8 + 8 + 8 + 8 + 8 + 1 + 8 + 4 + 8 + 8 + 8 + 8;
constexpr uint64_t kMinFileBytes = 4;

}  // namespace

std::string encode_manifest(const Manifest& m, bool checksum) {
  ByteWriter body = begin_envelope(kMagic, kManifestFormatVersion);
  body.u64(m.fingerprint);
  body.u8(m.strict_members ? 1 : 0);
  body.u64(m.sources.size());
  for (const auto& s : m.sources) {
    body.str(s.uri);
    body.u8(static_cast<uint8_t>(s.kind));
    body.u64(s.size_bytes);
    body.u64(static_cast<uint64_t>(s.mtime_ns));
    body.u64(static_cast<uint64_t>(s.ctime_ns));
    body.u64(s.inode);
    body.u64(s.files_digest);
    body.u8(s.damaged ? 1 : 0);
    body.u64(s.damaged_at);
    body.str(s.damage);
    body.u64(s.members_skipped);
    body.u64(s.files.size());
    for (const auto& f : s.files) body.str(f);
    body.u64(s.samples.size());
    body.u64(s.samples.encoded().size());
    body.out.append(s.samples.encoded());
  }
  return end_envelope(std::move(body), checksum);
}

namespace {

// `whole`: the encoded bytes when they are all in memory and stay so while `keep` lives;
// the sample tables then borrow their bytes from them.
Result<Manifest> decode(const ManifestSource& source, uint64_t total_bytes, const std::string& name,
                        ManifestCheck check, const char* whole,
                        const std::shared_ptr<const void>& keep) {
  const bool verify = check != ManifestCheck::kLayout;
  char head[24];
  if (total_bytes < 24) return corrupt(name + ": not a shardyard manifest (bad magic)");
  for (size_t got = 0; got < sizeof head;) {
    SY_ASSIGN_OR_RETURN(size_t n, source(head + got, sizeof head - got));
    if (n == 0) return corrupt(name + ": not a shardyard manifest (bad magic)");
    got += n;
  }
  if (std::memcmp(head, kMagic, sizeof kMagic) != 0)
    return corrupt(name + ": not a shardyard manifest (bad magic)");
  const uint64_t version = load_le(head + 8, 4), flags = load_le(head + 12, 4),
                 body_size = load_le(head + 16, 8);
  if (version == 0) return corrupt(name + ": manifest format version 0 is not valid");
  if (flags != 0)
    return corrupt(name + ": manifest has flags " + std::to_string(flags) +
                   " this build does not know; rebuild the manifest");
  if (version > kManifestFormatVersion)
    return corrupt(name + ": manifest format version " + std::to_string(version) +
                   " is newer than this build supports (" + std::to_string(kManifestFormatVersion) +
                   "); rebuild the manifest (shardyard manifest build)");
  if (version < kManifestFormatVersion)
    return corrupt(name + ": manifest format version " + std::to_string(version) +
                   " is older than this build reads (" + std::to_string(kManifestFormatVersion) +
                   "); rebuild the manifest (shardyard manifest build)");
  if (body_size > total_bytes || total_bytes - 24 < body_size + 8)
    return corrupt(name + ": manifest is truncated (" + std::to_string(total_bytes) + " bytes)");
  if (total_bytes - 24 - 8 > body_size)
    return corrupt(name + ": manifest has " + std::to_string(total_bytes - 32 - body_size) +
                   " bytes after its checksum");

  // Decode while reading; the checksum after the body is checked before anything decoded
  // is returned, so a damaged file never yields a manifest.
  Reader r;
  r.source = &source;
  r.body_size = body_size;
  r.left = body_size;
  r.hashing = verify;
  // A damaged file is reported as a checksum mismatch (the cause) rather than as whatever
  // the damage made the decoder trip over: on a decode error, hash the rest and compare.
  auto checksum_ok = [&]() -> Result<bool> {
    char tail[8];
    for (size_t got = 0; got < sizeof tail;) {
      SY_ASSIGN_OR_RETURN(size_t k, source(tail + got, sizeof tail - got));
      if (k == 0) return false;
      got += k;
    }
    return load_le(tail, 8) == r.hash.digest();
  };
  auto settle = [&](Status decode_error) -> Status {
    if (!verify) return decode_error;
    r.drain();
    if (!r.io.is_ok()) return Status(r.io.code(), name + ": " + r.io.message());
    auto ok = checksum_ok();
    if (!ok.is_ok()) return ok.status();
    return *ok ? decode_error : corrupt(name + ": manifest checksum mismatch");
  };

  Manifest m;
  bool bad_flag = false;  // a u8 flag other than 0 or 1
  auto flag = [&] {
    const uint64_t v = r.uint(1);
    bad_flag = bad_flag || v > 1;
    return v == 1;
  };
  m.fingerprint = r.uint(8);
  m.strict_members = flag();
  auto n = r.uint(8);
  if (n > body_size / kMinSourceBytes)
    return settle(corrupt(name + ": manifest source count is implausible"));
  m.sources.resize(n);
  for (auto& s : m.sources) {
    s.uri = r.str();
    auto kind = r.uint(1);
    if (kind > static_cast<uint64_t>(SourceKind::kDirectory))
      return settle(
          corrupt(name + ": manifest has an unknown source kind " + std::to_string(kind)));
    s.kind = static_cast<SourceKind>(kind);
    s.size_bytes = r.uint(8);
    s.mtime_ns = static_cast<int64_t>(r.uint(8));
    s.ctime_ns = static_cast<int64_t>(r.uint(8));
    s.inode = r.uint(8);
    s.files_digest = r.uint(8);
    s.damaged = flag();
    s.damaged_at = r.uint(8);
    s.damage = r.str();
    s.members_skipped = r.uint(8);
    auto nf = r.uint(8);
    if (nf > body_size / kMinFileBytes)
      return settle(corrupt(name + ": manifest file count is implausible"));
    s.files.resize(nf);
    for (auto& f : s.files) f = r.str();
    const uint64_t ns = r.uint(8), table_bytes = r.uint(8);
    // A table longer than what is left of the body: the layout is broken (it was left
    // at that, and a table longer than the whole body was accepted as no table at all).
    if (table_bytes > body_size || !r.need(static_cast<size_t>(table_bytes))) {
      r.failed = true;
      break;
    }
    const uint64_t at = r.body_pos();
    std::string_view table = r.take(static_cast<size_t>(table_bytes));
    if (whole != nullptr) table = std::string_view(whole + 24 + at, table.size());
    if (!SampleTable::decode(table, ns, whole != nullptr ? keep : nullptr, &s.samples,
                             check == ManifestCheck::kFull ? SampleTable::Check::kCanonical
                                                           : SampleTable::Check::kBounds))
      return settle(corrupt(name + ": manifest sample table is malformed"));
  }
  if (!r.io.is_ok()) return Status(r.io.code(), name + ": " + r.io.message());
  if (r.failed || !r.done() || bad_flag)
    return settle(corrupt(name + ": manifest body is malformed"));
  if (!verify) return m;
  auto ok = checksum_ok();
  if (!ok.is_ok()) return ok.status();
  if (!*ok) return corrupt(name + ": manifest checksum mismatch");
  if (check == ManifestCheck::kFull && compute_fingerprint(m) != m.fingerprint)
    return corrupt(name + ": manifest fingerprint does not match its content");
  return m;
}

}  // namespace

Result<Manifest> decode_manifest(std::string_view bytes, const std::string& name,
                                 ManifestCheck check, std::shared_ptr<const void> keep) {
  size_t at = 0;
  ManifestSource source = [&](char* dst, size_t n) -> Result<size_t> {
    size_t take = std::min(n, bytes.size() - at);
    std::memcpy(dst, bytes.data() + at, take);
    at += take;
    return take;
  };
  return decode(source, bytes.size(), name, check, keep ? bytes.data() : nullptr, keep);
}

Result<Manifest> decode_manifest(const ManifestSource& source, uint64_t total_bytes,
                                 const std::string& name, ManifestCheck check) {
  return decode(source, total_bytes, name, check, nullptr, nullptr);
}

}  // namespace shardyard
