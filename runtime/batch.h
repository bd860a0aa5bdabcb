// Batch: B items of one rank at one step, laid out column by column.
//
// Each field is one contiguous, page-aligned byte buffer plus B+1 offsets (the layout of
// Arrow's binary arrays): item i's bytes are data[offsets[i], offsets[i+1]). A field that
// has the same size in every item is therefore a [B, size] tensor without another copy.
// An item that lacks a field has an empty entry there (offsets[i] == offsets[i+1]) and
// `present` says which items have it.
//
// A Batch owns its buffers (returned to the pool when it is destroyed). Immutable after
// build_batch() (or BatchBuilder::finish()) and after the loader attached a device copy of its
// columns (gpu/, through set_device() before the batch is handed out); safe to read from several
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/item.h"
#include "runtime/status.h"

namespace shardyard {

struct Column {
  std::string name;
  std::shared_ptr<Buffer> buffer;  // contiguous bytes of all items
  std::vector<uint64_t> offsets;   // size() + 1 entries
  std::vector<bool> present;       // which items have the field

  const uint8_t* data() const { return buffer->data(); }
  uint64_t bytes() const { return offsets.back(); }
  std::string_view value(size_t i) const {
    return {reinterpret_cast<const char*>(buffer->data()) + offsets[i],
            static_cast<size_t>(offsets[i + 1] - offsets[i])};
  }
  // The common size when every item has the field with the same size, else -1.
  int64_t fixed_size() const;
};

// Something a lower layer cannot name that travels with a batch: gpu::DeviceBatch, the
// batch's columns in device memory (gpu::on_device() reads it).
class BatchAttachment {
 public:
  virtual ~BatchAttachment() = default;
};

class Batch {
 public:
  uint32_t epoch() const { return epoch_; }
  uint64_t step() const { return step_; }
  uint32_t rank() const { return rank_; }
  size_t size() const { return keys_.size(); }
  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<uint64_t>& item_ids() const { return ids_; }
  const std::vector<Column>& columns() const { return columns_; }
  const Column* field(std::string_view name) const;
  uint64_t payload_bytes() const;
  // The device copy of the columns; null when batches stay in host memory. Copies of the
  // batch share it; it lives as long as the last of them.
  const std::shared_ptr<const BatchAttachment>& device() const { return device_; }
  void set_device(std::shared_ptr<const BatchAttachment> d) { device_ = std::move(d); }

 private:
  friend class BatchBuilder;
  uint32_t epoch_ = 0;
  uint64_t step_ = 0;
  uint32_t rank_ = 0;
  std::vector<std::string> keys_;
  std::vector<uint64_t> ids_;
  std::vector<Column> columns_;  // sorted by name
  std::shared_ptr<const BatchAttachment> device_;
};

// Collates items (in order) into a batch: one copy of each payload into its column; an
// unread field (Field::unread()) is read from its file straight into its place there. The
// items are left without keys (moved out) and should be dropped afterwards. Fails only when
// an unread field cannot be read (the reader's error, naming the item).
Result<Batch> build_batch(std::vector<Item>& items, uint32_t epoch, uint64_t step, uint32_t rank,
                          BufferPool& pool);

// build_batch() in parts, so that several threads can fill one batch. The constructor lays
// the columns out (every item's offsets, which items have each field) and takes their
// buffers from the pool; fill(begin, end) copies or reads items [begin, end) into their
// places, and runs on several threads at once for ranges that do not overlap; finish(),
// once every item is filled, hands out the batch and moves the keys out of the items.
// `items` must stay as it is until finish().
class BatchBuilder {
 public:
  BatchBuilder(std::vector<Item>& items, uint32_t epoch, uint64_t step, uint32_t rank,
               BufferPool& pool);
  size_t size() const { return items_->size(); }
  // Fails only when an unread field cannot be read (the reader's error, naming the item).
  Status fill(size_t begin, size_t end) const;
  Batch finish();

 private:
  std::vector<Item>* items_;
  Batch batch_;
  bool uniform_ = false;  // every item has the same fields, in the columns' order
};

}  // namespace shardyard
