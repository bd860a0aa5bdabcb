#include "test_items.h"

#include <cstring>
#include <memory>
#include <vector>

namespace shardyard::io::testing {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  uint64_t s;
  uint64_t next() { return s = mix(s); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
};

std::string bytes(uint64_t seed, size_t n) {
  std::string out(n, '\0');
  Rng r{seed};
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = r.next();
    std::memcpy(&out[i], &v, std::min<size_t>(8, n - i));
  }
  return out;
}

// Mostly small, sometimes up to max.
size_t field_size(Rng& r, uint32_t max) {
  switch (r.below(4)) {
    case 0:
      return r.below(16);
    case 1:
      return r.below(std::min<uint32_t>(max, 4096) + 1);
    default:
      return r.below(uint64_t{max} + 1);
  }
}

}  // namespace

Packet make_packet(const StreamSpec& spec, uint64_t index) {
  Rng r{mix(spec.seed * 1000003 + index)};
  Packet p;
  const size_t n = 1 + r.below(spec.max_items);
  // Windows: fields of consecutive items view one buffer with overlap.
  std::shared_ptr<std::string> windows;
  if (index % 5 == 0) windows = std::make_shared<std::string>(bytes(r.next(), 64 * n + 256));
  for (size_t i = 0; i < n; ++i) {
    Item it;
    it.id = index * 1000 + i;
    it.shard = static_cast<uint32_t>(r.below(64));
    it.position = r.next();
    it.worker = static_cast<uint32_t>(r.below(8));
    it.key = "p" + std::to_string(index) + "/i" + std::to_string(i);
    const size_t fields = r.below(4);
    for (size_t f = 0; f < fields; ++f)
      it.set_field(std::string(1, static_cast<char>('a' + f)),
                   bytes(r.next(), field_size(r, spec.max_field_bytes)));
    if (windows) {
      it.owner = windows;
      it.set_field_view("win", reinterpret_cast<const uint8_t*>(windows->data()) + 64 * i, 256);
    }
    if (r.below(3) == 0)
      it.stage_state = std::make_shared<const std::string>(bytes(r.next(), r.below(40)));
    if (r.below(5) == 0)
      it.dispatch_state = std::make_shared<const std::string>("d" + std::to_string(i));
    p.items.push_back(std::move(it));
  }
  return p;
}

std::string diff_packet(const Packet& got, const StreamSpec& spec, uint64_t index) {
  const Packet want = make_packet(spec, index);
  const std::string at = "packet " + std::to_string(index);
  if (got.items.size() != want.items.size())
    return at + ": " + std::to_string(got.items.size()) + " items, want " +
           std::to_string(want.items.size());
  auto same_state = [](const auto& a, const auto& b) { return (!a && !b) || (a && b && *a == *b); };
  for (size_t i = 0; i < want.items.size(); ++i) {
    const Item &g = got.items[i], &w = want.items[i];
    const std::string it = at + " item " + std::to_string(i) + " (" + w.key + ")";
    if (g.key != w.key || g.id != w.id || g.shard != w.shard || g.position != w.position ||
        g.worker != w.worker)
      return it + ": key or numbers differ (got key " + g.key + ")";
    if (!same_state(g.stage_state, w.stage_state) ||
        !same_state(g.dispatch_state, w.dispatch_state))
      return it + ": states differ";
    if (!g.owner) return it + ": no owner";
    if (g.fields.size() != w.fields.size()) return it + ": field count differs";
    for (size_t f = 0; f < w.fields.size(); ++f) {
      if (g.fields[f].name != w.fields[f].name || g.fields[f].size != w.fields[f].size)
        return it + ": field " + w.fields[f].name + " differs in name or size";
      if (w.fields[f].size != 0 &&
          std::memcmp(g.fields[f].data, w.fields[f].data, w.fields[f].size) != 0)
        return it + ": field " + w.fields[f].name + " differs in its bytes";
    }
  }
  return "";
}

}  // namespace shardyard::io::testing
