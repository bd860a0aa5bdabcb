#include "runtime/item.h"

#include <algorithm>

namespace shardyard {

const Field* Item::field(std::string_view name) const {
  for (const auto& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

uint64_t Item::payload_bytes() const {
  uint64_t n = 0;
  for (const auto& f : fields) n += f.size;
  return n;
}

void Item::put_field(Field field) {
  if (fields.empty() || fields.back().name < field.name) {  // members usually come in order
    fields.push_back(std::move(field));
    return;
  }
  auto it = std::lower_bound(fields.begin(), fields.end(), field.name,
                             [](const Field& f, const std::string& n) { return f.name < n; });
  if (it != fields.end() && it->name == field.name) {
    *it = std::move(field);
  } else {
    fields.insert(it, std::move(field));
  }
}

void Item::set_field_view(std::string name, const uint8_t* data, size_t size) {
  put_field(Field{std::move(name), data, size, 0});
}

void Item::set_field(std::string name, std::string bytes) {
  auto owned = std::make_shared<std::string>(std::move(bytes));
  const auto* data = reinterpret_cast<const uint8_t*>(owned->data());
  size_t size = owned->size();
  owners.push_back(std::move(owned));
  set_field_view(std::move(name), data, size);
}

void Item::remove_field(std::string_view name) {
  fields.erase(
      std::remove_if(fields.begin(), fields.end(), [&](const Field& f) { return f.name == name; }),
      fields.end());
}

namespace {

// The deleter type marks an owner made by file_bytes_owner(): std::get_deleter() finds it
// only in a control block made with it, whatever the pointer's static type. It keeps the
// object's address, so that a pointer made with the aliasing constructor from such an
// owner (same control block, another address) still finds the FileBytes, not its own.
struct FileBytesDeleter {
  const FileBytes* self = nullptr;
  void operator()(const FileBytes* p) const { delete p; }
};

}  // namespace

std::shared_ptr<const void> file_bytes_owner(FileBytes bytes) {
  const auto* p = new FileBytes(std::move(bytes));
  return std::shared_ptr<const FileBytes>(p, FileBytesDeleter{p});
}

const FileBytes* file_bytes_of(const std::shared_ptr<const void>& owner) {
  if (owner == nullptr) return nullptr;
  const auto* d = std::get_deleter<FileBytesDeleter>(owner);
  return d == nullptr ? nullptr : d->self;
}

const FileReader* unread_reader(const Item& item) {
  if (const FileBytes* f = file_bytes_of(item.owner); f != nullptr && f->reader)
    return f->reader.get();
  for (const auto& o : item.owners)
    if (const FileBytes* f = file_bytes_of(o); f != nullptr && f->reader) return f->reader.get();
  return nullptr;
}

}  // namespace shardyard
