// SampleTable: one source's samples (key and byte range), packed.
//
// A manifest of millions of tiny samples must cost a few bytes per sample, not a
// std::string and three u64 (56 bytes). A SampleTable stores its entries as a byte stream in
// blocks of kBlock samples: within a block each key is the length of the prefix it shares
// with the key before it plus the rest, and each range is the distance of `begin` from the
// previous sample's `end`, then `end - begin`, then `payload_bytes`, all LEB128 varints (the
// differences zigzag-coded, so any u64 values round-trip). A block starts afresh (empty
// previous key, previous end 0), and the byte offset of every block is kept, so entry i
// decodes from its block's start: at most kBlock entries. For the consecutive samples of a tar
// shard an entry is a few bytes: the cached manifest of bench/memory_bench.py's 2 million
// samples takes 8.1 bytes a sample (docs/performance.md, "Memory against the number of
// samples").
//
// Storage: the table's own bytes, or bytes it does not own (a memory-mapped manifest file,
// shared by the processes of a node), kept alive by a handle it holds; push_back() and
// pop_back() copy such bytes first. Decoding never reads outside the bytes, whatever they
// hold (a guarded mapping of a file cut short reads zeros: io/fs/mapping_guard.h).
//
// Reading: iterate (a const_iterator decodes forward, one entry at a time, and hands out a
// reference to the entry it holds) or index (operator[] returns a decoded copy; for runs use
// iterator_at()). Writing: push_back() appends; pop_back() and assignment from entries are
// there for building and for tests. The table has no mutation in place: rebuild it.
//
// Thread-compatible: const methods may run concurrently; iterators are single-owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardyard {

struct SampleEntry {
  std::string key;
  uint64_t begin = 0;  // first byte of the sample's first member header (tar), or file index
  uint64_t end = 0;    // one past the sample's last member incl. padding, or file index
  uint64_t payload_bytes = 0;  // sum of the sample's field sizes
};

class SampleTable {
 public:
  static constexpr size_t kBlock = 16;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = SampleEntry;
    using difference_type = std::ptrdiff_t;
    using pointer = const SampleEntry*;
    using reference = const SampleEntry&;

    const_iterator() = default;
    reference operator*() const { return entry_; }
    pointer operator->() const { return &entry_; }
    const_iterator& operator++();
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    bool operator==(const const_iterator& o) const { return index_ == o.index_; }
    bool operator!=(const const_iterator& o) const { return index_ != o.index_; }
    size_t index() const { return index_; }

   private:
    friend class SampleTable;
    void decode();  // decodes entry index_ at pos_ over the entry before it

    const SampleTable* table_ = nullptr;
    size_t index_ = 0;
    size_t pos_ = 0;  // byte offset just past entry index_
    SampleEntry entry_;
  };

  SampleTable() = default;
  SampleTable(std::initializer_list<SampleEntry> entries) {
    assign(entries.begin(), entries.end());
  }
  explicit SampleTable(const std::vector<SampleEntry>& entries) {
    assign(entries.begin(), entries.end());
  }
  SampleTable& operator=(std::initializer_list<SampleEntry> entries) {
    assign(entries.begin(), entries.end());
    return *this;
  }

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  void push_back(const SampleEntry& e);
  void pop_back();  // the table must not be empty
  void clear();
  // Returns the spare capacity of the byte stream and block index to the allocator.
  void shrink_to_fit();

  // A decoded copy (const, so that assigning to its members does not compile and mislead).
  const SampleEntry operator[](size_t i) const { return *iterator_at(i); }
  const SampleEntry back() const { return (*this)[count_ - 1]; }
  const_iterator begin() const { return iterator_at(0); }
  const_iterator end() const;
  // An iterator at entry i (i <= size()); decodes at most kBlock entries.
  const_iterator iterator_at(size_t i) const;
  // Where the run of entries [first, last) lies: the `begin` of entry `first` and the `end`
  // of entry `last - 1` (first < last <= size(); an empty range otherwise). What a read of
  // the run needs, found without decoding keys: at most 2 * kBlock entries are walked, their
  // keys skipped.
  struct Range {
    uint64_t begin = 0, end = 0;
  };
  Range byte_range(size_t first, size_t last) const;

  // The packed stream, what the manifest format stores (docs/manifest-format.md).
  std::string_view encoded() const { return keep_ ? std::string_view(ext_, ext_size_) : own_; }
  // Makes *out the table of `count` entries that `bytes` (a stream encoded() gave) holds:
  // a copy of them, or, with `keep` set, the bytes themselves, which must stay unchanged
  // while `keep` lives (the table and its copies hold it).
  // Every entry is checked to lie inside the bytes, which must hold nothing else, and its
  // varints to be the shortest; with kCanonical each shared prefix is also checked to be
  // the longest, as push_back() codes it, so that a table has one encoding. False for
  // anything else (damage), and *out is left empty. kBounds skips the keys instead of
  // rebuilding each to compare its prefix (a quarter fewer instructions on tar shards of
  // small samples, docs/performance.md), for bytes this build wrote that something else
  // vouches for: a manifest's checksum, or the rank that handed them to its worker
  // processes. Either way, reading the table never goes outside the bytes.
  enum class Check { kCanonical, kBounds };
  static bool decode(std::string_view bytes, uint64_t count, std::shared_ptr<const void> keep,
                     SampleTable* out, Check check = Check::kCanonical);
  // Whether the table's bytes are another's (decoded with `keep`).
  bool borrowed() const { return keep_ != nullptr; }

  // Sums and maxima over the entries, kept up to date as entries are added, so that start-up
  // (the planner's chunk size, the bound on one sample, mean sizes) needs no walk over
  // millions of samples. Sums wrap modulo 2^64 like the ranges they add.
  struct Totals {
    uint64_t payload_bytes = 0;  // sum of payload_bytes
    uint64_t range = 0;          // sum of end - begin
    uint64_t held = 0;           // sum of max(end - begin, payload_bytes)
    uint64_t max_range = 0;      // largest end - begin
    uint64_t max_payload = 0;    // largest payload_bytes
    void add(const SampleEntry& e);
  };
  const Totals& totals() const { return totals_; }

  std::vector<SampleEntry> to_vector() const;
  // Bytes the table holds (stream and block index, allocated capacity included).
  size_t memory_bytes() const;

 private:
  template <typename It>
  void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(*first);
  }

  void own();  // copies borrowed bytes, so the table can change

  std::string own_;                   // the bytes, unless borrowed
  std::shared_ptr<const void> keep_;  // set when borrowed: keeps ext_ alive
  const char* ext_ = nullptr;
  size_t ext_size_ = 0;
  std::vector<uint64_t> blocks_;  // byte offset of entry k * kBlock
  size_t count_ = 0;
  Totals totals_;
  // The last entry's key and end, what the next entry is coded against.
  std::string last_key_;
  uint64_t last_end_ = 0;
};

}  // namespace shardyard
