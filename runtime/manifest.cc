#include "runtime/manifest.h"

#include <cstdio>
#include <cstring>

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
  }
  return "unknown";
}

uint64_t Manifest::num_samples() const {
  uint64_t n = 0;
  for (const auto& s : sources) n += s.samples.size();
  return n;
}

uint64_t Manifest::payload_bytes() const {
  uint64_t n = 0;
  for (const auto& s : sources)
    for (const auto& e : s.samples) n += e.payload_bytes;
  return n;
}

size_t Manifest::num_damaged() const {
  size_t n = 0;
  for (const auto& s : sources) n += s.damaged ? 1 : 0;
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

static std::string_view base_name(std::string_view uri) {
  while (!uri.empty() && uri.back() == '/') uri.remove_suffix(1);
  auto slash = uri.rfind('/');
  return slash == std::string_view::npos ? uri : uri.substr(slash + 1);
}

uint64_t compute_fingerprint(const Manifest& m) {
  Hasher h;
  h.add_u64(m.sources.size());
  for (const auto& s : m.sources) {
    h.add_string(base_name(s.uri));
    h.add_u64(static_cast<uint64_t>(s.kind));
    h.add_u64(s.samples.size());
    for (const auto& e : s.samples) {
      h.add_string(e.key);
      h.add_u64(e.begin);
      h.add_u64(e.end);
      h.add_u64(e.payload_bytes);
    }
  }
  return h.digest();
}

// ---- encoding ----------------------------------------------------------------------------
// Layout (all integers little-endian):
//   magic "SYMANIF\0" (8) | u32 version | u32 flags (0) | u64 body_size | body | u64 checksum
// checksum = Hasher over body. body:
//   u64 fingerprint | u64 num_sources | per source:
//     str uri | u8 kind | u64 size_bytes | i64 mtime_ns | u8 damaged | u64 damaged_at |
//     str damage | u64 num_files | str file... | u64 num_samples |
//     per sample: str key | u64 begin | u64 end | u64 payload_bytes
//   str = u32 length + bytes.

namespace {
constexpr char kMagic[8] = {'S', 'Y', 'M', 'A', 'N', 'I', 'F', '\0'};

struct Writer {
  std::string out;
  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out.append(s);
  }
};

struct Reader {
  std::string_view in;
  size_t pos = 0;
  bool failed = false;
  bool need(size_t n) {
    if (failed || in.size() - pos < n) failed = true;
    return !failed;
  }
  uint64_t uint(int bytes) {
    if (!need(bytes)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(in[pos + i])) << (8 * i);
    pos += bytes;
    return v;
  }
  std::string str() {
    auto n = uint(4);
    if (!need(n)) return {};
    std::string s(in.substr(pos, n));
    pos += n;
    return s;
  }
};
}  // namespace

std::string encode_manifest(const Manifest& m) {
  Writer body;
  body.u64(m.fingerprint);
  body.u64(m.sources.size());
  for (const auto& s : m.sources) {
    body.str(s.uri);
    body.u8(static_cast<uint8_t>(s.kind));
    body.u64(s.size_bytes);
    body.u64(static_cast<uint64_t>(s.mtime_ns));
    body.u8(s.damaged ? 1 : 0);
    body.u64(s.damaged_at);
    body.str(s.damage);
    body.u64(s.files.size());
    for (const auto& f : s.files) body.str(f);
    body.u64(s.samples.size());
    for (const auto& e : s.samples) {
      body.str(e.key);
      body.u64(e.begin);
      body.u64(e.end);
      body.u64(e.payload_bytes);
    }
  }
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.u32(kManifestFormatVersion);
  w.u32(0);
  w.u64(body.out.size());
  w.out.append(body.out);
  Hasher h;
  h.add(body.out);
  w.u64(h.digest());
  return std::move(w.out);
}

Result<Manifest> decode_manifest(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return corrupt(name + ": not a shardyard manifest (bad magic)");
  Reader head{bytes, 8};
  auto version = head.uint(4);
  auto flags = head.uint(4);
  auto body_size = head.uint(8);
  if (version == 0) return corrupt(name + ": manifest format version 0 is not valid");
  if (flags != 0)
    return corrupt(name + ": manifest has flags " + std::to_string(flags) +
                   " this build does not know; rebuild the manifest");
  if (version > kManifestFormatVersion)
    return corrupt(name + ": manifest format version " + std::to_string(version) +
                   " is newer than this build supports (" + std::to_string(kManifestFormatVersion) +
                   "); rebuild the manifest");
  if (body_size > bytes.size() || bytes.size() - 24 < body_size + 8)
    return corrupt(name + ": manifest is truncated (" + std::to_string(bytes.size()) + " bytes)");
  std::string_view body = bytes.substr(24, body_size);
  Reader tail{bytes, 24 + body_size};
  Hasher h;
  h.add(body);
  if (tail.uint(8) != h.digest()) return corrupt(name + ": manifest checksum mismatch");

  Reader r{body};
  Manifest m;
  m.fingerprint = r.uint(8);
  auto n = r.uint(8);
  if (n > body.size()) return corrupt(name + ": manifest source count is implausible");
  m.sources.resize(n);
  for (auto& s : m.sources) {
    s.uri = r.str();
    auto kind = r.uint(1);
    if (kind > static_cast<uint64_t>(SourceKind::kDirectory))
      return corrupt(name + ": manifest has an unknown source kind " + std::to_string(kind));
    s.kind = static_cast<SourceKind>(kind);
    s.size_bytes = r.uint(8);
    s.mtime_ns = static_cast<int64_t>(r.uint(8));
    s.damaged = r.uint(1) != 0;
    s.damaged_at = r.uint(8);
    s.damage = r.str();
    auto nf = r.uint(8);
    if (nf > body.size()) return corrupt(name + ": manifest file count is implausible");
    s.files.resize(nf);
    for (auto& f : s.files) f = r.str();
    auto ns = r.uint(8);
    if (ns > body.size()) return corrupt(name + ": manifest sample count is implausible");
    s.samples.resize(ns);
    for (auto& e : s.samples) {
      e.key = r.str();
      e.begin = r.uint(8);
      e.end = r.uint(8);
      e.payload_bytes = r.uint(8);
    }
    if (r.failed) break;
  }
  if (r.failed || r.pos != body.size()) return corrupt(name + ": manifest body is malformed");
  if (compute_fingerprint(m) != m.fingerprint)
    return corrupt(name + ": manifest fingerprint does not match its content");
  return m;
}

}  // namespace shardyard
