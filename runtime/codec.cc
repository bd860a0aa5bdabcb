#include "runtime/codec.h"

#include <cstring>

#include "runtime/hash.h"

namespace shardyard {

uint64_t load_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint64_t ByteReader::uint(int bytes) {
  if (failed_ || left() < static_cast<size_t>(bytes)) {
    failed_ = true;
    return 0;
  }
  uint64_t v = load_le(body_.data() + pos_, bytes);
  pos_ += static_cast<size_t>(bytes);
  return v;
}

bool ByteReader::flag() {
  const uint64_t v = uint(1);
  if (v > 1) failed_ = true;
  return v == 1;
}

std::string ByteReader::str() {
  uint64_t n = uint(4);
  if (failed_ || left() < n) {
    failed_ = true;
    return {};
  }
  std::string s(body_.substr(pos_, n));
  pos_ += n;
  return s;
}

ByteWriter begin_envelope(const char (&magic)[8], uint32_t version) {
  ByteWriter w;
  w.out.append(magic, 8);
  w.u32(version);
  w.u32(0);
  w.u64(0);  // the body's size, set by end_envelope()
  return w;
}

std::string end_envelope(ByteWriter w, bool checksum) {
  const uint64_t size = w.out.size() - kEnvelopeHeaderBytes;
  for (int i = 0; i < 8; ++i) w.out[16 + i] = static_cast<char>((size >> (8 * i)) & 0xff);
  Hasher h;
  if (checksum) h.add(std::string_view(w.out).substr(kEnvelopeHeaderBytes));
  w.u64(checksum ? h.digest() : 0);
  return std::move(w.out);
}

std::string seal(const char (&magic)[8], uint32_t version, std::string_view body) {
  ByteWriter w = begin_envelope(magic, version);
  w.out.reserve(kEnvelopeHeaderBytes + body.size() + 8);
  w.out.append(body);
  return end_envelope(std::move(w));
}

Result<Envelope> open_envelope(std::string_view bytes, const char (&magic)[8], uint32_t max_version,
                               const std::string& what, const std::string& name) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), magic, 8) != 0)
    return corrupt(name + ": not a shardyard " + what + " (bad magic)");
  if (bytes.size() < kEnvelopeHeaderBytes + 8)
    return corrupt(name + ": " + what + " is truncated (" + std::to_string(bytes.size()) +
                   " bytes)");
  const uint64_t version = load_le(bytes.data() + 8, 4), flags = load_le(bytes.data() + 12, 4);
  const uint64_t body_size = load_le(bytes.data() + 16, 8);
  if (version == 0) return corrupt(name + ": " + what + " format version 0 is not valid");
  if (version > max_version)
    return corrupt(name + ": " + what + " format version " + std::to_string(version) +
                   " is newer than this build supports (" + std::to_string(max_version) + ")");
  if (flags != 0)
    return corrupt(name + ": " + what + " has flags " + std::to_string(flags) +
                   " this build does not know");
  if (body_size != bytes.size() - kEnvelopeHeaderBytes - 8)
    return corrupt(name + ": " + what + " is truncated or has trailing bytes (" +
                   std::to_string(bytes.size()) + " bytes for a body of " +
                   std::to_string(body_size) + ")");
  std::string_view body = bytes.substr(kEnvelopeHeaderBytes, body_size);
  Hasher h;
  h.add(body);
  if (load_le(bytes.data() + kEnvelopeHeaderBytes + body_size, 8) != h.digest())
    return corrupt(name + ": " + what + " checksum mismatch (the file is damaged)");
  return Envelope{static_cast<uint32_t>(version), body};
}

}  // namespace shardyard
