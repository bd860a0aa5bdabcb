#include "io/format/tar.h"

#include <cstring>
#include <vector>

namespace shardyard::io {

namespace {

std::string at(const std::string& source, uint64_t offset) {
  return source + " at byte " + std::to_string(offset);
}

bool all_zero(const uint8_t* block) {
  for (size_t i = 0; i < kTarBlock; ++i)
    if (block[i] != 0) return false;
  return true;
}

// A NUL- or space-terminated octal number, or GNU base-256 when the top bit is set.
bool parse_number(const uint8_t* p, size_t n, uint64_t* out) {
  if (n > 0 && (p[0] & 0x80)) {
    if (p[0] & 0x40) return false;  // negative
    uint64_t v = p[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 61) return false;
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != '\0') return false;
  *out = v;
  return any || n == 0 || p[0] == '\0' || p[0] == ' ';
}

bool checksum_ok(const uint8_t* b) {
  uint64_t stored = 0;
  if (!parse_number(b + 148, 8, &stored)) return false;
  // Sum of all bytes with the checksum field read as spaces; a plain loop the compiler
  // vectorises. Old archives used signed bytes: try that only when the usual sum fails.
  uint32_t usum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) usum += b[i];
  for (size_t i = 148; i < 156; ++i) usum -= b[i];
  usum += 8 * ' ';
  if (stored == usum) return true;
  int64_t ssum = 0;
  for (size_t i = 0; i < kTarBlock; ++i)
    ssum += static_cast<int8_t>((i >= 148 && i < 156) ? ' ' : b[i]);
  return static_cast<int64_t>(stored) == ssum;
}

size_t field_length(const uint8_t* p, size_t n) {
  const void* nul = std::memchr(p, 0, n);
  return nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - p) : n;
}

}  // namespace

Result<TarHeaderDecoder::Kind> TarHeaderDecoder::decode(const uint8_t* b, uint64_t offset) {
  if (all_zero(b)) {
    if (has_pending_)
      return corrupt(at(source_, offset) + ": archive ends after an extension header");
    return Kind::kZero;
  }
  if (!checksum_ok(b))
    return corrupt(at(source_, offset) +
                   ": bad tar header checksum (not a tar file, or damaged here)");
  uint64_t size = 0;
  if (!parse_number(b + 124, 12, &size))
    return corrupt(at(source_, offset) + ": bad size field in tar header");
  if (size > kMaxMemberBytes)
    return corrupt(at(source_, offset) + ": member size " + std::to_string(size) +
                   " is implausible (damaged header?)");
  char type = static_cast<char>(b[156]);
  if (!has_pending_) pending_start_ = offset;

  if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
    if (size > (64u << 20))
      return corrupt(at(source_, offset) + ": extension header of " + std::to_string(size) +
                     " bytes is implausible");
    ext_type_ = type;
    ext_size_ = size;
    ext_offset_ = offset;
    has_pending_ = true;
    return Kind::kExtension;
  }

  // Reuse entry_.path's storage: one allocation per decoder, not one per member.
  entry_.type = type;
  entry_.regular = (type == '0' || type == '\0' || type == '7');
  entry_.start_offset = pending_start_;
  entry_.data_offset = offset + kTarBlock;
  entry_.size = pax_has_size_ ? pax_size_ : size;
  if (!pax_path_.empty()) {
    entry_.path = pax_path_;
  } else if (!long_name_.empty()) {
    entry_.path = long_name_;
  } else {
    const char* name = reinterpret_cast<const char*>(b);
    const char* prefix = reinterpret_cast<const char*>(b + 345);
    bool ustar = std::memcmp(b + 257, "ustar", 5) == 0 && b[262] == '\0';
    size_t prefix_len = ustar ? field_length(b + 345, 155) : 0;
    entry_.path.clear();
    if (prefix_len > 0) {
      entry_.path.append(prefix, prefix_len);
      entry_.path.push_back('/');
    }
    entry_.path.append(name, field_length(b, 100));
  }
  if (!entry_.regular) entry_.size = (type == '5' || type == '1' || type == '2') ? 0 : entry_.size;
  has_pending_ = false;
  long_name_.clear();
  pax_path_.clear();
  pax_has_size_ = false;
  if (entry_.path.empty()) return corrupt(at(source_, offset) + ": tar member has an empty name");
  return Kind::kEntry;
}

Status TarHeaderDecoder::extension_data(std::string_view data) {
  if (ext_type_ == 'L') {
    long_name_ = std::string(data.substr(0, data.find('\0')));
    return Status::ok();
  }
  if (ext_type_ == 'K') return Status::ok();  // long link name: not needed
  // PAX records: "<len> <key>=<value>\n", len counting the whole record.
  size_t pos = 0;
  while (pos < data.size()) {
    if (data[pos] == '\0') break;  // padding
    size_t space = data.find(' ', pos);
    if (space == std::string_view::npos)
      return corrupt(at(source_, ext_offset_) + ": malformed PAX record");
    uint64_t len = 0;
    for (size_t i = pos; i < space; ++i) {
      if (data[i] < '0' || data[i] > '9')
        return corrupt(at(source_, ext_offset_) + ": malformed PAX record length");
      len = len * 10 + static_cast<uint64_t>(data[i] - '0');
      if (len > data.size()) break;
    }
    if (len == 0 || pos + len > data.size() || data[pos + len - 1] != '\n')
      return corrupt(at(source_, ext_offset_) + ": malformed PAX record length");
    std::string_view rec = data.substr(space + 1, pos + len - 1 - (space + 1));
    size_t eq = rec.find('=');
    if (eq == std::string_view::npos)
      return corrupt(at(source_, ext_offset_) + ": PAX record without '='");
    std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (ext_type_ == 'x') {
      if (key == "path") {
        pax_path_ = std::string(value);
      } else if (key == "size") {
        uint64_t v = 0;
        if (value.empty()) return corrupt(at(source_, ext_offset_) + ": empty PAX size");
        for (char c : value) {
          if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10)
            return corrupt(at(source_, ext_offset_) + ": bad PAX size");
          v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        if (v > kMaxMemberBytes)
          return corrupt(at(source_, ext_offset_) + ": PAX size " + std::to_string(v) +
                         " is implausible");
        pax_size_ = v;
        pax_has_size_ = true;
      }
    }
    pos += len;
  }
  return Status::ok();
}

Status scan_tar(ByteStream& in, const std::string& source, const TarEntryFn& on_entry) {
  TarHeaderDecoder dec(source);
  uint8_t block[kTarBlock];
  std::string ext;
  for (;;) {
    uint64_t offset = in.position();
    SY_ASSIGN_OR_RETURN(size_t got, in.read(block, kTarBlock));
    if (got == 0) {
      if (dec.pending())
        return corrupt(at(source, offset) + ": truncated: archive ends after an extension header");
      return Status::ok();  // no end-of-archive marker: accepted, like tarfile and GNU tar
    }
    if (got < kTarBlock)
      return corrupt(at(source, offset) + ": truncated: partial tar header of " +
                     std::to_string(got) + " bytes");
    SY_ASSIGN_OR_RETURN(auto kind, dec.decode(block, offset));
    if (kind == TarHeaderDecoder::Kind::kZero) return Status::ok();
    uint64_t padded =
        ((kind == TarHeaderDecoder::Kind::kExtension ? dec.extension_size() : dec.entry().size) +
         kTarBlock - 1) /
        kTarBlock * kTarBlock;
    if (kind == TarHeaderDecoder::Kind::kExtension) {
      ext.resize(padded);
      SY_ASSIGN_OR_RETURN(size_t n, in.read(ext.data(), padded));
      if (n != padded)
        return corrupt(at(source, offset) + ": truncated inside an extension header");
      SY_RETURN_IF_ERROR(dec.extension_data(std::string_view(ext).substr(0, dec.extension_size())));
      continue;
    }
    SY_RETURN_IF_ERROR(on_entry(dec.entry()));
    // Make sure the payload is really there: peek at its last byte before skipping.
    if (padded > 0) {
      SY_RETURN_IF_ERROR(in.skip(padded - 1));
      uint8_t last;
      SY_ASSIGN_OR_RETURN(size_t n, in.read(&last, 1));
      if (n != 1)
        return corrupt(at(source, offset) + ": truncated: member '" + dec.entry().path +
                       "' needs " + std::to_string(dec.entry().size) +
                       " payload bytes that the file does not have");
    }
  }
}

Status parse_tar_buffer(const uint8_t* data, size_t len, uint64_t base_offset,
                        const std::string& source, const TarPayloadFn& on_entry) {
  TarHeaderDecoder dec(source);
  size_t pos = 0;
  while (pos < len) {
    uint64_t offset = base_offset + pos;
    if (len - pos < kTarBlock)
      return corrupt(at(source, offset) + ": truncated: partial tar header");
    SY_ASSIGN_OR_RETURN(auto kind, dec.decode(data + pos, offset));
    if (kind == TarHeaderDecoder::Kind::kZero) return Status::ok();
    pos += kTarBlock;
    uint64_t size =
        kind == TarHeaderDecoder::Kind::kExtension ? dec.extension_size() : dec.entry().size;
    uint64_t padded = (size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (size > len - pos)
      return corrupt(at(source, offset) + ": truncated: entry needs " + std::to_string(size) +
                     " payload bytes, " + std::to_string(len - pos) + " left");
    if (kind == TarHeaderDecoder::Kind::kExtension) {
      SY_RETURN_IF_ERROR(
          dec.extension_data(std::string_view(reinterpret_cast<const char*>(data + pos), size)));
    } else {
      SY_RETURN_IF_ERROR(on_entry(dec.entry(), data + pos));
    }
    pos += std::min<uint64_t>(padded, len - pos);
  }
  if (dec.pending())
    return corrupt(at(source, base_offset + len) + ": data ends after an extension header");
  return Status::ok();
}

Result<KeyField> split_key(std::string_view path) {
  size_t slash = path.rfind('/');
  size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = path.find('.', base);
  if (dot == base)
    return corrupt("member '" + std::string(path) + "' has no key (its name starts with a dot)");
  if (dot == std::string_view::npos || dot + 1 == path.size())
    return corrupt("member '" + std::string(path) +
                   "' has no field name (no dot in its name, as in key.ext)");
  return KeyField{path.substr(0, dot), path.substr(dot + 1)};
}

}  // namespace shardyard::io
