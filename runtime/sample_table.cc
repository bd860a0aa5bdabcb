#include "runtime/sample_table.h"

#include <algorithm>
#include <cassert>

namespace shardyard {

namespace {

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// decode() checked the stream, but borrowed bytes may change under a table (a mapped file cut
// short reads zeros), so reading stays inside the bytes and stops after ten bytes: wrong
// values then, never a read out of bounds or an oversized shift.
uint64_t get_varint(std::string_view in, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && *pos < in.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(in[(*pos)++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) break;
  }
  return v;
}

// Differences wrap modulo 2^64 and are zigzag-coded, so small steps either way stay small.
uint64_t zigzag(uint64_t diff) { return (diff << 1) ^ (0 - (diff >> 63)); }
uint64_t unzigzag(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }

size_t shared_prefix(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

void SampleTable::Totals::add(const SampleEntry& e) {
  const uint64_t r = e.end - e.begin;
  payload_bytes += e.payload_bytes;
  range += r;
  held += std::max(r, e.payload_bytes);
  max_range = std::max(max_range, r);
  max_payload = std::max(max_payload, e.payload_bytes);
}

void SampleTable::own() {
  if (!keep_) return;
  own_.assign(ext_, ext_size_);
  keep_.reset();
  ext_ = nullptr;
  ext_size_ = 0;
}

void SampleTable::push_back(const SampleEntry& e) {
  own();
  if (count_ % kBlock == 0) {
    blocks_.push_back(own_.size());
    last_key_.clear();
    last_end_ = 0;
  }
  const size_t shared = shared_prefix(last_key_, e.key);
  put_varint(&own_, shared);
  put_varint(&own_, e.key.size() - shared);
  own_.append(e.key, shared, std::string::npos);
  put_varint(&own_, zigzag(e.begin - last_end_));
  put_varint(&own_, zigzag(e.end - e.begin));
  put_varint(&own_, e.payload_bytes);
  last_key_ = e.key;
  last_end_ = e.end;
  totals_.add(e);
  ++count_;
}

void SampleTable::pop_back() {
  assert(count_ > 0);
  own();
  const size_t last = count_ - 1;
  if (last % kBlock == 0) {
    own_.resize(blocks_.back());
    blocks_.pop_back();
  } else {
    own_.resize(iterator_at(last - 1).pos_);
  }
  count_ = last;
  // Maxima cannot be taken back: count again (pop_back is for building and tests).
  totals_ = {};
  for (const auto& e : *this) totals_.add(e);
  if (count_ == 0 || count_ % kBlock == 0) {
    // The next push_back opens a block and resets the coding state.
    last_key_.clear();
    last_end_ = 0;
  } else {
    auto it = iterator_at(count_ - 1);
    last_key_ = it->key;
    last_end_ = it->end;
  }
}

void SampleTable::clear() {
  own();
  own_.clear();
  blocks_.clear();
  count_ = 0;
  totals_ = {};
  last_key_.clear();
  last_end_ = 0;
}

void SampleTable::shrink_to_fit() {
  own_.shrink_to_fit();
  blocks_.shrink_to_fit();
}

SampleTable::const_iterator SampleTable::end() const {
  const_iterator it;
  it.table_ = this;
  it.index_ = count_;
  it.pos_ = encoded().size();
  return it;
}

SampleTable::const_iterator SampleTable::iterator_at(size_t i) const {
  if (i >= count_) return end();
  const_iterator it;
  it.table_ = this;
  it.index_ = i - i % kBlock;
  it.pos_ = blocks_[i / kBlock];
  it.decode();
  while (it.index_ < i) ++it;
  return it;
}

SampleTable::Range SampleTable::byte_range(size_t first, size_t last) const {
  if (first >= last || last > count_) return Range{};
  const std::string_view in = encoded();
  size_t i = 0, pos = 0;
  uint64_t begin = 0, end = 0;  // of entry i once decoded
  // Entry i, decoded over entry i - 1 as const_iterator::decode() does, its key skipped.
  auto decode = [&] {
    const uint64_t prev_end = i % kBlock == 0 ? 0 : end;
    get_varint(in, &pos);  // the length of the prefix shared with the key before
    const uint64_t rest = get_varint(in, &pos);
    pos += static_cast<size_t>(std::min<uint64_t>(rest, in.size() - pos));
    begin = prev_end + unzigzag(get_varint(in, &pos));
    end = begin + unzigzag(get_varint(in, &pos));
    get_varint(in, &pos);  // payload bytes
  };
  // Up to entry k (k >= i), from the start of its block unless it is in entry i's.
  bool started = false;
  auto walk_to = [&](size_t k) {
    if (!started || k / kBlock != i / kBlock) {
      started = true;
      i = k - k % kBlock;
      pos = static_cast<size_t>(blocks_[k / kBlock]);
      decode();
    }
    while (i < k) {
      ++i;
      decode();
    }
  };
  walk_to(first);
  const uint64_t first_begin = begin;
  walk_to(last - 1);
  return Range{first_begin, end};
}

SampleTable::const_iterator& SampleTable::const_iterator::operator++() {
  ++index_;
  if (index_ < table_->count_) decode();
  return *this;
}

void SampleTable::const_iterator::decode() {
  const std::string_view in = table_->encoded();
  uint64_t prev_end = entry_.end;
  if (index_ % kBlock == 0) {
    entry_.key.clear();
    prev_end = 0;
  }
  const size_t shared = static_cast<size_t>(get_varint(in, &pos_));
  const size_t rest = static_cast<size_t>(get_varint(in, &pos_));
  entry_.key.resize(std::min(shared, entry_.key.size()));
  const std::string_view more = in.substr(std::min(pos_, in.size()), rest);
  entry_.key.append(more);
  pos_ += more.size();
  entry_.begin = prev_end + unzigzag(get_varint(in, &pos_));
  entry_.end = entry_.begin + unzigzag(get_varint(in, &pos_));
  entry_.payload_bytes = get_varint(in, &pos_);
}

bool SampleTable::decode(std::string_view bytes, uint64_t count, std::shared_ptr<const void> keep,
                         SampleTable* out, Check check) {
  out->clear();
  // The smallest entry is five one-byte varints.
  if (count > bytes.size() / 5) return false;
  size_t pos = 0;
  bool ok = true;
  auto varint = [&]() -> uint64_t {
    // Most numbers of a table take one byte (shared prefixes, the gaps between samples).
    if (pos < bytes.size() && static_cast<unsigned char>(bytes[pos]) < 0x80)
      return static_cast<unsigned char>(bytes[pos++]);
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= bytes.size()) break;
      const auto byte = static_cast<unsigned char>(bytes[pos++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) {
        // Canonical only (no trailing zero groups, nothing beyond bit 63), so that one table
        // has one encoding.
        if ((byte == 0 && shift > 0) || (shift == 63 && byte > 1)) break;
        return v;
      }
    }
    ok = false;  // past the end, longer than ten bytes or not canonical
    return 0;
  };
  SampleTable t;
  t.blocks_.reserve(static_cast<size_t>((count + kBlock - 1) / kBlock));
  SampleEntry e;  // its key stays empty: Totals::add() reads the numbers
  for (uint64_t i = 0; i < count && ok; ++i) {
    if (i % kBlock == 0) {
      t.blocks_.push_back(pos);
      t.last_key_.clear();
      t.last_end_ = 0;
    }
    const uint64_t shared = varint(), rest = varint();
    if (!ok || rest > bytes.size() - pos) return false;
    if (check == Check::kCanonical) {
      if (shared > t.last_key_.size()) return false;
      // The shared prefix is the longest one, as push_back() writes it.
      if (shared < t.last_key_.size() && rest > 0 &&
          bytes[pos] == t.last_key_[static_cast<size_t>(shared)])
        return false;
      t.last_key_.resize(static_cast<size_t>(shared));
      t.last_key_.append(bytes, pos, static_cast<size_t>(rest));
    }
    pos += static_cast<size_t>(rest);
    e.begin = t.last_end_ + unzigzag(varint());
    e.end = e.begin + unzigzag(varint());
    e.payload_bytes = varint();
    t.totals_.add(e);
    t.last_end_ = e.end;
  }
  if (!ok || pos != bytes.size()) return false;
  if (keep) {
    t.keep_ = std::move(keep);
    t.ext_ = bytes.data();
    t.ext_size_ = bytes.size();
  } else {
    t.own_.assign(bytes);
  }
  t.count_ = static_cast<size_t>(count);
  // The key the next push_back() is coded against, where the walk did not rebuild keys.
  if (check == Check::kBounds && count % kBlock != 0)
    t.last_key_ = t.iterator_at(t.count_ - 1)->key;
  *out = std::move(t);
  return true;
}

std::vector<SampleEntry> SampleTable::to_vector() const {
  std::vector<SampleEntry> out;
  out.reserve(count_);
  for (const auto& e : *this) out.push_back(e);
  return out;
}

size_t SampleTable::memory_bytes() const {
  return own_.capacity() + blocks_.capacity() * sizeof(uint64_t);
}

}  // namespace shardyard
