#include "runtime/batch.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace shardyard {

int64_t Column::fixed_size() const {
  if (offsets.size() < 2) return -1;
  uint64_t first = offsets[1] - offsets[0];
  for (size_t i = 0; i + 1 < offsets.size(); ++i)
    if (!present[i] || offsets[i + 1] - offsets[i] != first) return -1;
  return static_cast<int64_t>(first);
}

const Column* Batch::field(std::string_view name) const {
  for (const auto& c : columns_)
    if (c.name == name) return &c;
  return nullptr;
}

uint64_t Batch::payload_bytes() const {
  uint64_t n = 0;
  for (const auto& c : columns_) n += c.bytes();
  return n;
}

namespace {

// Reads item's unread field f into dst.
Status read_unread(const Item& item, const Field& f, uint8_t* dst) {
  const FileReader* reader = unread_reader(item);
  if (reader == nullptr)
    return internal_error("item '" + item.key + "': field '" + f.name +
                          "' was not read and its item has no reader for it");
  Status st = reader->read(f.file_offset, dst, f.size);
  if (!st.is_ok())
    return Status(st.code(), "item '" + item.key + "', field '" + f.name + "': " + st.message());
  return Status::ok();
}

}  // namespace

BatchBuilder::BatchBuilder(std::vector<Item>& items, uint32_t epoch, uint64_t step, uint32_t rank,
                           BufferPool& pool)
    : items_(&items) {
  Batch& b = batch_;
  b.epoch_ = epoch;
  b.step_ = step;
  b.rank_ = rank;
  const size_t n = items.size();

  // Field names in sorted order with their total sizes. Almost always every item has the
  // same fields, so check that first and fall back to a map when they differ.
  std::vector<std::pair<std::string, uint64_t>> names;
  uniform_ = n > 0;
  if (n > 0) {
    for (const auto& f : items[0].fields) names.emplace_back(f.name, 0);
    for (const auto& it : items) {
      if (it.fields.size() != names.size()) {
        uniform_ = false;
        break;
      }
      for (size_t k = 0; k < names.size(); ++k) {
        if (it.fields[k].name != names[k].first) {
          uniform_ = false;
          break;
        }
        names[k].second += it.fields[k].size;
      }
      if (!uniform_) break;
    }
  }
  if (!uniform_) {
    std::map<std::string, uint64_t> all;
    for (const auto& it : items)
      for (const auto& f : it.fields) all[f.name] += f.size;
    names.assign(all.begin(), all.end());
  }

  b.columns_.resize(names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    auto& col = b.columns_[k];
    col.name = names[k].first;
    col.buffer = pool.acquire(names[k].second);
    col.offsets.assign(n + 1, 0);
    col.present.assign(n, uniform_);
    // Every item's place now, so that fill() needs nothing of the items before its range.
    for (size_t i = 0; i < n; ++i) {
      const Field* f = uniform_ ? &items[i].fields[k] : items[i].field(col.name);
      col.offsets[i + 1] = col.offsets[i] + (f != nullptr ? f->size : 0);
      if (!uniform_ && f != nullptr) col.present[i] = true;
    }
  }
}

Status BatchBuilder::fill(size_t begin, size_t end) const {
  const auto& items = *items_;
  end = std::min(end, items.size());
  for (size_t i = begin; i < end; ++i) {
    const auto& it = items[i];
    for (size_t k = 0; k < batch_.columns_.size(); ++k) {
      const auto& col = batch_.columns_[k];
      const Field* f = uniform_ ? &it.fields[k] : it.field(col.name);
      if (f == nullptr) continue;
      uint8_t* dst = col.buffer->data() + col.offsets[i];
      if (f->unread()) {
        SY_RETURN_IF_ERROR(read_unread(it, *f, dst));
      } else if (f->size > 0) {
        std::memcpy(dst, f->data, f->size);
      }
    }
  }
  return Status::ok();
}

Batch BatchBuilder::finish() {
  Batch& b = batch_;
  b.keys_.reserve(items_->size());
  b.ids_.reserve(items_->size());
  for (auto& it : *items_) {
    b.keys_.push_back(std::move(it.key));
    b.ids_.push_back(it.id);
  }
  return std::move(batch_);
}

Result<Batch> build_batch(std::vector<Item>& items, uint32_t epoch, uint64_t step, uint32_t rank,
                          BufferPool& pool) {
  BatchBuilder builder(items, epoch, step, rank, pool);
  SY_RETURN_IF_ERROR(builder.fill(0, builder.size()));
  return builder.finish();
}

}  // namespace shardyard
