// Little-endian byte encoding shared by the on-disk formats (manifest, checkpoint).
//
// Every format is an envelope around a body:
//   magic (8 bytes) | u32 version | u32 flags (0) | u64 body_size | body | u64 checksum
// where checksum is a Hasher digest of the body. ByteWriter builds bodies; seal() wraps a
// body in the envelope; open_envelope() checks magic, version, size and checksum of a whole
// file held in memory and hands back the body; ByteReader decodes a body with bounds checks
// (a read past the end sets failed() and returns zeros, so decoders check once at the end).
//
// Pure functions and value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace shardyard {

struct ByteWriter {
  std::string out;
  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(std::string_view s) {  // u32 length + bytes
    u32(static_cast<uint32_t>(s.size()));
    out.append(s);
  }
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view body) : body_(body) {}
  uint64_t uint(int bytes);
  uint8_t u8() { return static_cast<uint8_t>(uint(1)); }
  uint32_t u32() { return static_cast<uint32_t>(uint(4)); }
  uint64_t u64() { return uint(8); }
  bool flag();  // a u8 that must be 0 or 1 (anything else is damage)
  std::string str();
  // Bytes not read yet; a count larger than left() / (smallest encoding) is damage.
  size_t left() const { return body_.size() - pos_; }
  bool failed() const { return failed_; }
  bool done() const { return !failed_ && pos_ == body_.size(); }

 private:
  std::string_view body_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// Reads `bytes` little-endian bytes at p.
uint64_t load_le(const char* p, int bytes);

inline constexpr size_t kEnvelopeHeaderBytes = 24;

// The envelope around `body`.
std::string seal(const char (&magic)[8], uint32_t version, std::string_view body);
// The same envelope built in place, with no copy of the body: begin_envelope() writes the
// header, the caller appends the body to `out`, end_envelope() sets the body's size and
// appends its checksum (0 with checksum false: for bytes whose reader does not verify it).
ByteWriter begin_envelope(const char (&magic)[8], uint32_t version);
std::string end_envelope(ByteWriter w, bool checksum = true);

// Checks the envelope of a whole file and returns its body and version. `what` names the
// format in messages ("checkpoint manifest"), `name` the file.
struct Envelope {
  uint32_t version = 0;
  std::string_view body;
};
Result<Envelope> open_envelope(std::string_view bytes, const char (&magic)[8], uint32_t max_version,
                               const std::string& what, const std::string& name);

}  // namespace shardyard
