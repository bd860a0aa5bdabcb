#include "io/format/tar.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/prefetch.h"

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

size_t field_length(const uint8_t* p, size_t n) {
  const void* nul = std::memchr(p, 0, n);
  return nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - p) : n;
}

bool is_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// The `bytes` bytes (1 to 8) at p as a little-endian number (p[0] its lowest byte).
uint64_t load_le(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  std::memcpy(&v, p, bytes);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);  // the bytes copied to its start become its low ones
#endif
  return v;
}

// How many of the bytes of `x` (from byte 0, at most 8) are octal digits, '0' to '7'.
int leading_octal_digits(uint64_t x) {
  // A byte is such a digit when it differs from '0' in its low three bits only.
  const uint64_t other = (x ^ 0x3030303030303030ull) & 0xf8f8f8f8f8f8f8f8ull;
  return other == 0 ? 8 : __builtin_ctzll(other) / 8;
}

// The number the first k (1 to 8) bytes of `x` write in octal digits (byte 0 the most
// significant): the digits are combined two, four, then eight at a time.
uint64_t octal_value(uint64_t x, int k) {
  uint64_t d = (x ^ 0x3030303030303030ull) << (8 * (8 - k));  // digit values, at the top
  d = ((d << 3) + (d >> 8)) & 0x00ff00ff00ff00ffull;
  d = ((d << 6) + (d >> 16)) & 0x0000ffff0000ffffull;
  return ((d << 12) + (d >> 32)) & 0xffffffffull;
}

// A numeric header field, read as Python's tarfile reads it: GNU base-256 when the top bit
// of the first byte is set (negative values are refused); otherwise octal digits that end
// at the field's first NUL, with white space around them, and an empty field is 0. So a
// field led by a NUL is 0, as for tarfile and libarchive. Anything else before the NUL
// (a sign, a non-octal digit, a space between digits) is damage: tarfile and GNU tar
// disagree on it.
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
  // The usual field, as tar writers fill it: octal digits from its first byte up to a NUL
  // (or to its end). One pass, where the rules below take three; what it does not cover
  // (white space, anything else) is left to them. Header fields are at most 12 bytes, so
  // 21 octal digits cannot overflow. The fields read for every member, the size (12
  // bytes) and the checksum (8), go eight bytes at a time.
  if (n == 8 || n == 12) {
    const uint64_t head = load_le(p, 8);
    const int k = leading_octal_digits(head);
    if (k > 0 && k < 8 && p[k] == 0) {
      *out = octal_value(head, k);
      return true;
    }
    if (k == 8 && n == 8) {
      *out = octal_value(head, 8);
      return true;
    }
    if (k == 8) {
      const uint64_t tail = load_le(p + 8, 4);
      const int more = leading_octal_digits(tail | 0xffffffff00000000ull);  // at most 4
      if (more == 4 || p[8 + more] == 0) {
        const uint64_t v = octal_value(head, 8);
        *out = more == 0 ? v : (v << (3 * more)) | octal_value(tail, more);
        return true;
      }
    }
  } else {
    uint64_t v = 0;
    size_t d = 0;
    while (d < n && static_cast<uint8_t>(p[d] - '0') < 8) v = v * 8 + (p[d++] - '0');
    if (d > 0 && n <= 21 && (d == n || p[d] == 0)) {
      *out = v;
      return true;
    }
  }
  // A plain scan for the NUL: these fields are 8 to 12 bytes, shorter than a call to memchr.
  size_t end = 0, i = 0;
  while (end < n && p[end] != 0) ++end;
  while (i < end && is_space(p[i])) ++i;
  while (end > i && is_space(p[end - 1])) --end;
  uint64_t v = 0;
  for (; i < end; ++i) {
    if (p[i] < '0' || p[i] > '7' || (v >> 61)) return false;
    v = v * 8 + (p[i] - '0');
  }
  *out = v;
  return true;
}

// The sum of a header's 512 bytes. With SSE2 (every x86-64 CPU), psadbw adds 16 bytes in
// one instruction: about 4x faster than the loop the compiler makes of the plain sum, which
// widens bytes to 32-bit lanes (three headers per sample of a WebDataset shard are summed).
uint32_t byte_sum(const uint8_t* b) {
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  __m128i acc = zero;
  for (size_t i = 0; i < kTarBlock; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
  }
  return static_cast<uint32_t>(_mm_cvtsi128_si64(acc) +
                               _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#else
  uint32_t sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) sum += b[i];
  return sum;
#endif
}

bool checksum_ok(const uint8_t* b) {
  uint64_t stored = 0;
  if (!parse_number(b + 148, 8, &stored)) return false;
  // Sum of all bytes with the checksum field read as spaces. Old archives used signed
  // bytes: try that only when the usual sum fails.
  uint32_t usum = byte_sum(b);
  for (size_t i = 148; i < 156; ++i) usum -= b[i];
  usum += 8 * ' ';
  if (stored == usum) return true;
  int64_t ssum = 0;
  for (size_t i = 0; i < kTarBlock; ++i)
    ssum += static_cast<int8_t>((i >= 148 && i < 156) ? ' ' : b[i]);
  return static_cast<int64_t>(stored) == ssum;
}

}  // namespace

Result<TarHeaderDecoder::Kind> TarHeaderDecoder::decode(const uint8_t* b, uint64_t offset) {
  if (sparse_map_pending_) {
    // A continuation block of an old GNU sparse map: 21 entries, then its own "another
    // block follows" flag at byte 504. No checksum; the payload follows the last one.
    sparse_map_pending_ = b[504] != 0;
    entry_.data_offset = offset + kTarBlock;
    return sparse_map_pending_ ? Kind::kSparseMap : Kind::kEntry;
  }
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

  // 'X' is the extended header of Solaris tar, read as Python's tarfile reads it: as 'x'.
  if (type == 'x' || type == 'X' || type == 'g' || type == 'L' || type == 'K') {
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
  entry_.regular = (type == '0' || type == '\0' || type == '7' || type == 'S');
  entry_.sparse = type == 'S' || pax_sparse_;
  entry_.start_offset = pending_start_;
  entry_.data_offset = offset + kTarBlock;
  entry_.size = pax_has_size_ ? pax_size_ : size;
  if (!sparse_name_.empty()) {
    entry_.path = sparse_name_;
  } else if (!pax_path_.empty()) {
    entry_.path = pax_path_;
  } else if (!long_name_.empty()) {
    entry_.path = long_name_;
  } else {
    const char* name = reinterpret_cast<const char*>(b);
    const char* prefix = reinterpret_cast<const char*>(b + 345);
    bool ustar = std::memcmp(b + 257, "ustar", 5) == 0 && b[262] == '\0';
    size_t prefix_len = ustar && b[345] != 0 ? field_length(b + 345, 155) : 0;
    entry_.path.clear();
    if (prefix_len > 0) {
      entry_.path.append(prefix, prefix_len);
      entry_.path.push_back('/');
    }
    entry_.path.append(name, field_length(b, 100));
  }
  // An old (v7) archive stores a directory as a NUL-type member named with a '/'.
  if (type == '\0' && !entry_.path.empty() && entry_.path.back() == '/') {
    entry_.type = '5';
    entry_.regular = false;
  }
  // Links, devices, FIFOs and directories have no payload, whatever the size field says
  // (tarfile reads the next header right after them); other types are skipped by size.
  if (entry_.type >= '1' && entry_.type <= '6') entry_.size = 0;
  has_pending_ = false;
  long_name_.clear();
  pax_path_.clear();
  sparse_name_.clear();
  pax_has_size_ = false;
  pax_sparse_ = false;
  // An old GNU sparse header whose map goes on in the blocks that follow it.
  if (type == 'S' && b[482] != 0) {
    sparse_map_pending_ = true;
    return Kind::kSparseMap;
  }
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
    if (ext_type_ == 'x' || ext_type_ == 'X') {
      if (key.substr(0, 11) == "GNU.sparse.") pax_sparse_ = true;
      if (key == "path") {
        pax_path_ = std::string(value);
      } else if (key == "GNU.sparse.name") {  // a sparse file's real name (path is not)
        sparse_name_ = std::string(value);
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

Status scan_tar(ByteStream& in, const std::string& source, const TarEntryFn& on_entry,
                bool* in_payload) {
  bool payload_flag = false;
  bool& in_pl = in_payload ? *in_payload : payload_flag;
  in_pl = false;
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
    if (kind == TarHeaderDecoder::Kind::kSparseMap) continue;
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
      in_pl = true;
      SY_RETURN_IF_ERROR(in.skip(padded - 1));
      uint8_t last;
      SY_ASSIGN_OR_RETURN(size_t n, in.read(&last, 1));
      if (n != 1)
        return corrupt(at(source, offset) + ": truncated: member '" + dec.entry().path +
                       "' needs " + std::to_string(dec.entry().size) +
                       " payload bytes that the file does not have");
      in_pl = false;
    }
  }
}

namespace {

// The walk of parse_tar_buffer() and walk_tar_range(): the entries of archive bytes [begin,
// end), whose bytes `fetch(pos, n)` gives (n <= end - pos, valid until the next call);
// regular members of at least `unread_bytes` are handed out without their payload.
// `next_header(pos)` is told where the next header is before an entry is handed out.
template <typename Fetch, typename NextHeader>
Status walk_entries(uint64_t begin, uint64_t end, const std::string& source, uint64_t unread_bytes,
                    Fetch&& fetch, NextHeader&& next_header, const TarPayloadFn& on_entry) {
  TarHeaderDecoder dec(source);
  uint64_t pos = begin;
  while (pos < end) {
    const uint64_t offset = pos;
    if (end - pos < kTarBlock)
      return corrupt(at(source, offset) + ": truncated: partial tar header");
    SY_ASSIGN_OR_RETURN(const uint8_t* header, fetch(pos, kTarBlock));
    SY_ASSIGN_OR_RETURN(auto kind, dec.decode(header, offset));
    if (kind == TarHeaderDecoder::Kind::kZero) return Status::ok();
    pos += kTarBlock;
    if (kind == TarHeaderDecoder::Kind::kSparseMap) continue;
    const bool ext = kind == TarHeaderDecoder::Kind::kExtension;
    const uint64_t size = ext ? dec.extension_size() : dec.entry().size;
    const uint64_t padded = (size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (size > end - pos)
      return corrupt(at(source, offset) + ": truncated: entry needs " + std::to_string(size) +
                     " payload bytes, " + std::to_string(end - pos) + " left");
    if (padded + kTarBlock <= end - pos) next_header(pos + padded);
    if (!ext && dec.entry().regular && !dec.entry().sparse && size >= unread_bytes) {
      SY_RETURN_IF_ERROR(on_entry(dec.entry(), nullptr));
    } else {
      SY_ASSIGN_OR_RETURN(const uint8_t* payload, fetch(pos, size));
      if (ext) {
        SY_RETURN_IF_ERROR(
            dec.extension_data(std::string_view(reinterpret_cast<const char*>(payload), size)));
      } else {
        SY_RETURN_IF_ERROR(on_entry(dec.entry(), payload));
      }
    }
    pos += std::min<uint64_t>(padded, end - pos);
  }
  if (dec.pending()) return corrupt(at(source, end) + ": data ends after an extension header");
  return Status::ok();
}

}  // namespace

Status parse_tar_buffer(const uint8_t* data, size_t len, uint64_t base_offset,
                        const std::string& source, const TarPayloadFn& on_entry) {
  auto fetch = [&](uint64_t pos, uint64_t) -> Result<const uint8_t*> {
    return data + (pos - base_offset);
  };
  // The next header is a page or more further on (past a payload) and is read whole (its
  // checksum): asked for from memory while this entry is handed out, it is in the cache when
  // its turn comes. A buffer fetched over HTTP by another thread long before is not: its
  // headers were 12% of such a run's CPU, 4.6% from local disk (docs/performance.md).
  auto next_header = [&](uint64_t pos) { prefetch_lines(data + (pos - base_offset), kTarBlock); };
  return walk_entries(base_offset, base_offset + len, source, UINT64_MAX, fetch, next_header,
                      on_entry);
}

Status walk_tar_range(const FileReader& file, uint64_t begin, uint64_t end,
                      const std::string& source, uint64_t unread_bytes,
                      const TarPayloadFn& on_entry) {
  // What one positioned read fetches at least: the headers and small members that follow a
  // large member (3 KiB for a sample's .cls and .json and the next sample's first header).
  constexpr size_t kWindow = 4096;
  std::vector<uint8_t> window;
  uint64_t window_at = 0;
  size_t window_len = 0;
  // Bytes [pos, pos + n) of the file, from the window or a new read there.
  auto fetch = [&](uint64_t pos, uint64_t n) -> Result<const uint8_t*> {
    if (pos >= window_at && pos - window_at <= window_len && n <= window_len - (pos - window_at))
      return window.data() + (pos - window_at);
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(n, kWindow), end - pos));
    if (window.size() < want) window.resize(want);
    SY_RETURN_IF_ERROR(file.read(pos, window.data(), want));
    window_at = pos;
    window_len = want;
    return window.data();
  };
  return walk_entries(
      begin, end, source, unread_bytes, fetch, [](uint64_t) {}, on_entry);
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// tar_file_iterator's filters: a name without '/' that starts and ends with "__", or one
// whose first component does (the regular expression __[^/]*__($|/) at the start).
bool is_metadata(std::string_view path) {
  if (!starts_with(path, "__")) return false;
  const size_t slash = path.find('/');
  if (slash == std::string_view::npos && ends_with(path, "__")) return true;
  const std::string_view first = path.substr(0, slash);
  return first.size() >= 4 && ends_with(first, "__");
}

// Where base_plus_ext's regular expression ^((?:.*/|)[^.]+)[.]([^/]*)$ splits `path` (the
// index of the dot between key and extension), or npos when it does not match. The dot must
// lie in the base name (the extension has no '/'), and the key must end in a run of at
// least one character without a dot that starts the path or follows a '/': the first dot
// of the base name when the base name does not start with it; otherwise that leading dot
// when the last folder's name has no dot (the run is then "folder/").
size_t key_dot(std::string_view path) {
  // memrchr, where string_view::rfind walks back a byte at a time (three members a sample).
  const void* last_slash = path.empty() ? nullptr : ::memrchr(path.data(), '/', path.size());
  const size_t slash =
      last_slash == nullptr
          ? std::string_view::npos
          : static_cast<size_t>(static_cast<const char*>(last_slash) - path.data());
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string_view::npos || dot > base) return dot;
  if (slash == std::string_view::npos) return std::string_view::npos;
  const size_t prev = slash == 0 ? std::string_view::npos : path.rfind('/', slash - 1);
  const size_t folder = prev == std::string_view::npos ? 0 : prev + 1;
  if (path.substr(folder, slash - folder).find('.') != std::string_view::npos)
    return std::string_view::npos;
  return dot;
}

}  // namespace

std::optional<KeyField> split_key(std::string_view path) {
  if (is_metadata(path)) return std::nullopt;
  const size_t dot = key_dot(path);
  if (dot == std::string_view::npos) return std::nullopt;
  KeyField kf{path.substr(0, dot), std::string(path.substr(dot + 1))};
  for (char& c : kf.field)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return kf;
}

std::string unmatched_reason(std::string_view path) {
  if (path.empty()) return "has an empty name";
  if (is_metadata(path)) return "is a metadata name (__name__)";
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  if (path.find('.', base) == std::string_view::npos)
    return "has no extension (no dot in its name, as in key.ext)";
  return "has no key (its name starts with a dot)";
}

}  // namespace shardyard::io
