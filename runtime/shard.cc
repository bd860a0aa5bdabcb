#include "runtime/shard.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>

#include "runtime/hash.h"

namespace shardyard {

ItemIndex::ItemIndex(const Manifest& m) {
  starts_.reserve(m.sources.size() + 1);
  uint64_t at = 0;
  for (size_t s = 0; s < m.sources.size(); ++s) {
    starts_.push_back(at);
    at += m.source_items(s);
  }
  starts_.push_back(at);
}

ItemLocation ItemIndex::locate(uint64_t item) const {
  // The last source whose start is <= item and that is not empty.
  auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, item);
  auto s = static_cast<uint32_t>(it - starts_.begin() - 1);
  return {s, item - starts_[s]};
}

uint32_t default_logical_shards(uint64_t num_items, size_t num_sources) {
  if (num_items == 0) return 1;
  uint64_t l;
  if (num_sources >= 256) {
    l = 256;
  } else if (num_sources >= 64) {
    l = num_sources;
  } else {
    uint64_t s = std::max<uint64_t>(num_sources, 1);
    l = s * ((64 + s - 1) / s);
  }
  return static_cast<uint32_t>(std::max<uint64_t>(1, std::min(l, num_items)));
}

uint32_t default_logical_shards(const Manifest& m) {
  if (m.windows.enabled() && !m.sources.empty())
    return static_cast<uint32_t>(std::min<uint64_t>(m.sources.size(), UINT32_MAX));
  return default_logical_shards(m.num_samples(), m.sources.size());
}

LogicalShards make_logical_shards(const Manifest& m, const ItemIndex& index, uint32_t count) {
  if (m.windows.enabled() && count == m.sources.size() && count == index.num_sources()) {
    std::vector<uint64_t> bounds(count + 1);
    for (uint32_t s = 0; s < count; ++s) bounds[s] = index.source_begin(s);
    bounds[count] = index.num_items();
    return LogicalShards::from_bounds(std::move(bounds));
  }
  return LogicalShards(index.num_items(), count);
}

uint64_t held_bytes(const Manifest& m) {
  uint64_t n = 0;
  for (const auto& s : m.sources) {
    if (s.kind == SourceKind::kRecords) {
      n += s.windows * m.window_payload_bytes();
      continue;
    }
    // A tar sample's range holds its members' headers and padding besides their bytes; a
    // directory's range counts files, not bytes.
    const bool ranges_are_bytes = s.kind == SourceKind::kTar || s.kind == SourceKind::kTarGz;
    n += ranges_are_bytes ? s.samples.totals().held : s.samples.totals().payload_bytes;
  }
  return n;
}

namespace {
// Items per chunk of about max(floor, all / L) bytes of what items cost (1 to 8192).
uint32_t items_per_chunk(const Manifest& m, uint32_t logical_shards, uint64_t floor, uint64_t all) {
  uint64_t n = m.num_samples();
  if (n == 0) return 1;
  const uint64_t per_item = held_bytes(m) / n + kItemCostBytes;
  const uint64_t target = std::max<uint64_t>(floor, all / std::max(1u, logical_shards));
  return static_cast<uint32_t>(std::clamp<uint64_t>(target / per_item, 1, 8192));
}
}  // namespace

uint32_t default_chunk_items(const Manifest& m, uint32_t logical_shards) {
  return items_per_chunk(m, logical_shards, 64 << 10, 8ull << 20);
}

uint32_t default_read_items(const Manifest& m, uint32_t logical_shards) {
  return items_per_chunk(m, logical_shards, 32 << 10, 2ull << 20);
}

std::vector<uint32_t> assign_contiguous(const std::vector<ShardInfo>& shards, uint32_t parts) {
  std::vector<uint32_t> out(shards.size());
  for (size_t i = 0; i < shards.size(); ++i)
    out[i] = static_cast<uint32_t>(static_cast<unsigned __int128>(i) * parts / shards.size());
  return out;
}

std::vector<uint32_t> assign_strided(const std::vector<ShardInfo>& shards, uint32_t parts) {
  std::vector<uint32_t> out(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) out[i] = static_cast<uint32_t>(i % parts);
  return out;
}

ShardingStrategy by_key(std::function<std::string(const ShardInfo&)> key_of) {
  return [key_of = std::move(key_of)](const std::vector<ShardInfo>& shards, uint32_t parts) {
    std::vector<std::string> keys;
    keys.reserve(shards.size());
    for (const auto& s : shards) keys.push_back(key_of(s));
    std::vector<std::string> distinct(keys);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::vector<uint32_t> out(shards.size());
    for (size_t i = 0; i < shards.size(); ++i) {
      auto pos = std::lower_bound(distinct.begin(), distinct.end(), keys[i]) - distinct.begin();
      out[i] = static_cast<uint32_t>(pos % parts);
    }
    return out;
  };
}

StrategyRegistry::StrategyRegistry() {
  strategies_["contiguous"] = assign_contiguous;
  strategies_["strided"] = assign_strided;
}

StrategyRegistry& StrategyRegistry::global() {
  static StrategyRegistry registry;
  return registry;
}

Status StrategyRegistry::add(const std::string& name, ShardingStrategy strategy) {
  if (name.empty() || !strategy)
    return invalid_argument("a sharding strategy needs a name and a function");
  std::lock_guard<std::mutex> lock(mu_);
  strategies_[name] = std::move(strategy);
  return Status::ok();
}

Result<ShardingStrategy> StrategyRegistry::get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = strategies_.find(name);
  if (it == strategies_.end()) {
    std::string known;
    for (const auto& [n, s] : strategies_) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("unknown sharding strategy '" + name + "' (registered: " + known + ")");
  }
  return it->second;
}

std::vector<std::string> StrategyRegistry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [n, s] : strategies_) out.push_back(n);
  return out;
}

std::vector<uint64_t> interleave_counts(const std::vector<uint64_t>& sizes, uint64_t positions) {
  const size_t n = sizes.size();
  std::vector<uint64_t> counts(n, 0);
  std::vector<uint32_t> by_size(n);
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](uint32_t a, uint32_t b) { return sizes[a] < sizes[b]; });
  uint64_t level = 0;  // every sequence still active has `level` items taken so far
  size_t first_active = 0;
  uint64_t left = positions;
  while (first_active < n) {
    uint64_t next_level = sizes[by_size[first_active]];
    uint64_t active = n - first_active;
    uint64_t block = (next_level - level) * active;
    if (left < block) {
      uint64_t rounds = left / active, extra = left % active;
      for (size_t i = 0; i < n; ++i) {
        if (sizes[i] <= level) continue;
        counts[i] = level + rounds;
        if (extra > 0) {  // the first `extra` active sequences, in list order
          ++counts[i];
          --extra;
        }
      }
      for (size_t i = 0; i < n; ++i)
        if (sizes[i] <= level) counts[i] = sizes[i];
      return counts;
    }
    left -= block;
    level = next_level;
    while (first_active < n && sizes[by_size[first_active]] <= level) ++first_active;
  }
  return sizes;  // positions >= total: everything taken
}

std::vector<uint64_t> sequential_counts(const std::vector<uint64_t>& sizes, uint64_t positions) {
  std::vector<uint64_t> counts(sizes.size(), 0);
  for (size_t i = 0; i < sizes.size() && positions > 0; ++i) {
    counts[i] = std::min(sizes[i], positions);
    positions -= counts[i];
  }
  return counts;
}

InterleaveCursor::InterleaveCursor(const std::vector<uint64_t>& sizes)
    : InterleaveCursor(sizes, {}) {}

InterleaveCursor::InterleaveCursor(const std::vector<uint64_t>& sizes,
                                   const std::vector<uint64_t>& consumed)
    : size_(sizes), next_(sizes.size(), 0) {
  for (uint32_t i = 0; i < sizes.size(); ++i) {
    next_[i] = i < consumed.size() ? std::min(consumed[i], sizes[i]) : 0;
    if (next_[i] < size_[i]) joining_.push_back(i);
  }
  std::stable_sort(joining_.begin(), joining_.end(),
                   [&](uint32_t a, uint32_t b) { return next_[a] < next_[b]; });
  if (!joining_.empty()) enter_level(next_[joining_[0]]);
}

// Starts round `level`: drops the sequences that ran out, lets in those whose first item
// left is `level` (keeping list order), and restarts at the front.
void InterleaveCursor::enter_level(uint64_t level) {
  level_ = level;
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [&](uint32_t i) { return next_[i] >= size_[i]; }),
                active_.end());
  if (active_.empty() && joined_ < joining_.size()) level_ = next_[joining_[joined_]];
  while (joined_ < joining_.size() && next_[joining_[joined_]] == level_) {
    const uint32_t i = joining_[joined_++];
    active_.insert(std::lower_bound(active_.begin(), active_.end(), i), i);
  }
  at_ = 0;
}

uint32_t InterleaveCursor::next() {
  const uint32_t seq = active_[at_++];
  ++next_[seq];
  if (at_ >= active_.size()) enter_level(level_ + 1);
  return seq;
}

std::vector<uint32_t> identity_permutation(uint32_t n) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

std::vector<uint32_t> seeded_permutation(uint32_t n, uint64_t key) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  ItemRng rng(key);
  for (uint32_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.uniform(i)]);
  return p;
}

bool EpochCursor::complete() const {
  for (size_t j = 0; j < take.size(); ++j)
    if (j >= consumed.size() || consumed[j] < take[j]) return false;
  return true;
}

uint64_t epoch_key(uint64_t seed, uint32_t epoch) {
  return hash_combine(seed, epoch, 0x5eed0fe90c4ULL);
}

uint64_t batch_begin(uint64_t items, uint64_t steps, uint32_t batch_size, uint64_t step) {
  const uint64_t n = items, b = batch_size, s = steps;
  if (step >= s) return n;
  if (n >= s * b) return step * b;
  if (n < s) return std::min(n, step * b);  // degenerate: fewer items than steps
  // Front-load full batches; spread the rest over the last batches so none is empty.
  uint64_t full = b > 1 ? std::min(s, (n - s) / (b - 1)) : s;
  if (step <= full) return step * b;
  uint64_t rest = n - full * b, tail = s - full;
  uint64_t q = rest / tail, extra = rest % tail, k = step - full;
  return full * b + k * q + std::min(k, extra);
}

namespace {

// Every rank the same number of steps: enough for the largest share, or with drop_last as
// many full batches as the smallest share holds (the others take fewer items).
void lay_out_fresh(bool drop_last, bool sequential, EpochPlan* plan) {
  const uint32_t b = plan->batch_size;
  uint64_t max_steps = 0, min_steps = UINT64_MAX;
  for (const auto& rp : plan->ranks) {
    max_steps = std::max(max_steps, (rp.items + b - 1) / b);
    min_steps = std::min(min_steps, rp.items / b);
  }
  plan->steps = drop_last ? min_steps : max_steps;
  for (auto& rp : plan->ranks) {
    if (drop_last) {
      rp.take = sequential ? sequential_counts(rp.take, plan->steps * b)
                           : interleave_counts(rp.take, plan->steps * b);
      rp.items = plan->steps * b;
    }
    rp.layout_items = rp.items;
  }
}

// A resumed epoch: continue the cursor's layout when R and the batch size are the same (the
// batches are then those of the uninterrupted run), else lay out what is left of every rank
// from the cursor's step. Nothing is dropped: drop_last applied when the epoch was planned.
Status lay_out_resumed(const EpochCursor& c, EpochPlan* plan) {
  const uint32_t b = plan->batch_size;
  const auto r_count = static_cast<uint32_t>(plan->ranks.size());
  plan->first_step = c.step;
  if (c.ranks == r_count && c.batch_size == b && c.layout_offset.size() == r_count &&
      c.layout_items.size() == r_count) {
    plan->steps = c.steps;
    plan->layout_step0 = c.layout_step0;
    for (uint32_t r = 0; r < r_count; ++r) {
      plan->ranks[r].layout_offset = c.layout_offset[r];
      plan->ranks[r].layout_items = c.layout_items[r];
    }
    for (uint32_t r = 0; r < r_count; ++r)
      if (c.step < c.layout_step0 || c.step > c.steps ||
          plan->batch_begin(r, c.step) != plan->ranks[r].start ||
          plan->batch_begin(r, c.steps) != plan->ranks[r].items)
        return corrupt("checkpoint cursor of epoch " + std::to_string(c.epoch) +
                       " does not fit its batch layout at rank " + std::to_string(r));
    return Status::ok();
  }
  uint64_t steps_left = 0;
  for (auto& rp : plan->ranks) {
    rp.layout_offset = rp.start;
    rp.layout_items = rp.items - rp.start;
    steps_left = std::max(steps_left, (rp.layout_items + b - 1) / b);
  }
  plan->layout_step0 = c.step;
  plan->steps = c.step + steps_left;
  return Status::ok();
}

}  // namespace

Result<EpochPlan> plan_epoch(const Manifest& manifest, const ItemIndex& index,
                             const LogicalShards& shards, const PlanSpec& spec,
                             const Topology& topology, uint32_t batch_size, uint32_t epoch,
                             const EpochCursor* resume) {
  const uint32_t l = shards.count(), r_count = topology.ranks, w_count = topology.workers;
  if (resume) {
    if (resume->epoch != epoch || resume->take.size() != l || resume->consumed.size() != l)
      return invalid_argument("a cursor of epoch " + std::to_string(resume->epoch) + " with " +
                              std::to_string(resume->take.size()) +
                              " logical shards cannot resume epoch " + std::to_string(epoch) +
                              " of " + std::to_string(l));
    for (uint32_t j = 0; j < l; ++j)
      if (resume->consumed[j] > resume->take[j] || resume->take[j] > shards.size(j))
        return corrupt("checkpoint cursor of logical shard " + std::to_string(j) +
                       " is out of range (" + std::to_string(resume->consumed[j]) + " of " +
                       std::to_string(resume->take[j]) + ", shard has " +
                       std::to_string(shards.size(j)) + " items)");
  }
  if (r_count == 0 || w_count == 0 || batch_size == 0)
    return invalid_argument("ranks, workers and batch size must be at least 1");
  if (l < r_count)
    return invalid_argument(std::to_string(l) + " logical shards cannot feed " +
                            std::to_string(r_count) +
                            " ranks; set more logical shards or use fewer ranks");
  SY_ASSIGN_OR_RETURN(auto dist, StrategyRegistry::global().get(spec.distributed_strategy));
  SY_ASSIGN_OR_RETURN(auto work, StrategyRegistry::global().get(spec.worker_strategy));

  EpochPlan plan;
  plan.epoch = epoch;
  plan.batch_size = batch_size;
  plan.epoch_key = epoch_key(spec.seed, epoch);
  plan.shard_order = spec.shuffle ? seeded_permutation(l, hash_combine(plan.epoch_key, 1))
                                  : identity_permutation(l);

  std::vector<ShardInfo> infos(l);
  for (uint32_t i = 0; i < l; ++i) {
    uint32_t j = plan.shard_order[i];
    infos[i].shard = j;
    infos[i].items = shards.size(j);
    if (infos[i].items > 0) {
      auto loc = index.locate(shards.begin(j));
      infos[i].first_source = manifest.sources[loc.source].uri;
      infos[i].first_key = manifest.item_key(loc.source, loc.sample);
    }
  }
  auto check = [](const std::vector<uint32_t>& a, size_t n, uint32_t parts,
                  const std::string& name) -> Status {
    if (a.size() != n)
      return invalid_argument("sharding strategy '" + name + "' returned " +
                              std::to_string(a.size()) + " parts for " + std::to_string(n) +
                              " shards");
    for (auto p : a)
      if (p >= parts)
        return invalid_argument("sharding strategy '" + name + "' returned part " +
                                std::to_string(p) + " of " + std::to_string(parts));
    return Status::ok();
  };
  auto rank_of = dist(infos, r_count);
  SY_RETURN_IF_ERROR(check(rank_of, l, r_count, spec.distributed_strategy));

  plan.ranks.resize(r_count);
  std::vector<std::vector<ShardInfo>> rank_infos(r_count);
  for (uint32_t i = 0; i < l; ++i) {
    plan.ranks[rank_of[i]].shards.push_back(infos[i].shard);
    rank_infos[rank_of[i]].push_back(infos[i]);
  }
  for (uint32_t r = 0; r < r_count; ++r) {
    auto& rp = plan.ranks[r];
    if (rp.shards.empty())
      return invalid_argument("sharding strategy '" + spec.distributed_strategy + "' gives rank " +
                              std::to_string(r) + " no logical shard");
    rp.worker_of = work(rank_infos[r], w_count);
    SY_RETURN_IF_ERROR(check(rp.worker_of, rp.shards.size(), w_count, spec.worker_strategy));
    for (auto j : rp.shards) {
      rp.take.push_back(resume ? resume->take[j] : shards.size(j));
      rp.consumed.push_back(resume ? resume->consumed[j] : 0);
      rp.items += rp.take.back();
      rp.start += rp.consumed.back();
    }
    if (rp.items == 0 && !resume)
      return invalid_argument("rank " + std::to_string(r) +
                              " gets no item: " + std::to_string(index.num_items()) + " items, " +
                              std::to_string(l) + " logical shards, " + std::to_string(r_count) +
                              " ranks; every rank needs at least one");
  }
  if (resume) {
    SY_RETURN_IF_ERROR(lay_out_resumed(*resume, &plan));
  } else {
    lay_out_fresh(spec.drop_last, spec.sequential, &plan);
  }
  return plan;
}

ShardSequence::ShardSequence(const LogicalShards& shards, uint32_t shard, uint32_t chunk_items,
                             bool shuffle, bool permute_chunks, uint64_t key)
    : begin_(shards.begin(shard)),
      end_(shards.end(shard)),
      chunk_items_(std::max(1u, chunk_items)),
      shuffle_(shuffle),
      key_(hash_combine(key, shard, 2)) {
  auto n = static_cast<uint32_t>((end_ - begin_ + chunk_items_ - 1) / chunk_items_);
  order_ = (shuffle && permute_chunks) ? seeded_permutation(n, hash_combine(key_, 3))
                                       : identity_permutation(n);
}

uint64_t ShardSequence::chunk_begin(size_t i) const {
  return begin_ + static_cast<uint64_t>(order_[i]) * chunk_items_;
}

uint64_t ShardSequence::chunk_end(size_t i) const {
  return std::min(end_, chunk_begin(i) + chunk_items_);
}

ShardSequence::Seek ShardSequence::seek(uint64_t position) const {
  Seek s;
  for (; s.chunk < order_.size(); ++s.chunk) {
    uint64_t n = chunk_end(s.chunk) - chunk_begin(s.chunk);
    if (position < n) {
      s.offset = position;
      return s;
    }
    position -= n;
  }
  return s;
}

std::vector<uint32_t> ShardSequence::chunk_permutation(size_t i) const {
  auto n = static_cast<uint32_t>(chunk_end(i) - chunk_begin(i));
  return shuffle_ ? seeded_permutation(n, hash_combine(key_, 4, order_[i]))
                  : identity_permutation(n);
}

}  // namespace shardyard
