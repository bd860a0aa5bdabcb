// Streaming tar parsing: POSIX ustar, PAX extended headers and GNU long names, with the
// WebDataset rule that groups members into samples.
//
// Two entry points share one header decoder: scan_tar() walks a ByteStream header by
// header, skipping payloads (for manifest scans); parse_tar_buffer() walks bytes already in
// memory and hands out payload views without copying (for reading a run of samples).
// Damage is reported as a kCorrupt Status naming the source and the byte offset of the
// bad header; nothing is read past it. See docs/tar.md for what is accepted.
//
// Thread-compatible: a TarHeaderDecoder belongs to one parse; the functions are reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "io/fs/file_system.h"
#include "runtime/status.h"

namespace shardyard::io {

inline constexpr size_t kTarBlock = 512;
// Larger members are reported as damage (no real shard member comes near 2^50 bytes, and
// sizes near 2^64 would wrap offsets).
inline constexpr uint64_t kMaxMemberBytes = 1ull << 50;

struct TarEntry {
  std::string path;
  char type = '0';            // ustar typeflag after extensions
  bool regular = true;        // a file with data (as opposed to a directory, link, ...)
  uint64_t size = 0;          // payload bytes
  uint64_t start_offset = 0;  // first header block of the entry, extension headers included
  uint64_t data_offset = 0;   // first payload byte
  uint64_t end_offset() const {
    return data_offset + ((size + kTarBlock - 1) / kTarBlock) * kTarBlock;
  }
};

// Decodes header blocks one at a time, carrying PAX and GNU extension state to the entry
// they describe.
class TarHeaderDecoder {
 public:
  enum class Kind { kEntry, kExtension, kZero };
  explicit TarHeaderDecoder(std::string source) : source_(std::move(source)) {}
  // Decodes the 512-byte block at `offset`. kExtension: pass its payload
  // (extension_size() bytes, padded to blocks in the archive) to extension_data().
  Result<Kind> decode(const uint8_t* block, uint64_t offset);
  uint64_t extension_size() const { return ext_size_; }
  Status extension_data(std::string_view data);
  const TarEntry& entry() const { return entry_; }
  // True when extension headers were read but their entry has not come yet.
  bool pending() const { return has_pending_; }

 private:
  std::string source_;
  TarEntry entry_;
  char ext_type_ = 0;
  uint64_t ext_size_ = 0;
  uint64_t ext_offset_ = 0;
  bool has_pending_ = false;
  uint64_t pending_start_ = 0;
  std::string long_name_;  // GNU 'L'
  std::string pax_path_;   // PAX path=
  bool pax_has_size_ = false;
  uint64_t pax_size_ = 0;
};

using TarEntryFn = std::function<Status(const TarEntry& entry)>;
using TarPayloadFn = std::function<Status(const TarEntry& entry, const uint8_t* payload)>;

// Walks every entry of an archive stream, skipping payloads. Stops at the end-of-archive
// marker or at a clean end of data on a header boundary; a stream that ends inside a
// header or payload is reported as truncated.
Status scan_tar(ByteStream& in, const std::string& source, const TarEntryFn& on_entry);

// Walks the entries in [data, data+len), which hold whole entries starting at archive
// offset `base_offset` (for messages). Payload pointers stay valid as long as `data`.
Status parse_tar_buffer(const uint8_t* data, size_t len, uint64_t base_offset,
                        const std::string& source, const TarPayloadFn& on_entry);

// WebDataset key rule: key = member path up to the first dot of its base name; the field is
// the rest ("a/b/x.input.seq.bin" -> key "a/b/x", field "input.seq.bin"). Fails for a
// member without a key (base name starts with a dot) or without a field (no dot).
struct KeyField {
  std::string_view key;
  std::string_view field;
};
Result<KeyField> split_key(std::string_view path);

}  // namespace shardyard::io
