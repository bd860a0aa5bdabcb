// Streaming tar parsing: POSIX ustar, PAX extended headers and GNU long names, with the
// WebDataset rule that groups members into samples.
//
// Two entry points share one header decoder: scan_tar() walks a ByteStream header by
// header, skipping payloads (for manifest scans); parse_tar_buffer() walks bytes already in
// memory and hands out payload views without copying (for reading a run of samples).
// Damage is reported as a kCorrupt Status naming the source and the byte offset of the
// bad header; nothing is read past it. Header fields are read as Python's tarfile reads
// them, and split_key() is WebDataset's rule for which members make up a sample. See
// docs/tar.md for what is accepted.
//
// Thread-compatible: a TarHeaderDecoder belongs to one parse; the functions are reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "io/fs/file_system.h"
#include "runtime/item.h"
#include "runtime/status.h"

namespace shardyard::io {

inline constexpr size_t kTarBlock = 512;
// Larger members are reported as damage (no real shard member comes near 2^50 bytes, and
// sizes near 2^64 would wrap offsets).
inline constexpr uint64_t kMaxMemberBytes = 1ull << 50;

struct TarEntry {
  std::string path;
  char type = '0';            // ustar typeflag after extensions ('5' for a v7 directory)
  bool regular = true;        // a file with data: types '0', NUL, '7' and GNU sparse 'S'
  bool sparse = false;        // a GNU sparse file (type 'S' or PAX GNU.sparse.* records)
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
  // kSparseMap: the block was a header or map block of an old GNU sparse file and another
  // map block follows: pass it to decode() too; the entry comes after the last one.
  enum class Kind { kEntry, kExtension, kZero, kSparseMap };
  explicit TarHeaderDecoder(std::string source) : source_(std::move(source)) {}
  // Decodes the 512-byte block at `offset`. kExtension: pass its payload
  // (extension_size() bytes, padded to blocks in the archive) to extension_data().
  Result<Kind> decode(const uint8_t* block, uint64_t offset);
  uint64_t extension_size() const { return ext_size_; }
  Status extension_data(std::string_view data);
  const TarEntry& entry() const { return entry_; }
  // True when extension headers (or sparse map blocks) were read but their entry has not
  // come yet.
  bool pending() const { return has_pending_ || sparse_map_pending_; }

 private:
  std::string source_;
  TarEntry entry_;
  char ext_type_ = 0;
  uint64_t ext_size_ = 0;
  uint64_t ext_offset_ = 0;
  bool has_pending_ = false;
  uint64_t pending_start_ = 0;
  std::string long_name_;    // GNU 'L'
  std::string pax_path_;     // PAX path=
  std::string sparse_name_;  // PAX GNU.sparse.name=
  bool pax_has_size_ = false;
  uint64_t pax_size_ = 0;
  bool pax_sparse_ = false;          // PAX GNU.sparse.* records
  bool sparse_map_pending_ = false;  // the next block continues an old GNU sparse map
};

using TarEntryFn = std::function<Status(const TarEntry& entry)>;
using TarPayloadFn = std::function<Status(const TarEntry& entry, const uint8_t* payload)>;

// Walks every entry of an archive stream, skipping payloads. Stops at the end-of-archive
// marker or at a clean end of data on a header boundary; a stream that ends inside a
// header or payload is reported as truncated. On an error, `*in_payload` (when given) says
// whether it was met inside the payload of the entry last handed to on_entry (that member
// is damaged) rather than at a header (every entry handed out is whole).
Status scan_tar(ByteStream& in, const std::string& source, const TarEntryFn& on_entry,
                bool* in_payload = nullptr);

// Walks the entries in [data, data+len), which hold whole entries starting at archive
// offset `base_offset` (for messages). Payload pointers stay valid as long as `data`.
Status parse_tar_buffer(const uint8_t* data, size_t len, uint64_t base_offset,
                        const std::string& source, const TarPayloadFn& on_entry);

// Walks the entries in bytes [begin, end) of `file` (whole entries, as for
// parse_tar_buffer) without reading the payload of any regular member of at least
// `unread_bytes`: on_entry gets a null payload for those, and the bytes of every other one
// (valid during the call). Headers and small payloads are read with positioned reads of a
// few KiB (or a small payload's size), so for samples with one large member the walk costs
// about one read per sample and never touches the large member's pages.
Status walk_tar_range(const FileReader& file, uint64_t begin, uint64_t end,
                      const std::string& source, uint64_t unread_bytes,
                      const TarPayloadFn& on_entry);

// WebDataset's rule (webdataset/tariterators.py: tar_file_iterator's metadata filters and
// base_plus_ext, then group_by_keys' lowercasing): the key is the member path up to the
// first dot of its base name and the field is the rest, in lower case ("a/b/x.Input.bin" ->
// key "a/b/x", field "input.bin"; "x." -> field ""). A base name that starts with a dot
// takes the folder as key when the folder's own name has no dot ("a/.txt" -> "a/", "txt").
// nullopt for a member WebDataset skips: no dot in its base name, a leading dot with no
// such folder ("._x.jpg", ".hidden"), or a metadata name ("__meta__", "__x__/y.json").
struct KeyField {
  std::string_view key;
  std::string field;  // ASCII letters lowercased, as WebDataset lowercases it
};
std::optional<KeyField> split_key(std::string_view path);
// Why split_key() skips `path`, for messages ("has no extension (no dot in its name)").
std::string unmatched_reason(std::string_view path);

}  // namespace shardyard::io
