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

Result<Batch> build_batch(std::vector<Item>& items, uint32_t epoch, uint64_t step, uint32_t rank,
                          BufferPool& pool) {
  Batch b;
  b.epoch_ = epoch;
  b.step_ = step;
  b.rank_ = rank;
  const size_t n = items.size();
  b.keys_.reserve(n);
  b.ids_.reserve(n);

  // Field names in sorted order with their total sizes. Almost always every item has the
  // same fields, so check that first and fall back to a map when they differ.
  std::vector<std::pair<std::string, uint64_t>> names;
  bool uniform = n > 0;
  if (n > 0) {
    for (const auto& f : items[0].fields) names.emplace_back(f.name, 0);
    for (const auto& it : items) {
      if (it.fields.size() != names.size()) {
        uniform = false;
        break;
      }
      for (size_t k = 0; k < names.size(); ++k) {
        if (it.fields[k].name != names[k].first) {
          uniform = false;
          break;
        }
        names[k].second += it.fields[k].size;
      }
      if (!uniform) break;
    }
  }
  if (!uniform) {
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
    col.present.assign(n, uniform);
  }
  for (size_t i = 0; i < n; ++i) {
    auto& it = items[i];
    for (size_t k = 0; k < names.size(); ++k) {
      auto& col = b.columns_[k];
      const Field* f = uniform ? &it.fields[k] : it.field(col.name);
      uint64_t at = col.offsets[i];
      if (f != nullptr) {
        if (f->unread()) {
          SY_RETURN_IF_ERROR(read_unread(it, *f, col.buffer->data() + at));
        } else if (f->size > 0) {
          std::memcpy(col.buffer->data() + at, f->data, f->size);
        }
        at += f->size;
        if (!uniform) col.present[i] = true;
      }
      col.offsets[i + 1] = at;
    }
    b.keys_.push_back(std::move(it.key));
    b.ids_.push_back(it.id);
  }
  return b;
}

}  // namespace shardyard
