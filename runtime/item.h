// Item: the unit a pipeline emits (a sample, or something derived from one).
//
// An item's fields are views into bytes kept alive by `owner` (usually the chunk buffer
// the sample was read into) and `owners` (bytes added later), so reading and passing items
// on copies no payload. The common case, one owner, costs no allocation. A stage
// that makes new bytes stores them with set_field(), which takes ownership.
//
// Single-owner: an item is moved from stage to stage and thread to thread, never shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace shardyard {

struct Field {
  std::string name;  // "jpg", "cls", "input.seq.bin": the member name after the key
  const uint8_t* data = nullptr;
  size_t size = 0;
  // An unread field (data null, size > 0) is bytes [file_offset, file_offset + size) of the
  // source file its item's FileBytes names; build_batch() reads it straight into its column.
  uint64_t file_offset = 0;
  bool unread() const { return data == nullptr && size > 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data), size}; }
};

struct Item {
  uint64_t id = 0;     // canonical item id (see runtime/shard.h)
  uint32_t shard = 0;  // logical shard that owns it
  std::string key;
  std::vector<Field> fields;                        // sorted by name
  std::shared_ptr<const void> owner;                // what the fields were read into
  std::vector<std::shared_ptr<const void>> owners;  // further bytes (set_field, stages)
  // Position in the rank's order of the epoch, set by a dispatcher that routes items to
  // workers (the loader puts them back in order by it).
  uint64_t position = 0;
  uint32_t worker = 0;  // the worker of the rank that ran its replicable stages
  // Set by a worker whose pipeline has stateful stages: their encoded states right after
  // this item (runtime/checkpoint.h encode_stage_states), for checkpoints.
  std::shared_ptr<const std::string> stage_state;
  // The same for the stateful stages of the rank's dispatcher.
  std::shared_ptr<const std::string> dispatch_state;

  const Field* field(std::string_view name) const;
  uint64_t payload_bytes() const;
  // Adds or replaces a field with bytes the item now owns; keeps fields sorted.
  void set_field(std::string name, std::string bytes);
  // Adds or replaces a field that views bytes kept alive by owner or owners.
  void set_field_view(std::string name, const uint8_t* data, size_t size);
  // Adds or replaces a field as it is (a view, or an unread field); keeps fields sorted.
  void put_field(Field field);
  void remove_field(std::string_view name);
};

// LoaderOptions::read_into_batch_bytes's default: members of local tar shards at least this
// long are read straight into their batch column (where no stage reads field bytes).
inline constexpr uint64_t kDefaultReadIntoBatchBytes = uint64_t{64} << 10;

// Reads bytes of one source file where they are needed (io/ implements it for local
// files; runtime/ cannot name a file). Thread-safe: collators read through one at once.
class FileReader {
 public:
  virtual ~FileReader() = default;
  // Exactly n bytes at `offset` into dst, or an error naming the file (a file cut short
  // or changed since its manifest was built).
  virtual Status read(uint64_t offset, uint8_t* dst, size_t n) const = 0;
};

// Bytes of a local source file held in memory as they are in the file (SampleReader maps
// large ranges of a local tar shard), or not read yet: an item whose `owner` is one of
// these has fields that can be named by their place in the file instead of copied, which a
// worker process does for large fields (io/transport/item_codec.h, "File ranges"). Any
// other owner is not one, so a stage that replaces `owner` turns it off for that item.
// With a `reader`, the item may also have unread fields (Field::unread()): SampleReader
// leaves large members of a local tar shard unread when the job collates them untouched.
struct FileBytes {
  std::shared_ptr<const void> keep;  // what keeps data alive (the mapping)
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint32_t source = 0;                       // index of the source in the manifest
  uint64_t offset = 0;                       // data[0] is byte `offset` of that source
  std::shared_ptr<const FileReader> reader;  // reads the item's unread fields
};
// An owner for Item::owner that is recognised by file_bytes_of().
std::shared_ptr<const void> file_bytes_owner(FileBytes bytes);
// The FileBytes that `owner` is, or nullptr when it is something else.
const FileBytes* file_bytes_of(const std::shared_ptr<const void>& owner);
// The reader of an item's unread fields: that of the FileBytes among its owner and
// owners, or nullptr when none has one.
const FileReader* unread_reader(const Item& item);

}  // namespace shardyard
