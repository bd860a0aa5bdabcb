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

namespace shardyard {

struct Field {
  std::string name;  // "jpg", "cls", "input.seq.bin": the member name after the key
  const uint8_t* data = nullptr;
  size_t size = 0;
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
  void remove_field(std::string_view name);
};

// Bytes of a local source file held in memory as they are in the file (SampleReader maps
// large ranges of a local tar shard): an item whose `owner` is one of these has fields that
// can be named by their place in the file instead of copied, which a worker process does for
// large fields (io/transport/item_codec.h, "File ranges"). Any other owner is not one, so a
// stage that replaces `owner` turns it off for that item.
struct FileBytes {
  std::shared_ptr<const void> keep;  // what keeps data alive (the mapping)
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint32_t source = 0;  // index of the source in the manifest
  uint64_t offset = 0;  // data[0] is byte `offset` of that source
};
// An owner for Item::owner that is recognised by file_bytes_of().
std::shared_ptr<const void> file_bytes_owner(FileBytes bytes);
// The FileBytes that `owner` is, or nullptr when it is something else.
const FileBytes* file_bytes_of(const std::shared_ptr<const void>& owner);

}  // namespace shardyard
