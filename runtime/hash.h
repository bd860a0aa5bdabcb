// Small, stable, non-cryptographic hashing and counter-based randomness.
//
// Everything here is a pure function: the same input gives the same output on every
// machine and in every process, which is what makes the global order of an epoch and the
// per-item random streams reproducible. Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string_view>

namespace shardyard {

// SplitMix64 finaliser: a strong 64-bit mixer.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines values into one key: hash_combine(seed, epoch, item, ...).
inline uint64_t hash_combine(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b)); }
template <typename... Rest>
uint64_t hash_combine(uint64_t a, uint64_t b, Rest... rest) {
  return hash_combine(hash_combine(a, b), static_cast<uint64_t>(rest)...);
}

// Incremental 64-bit hash of a byte stream (FNV-1a core with a final mix). Used for
// dataset fingerprints and file checksums, not for security.
class Hasher {
 public:
  void add(std::string_view bytes) {
    for (unsigned char c : bytes) h_ = (h_ ^ c) * 0x100000001b3ULL;
  }
  void add_u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) h_ = (h_ ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
  }
  void add_string(std::string_view s) {  // length-prefixed, so ("ab","c") != ("a","bc")
    add_u64(s.size());
    add(s);
  }
  uint64_t digest() const { return mix64(h_); }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// A counter-based random stream: the n-th draw depends only on (key, n). Give every item
// its own stream with ItemRng(hash_combine(seed, epoch, item_id)); no generator state is
// shared between workers, so results do not depend on which worker ran the item.
class ItemRng {
 public:
  explicit ItemRng(uint64_t key) : key_(key) {}
  uint64_t next_u64() { return mix64(key_ ^ mix64(counter_++)); }
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift, bias below 2^-32 for the
  // bounds used here).
  uint64_t uniform(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * bound) >> 64);
  }
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace shardyard
