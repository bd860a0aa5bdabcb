// Property tests of resuming an interrupted epoch (runtime/shard.h): a cut at any step of an
// epoch, resumed at any topology (ranks, workers, batch size), delivers every item of the
// epoch exactly once; a resume at the same ranks and batch size continues the very same
// batches; with equal logical shards and the same global batch the global batches are the
// same sets at every world size; and a resumed epoch can be cut and resumed again.
//
// The tests simulate what the loader does: a rank's order is the interleave of its shards'
// sequences (InterleaveCursor over RankPlan::take, started at RankPlan::consumed), cut into
// batches by EpochPlan::batch_begin, and a cut at step S records, per logical shard, how many
// of its items the trainers consumed. Parameters are drawn from a fixed-seed RNG.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/shard.h"
#include "test_manifest.h"

namespace shardyard {
namespace {

using testing::make_manifest;

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [lo, hi].
  uint64_t in(uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(gen_);
  }
  uint32_t in32(uint64_t lo, uint64_t hi) { return static_cast<uint32_t>(in(lo, hi)); }
  bool coin() { return in(0, 1) == 1; }
  uint64_t raw() { return gen_(); }

 private:
  std::mt19937_64 gen_;
};

// A dataset, its logical shards and the plan spec of one job, and the epoch order of every
// logical shard's items in the epoch under test.
struct Job {
  Manifest manifest;
  ItemIndex index;
  LogicalShards shards;
  PlanSpec spec;
  uint32_t chunk_items = 1;
  uint32_t epoch = 0;
  std::vector<std::vector<uint64_t>> shard_items;  // by logical shard, in epoch order

  uint32_t l() const { return shards.count(); }
  uint64_t n() const { return shards.num_items(); }
  std::string str() const {
    std::ostringstream o;
    o << "N=" << n() << " L=" << l() << " sources=" << manifest.sources.size()
      << " chunk=" << spec.chunk_items << " shuffle=" << spec.shuffle
      << " drop_last=" << spec.drop_last << " seed=" << spec.seed << " epoch=" << epoch
      << " dist=" << spec.distributed_strategy << " work=" << spec.worker_strategy;
    return o.str();
  }
};

// N items cut into 1 to 4 sources (some possibly empty) of a seekable (tar) manifest.
Job make_job(uint64_t n, uint32_t l, Rng& rng) {
  std::vector<uint64_t> cuts = {0, n};
  for (uint64_t i = rng.in(0, 3); i > 0; --i) cuts.push_back(rng.in(0, n));
  std::sort(cuts.begin(), cuts.end());
  std::vector<uint64_t> sizes;
  for (size_t i = 1; i < cuts.size(); ++i) sizes.push_back(cuts[i] - cuts[i - 1]);
  Job job;
  job.manifest = make_manifest(sizes);
  job.index = ItemIndex(job.manifest);
  job.shards = LogicalShards(n, l);
  job.spec.logical_shards = l;
  job.spec.chunk_items = rng.in(0, 5) == 0 ? 0 : rng.in32(1, 9);
  job.spec.seed = rng.raw();
  job.spec.shuffle = rng.coin();
  job.spec.drop_last = rng.coin();
  job.epoch = rng.in32(0, 3);
  job.chunk_items =
      job.spec.chunk_items ? job.spec.chunk_items : default_chunk_items(job.manifest, l);
  const uint64_t key = epoch_key(job.spec.seed, job.epoch);
  for (uint32_t j = 0; j < l; ++j) {
    ShardSequence seq(job.shards, j, job.chunk_items, job.spec.shuffle,
                      /*permute_chunks=*/true, key);
    std::vector<uint64_t> items;
    for (size_t c = 0; c < seq.num_chunks(); ++c)
      for (uint32_t p : seq.chunk_permutation(c)) items.push_back(seq.chunk_begin(c) + p);
    job.shard_items.push_back(std::move(items));
  }
  return job;
}

// A random job: L in 1..40, N in L..400 (half of the time a multiple of L).
Job random_job(Rng& rng) {
  const uint32_t l = rng.in32(1, 40);
  const uint64_t n = rng.coin() ? l * rng.in(1, 400 / l) : rng.in(l, 400);
  Job job = make_job(n, l, rng);
  if (rng.in(0, 4) == 0) job.spec.distributed_strategy = "contiguous";
  if (rng.coin()) job.spec.worker_strategy = "contiguous";
  return job;
}

struct Shape {
  uint32_t ranks = 1, workers = 1, batch_size = 1;
  std::string str() const {
    return "R=" + std::to_string(ranks) + " W=" + std::to_string(workers) +
           " B=" + std::to_string(batch_size);
  }
};

Shape random_shape(const Job& job, Rng& rng) {
  return Shape{rng.in32(1, std::min<uint32_t>(job.l(), 6)), rng.in32(1, 4), rng.in32(1, 20)};
}

// What a plan delivers: batches[r][s] holds rank r's batch at step s (empty before
// first_step), in delivery order.
struct Delivery {
  uint64_t first_step = 0, steps = 0;
  std::vector<std::vector<std::vector<uint64_t>>> batches;

  // Items of steps [from, to) of every rank, appended to `out`.
  void collect(uint64_t from, uint64_t to, std::vector<uint64_t>* out) const {
    for (const auto& rank : batches)
      for (uint64_t s = std::max(from, first_step); s < std::min(to, steps); ++s)
        out->insert(out->end(), rank[s].begin(), rank[s].end());
  }
  // The global batch of step s: the sorted union over ranks.
  std::vector<uint64_t> global_batch(uint64_t s) const {
    std::vector<uint64_t> out;
    collect(s, s + 1, &out);
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Walks every rank of `plan` as the loader does and cuts its order into batches.
void deliver(const Job& job, const EpochPlan& plan, const std::string& ctx, Delivery* out) {
  ASSERT_EQ(plan.epoch_key, epoch_key(job.spec.seed, job.epoch)) << ctx;
  out->first_step = plan.first_step;
  out->steps = plan.steps;
  out->batches.assign(plan.ranks.size(), std::vector<std::vector<uint64_t>>(plan.steps));
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rp = plan.ranks[r];
    ASSERT_EQ(rp.take.size(), rp.shards.size()) << ctx;
    ASSERT_EQ(rp.consumed.size(), rp.shards.size()) << ctx;
    ASSERT_EQ(rp.worker_of.size(), rp.shards.size()) << ctx;
    InterleaveCursor cursor(rp.take, rp.consumed);
    std::vector<uint64_t> picks(rp.shards.size(), 0);
    std::vector<uint64_t> order;  // rank-order positions rp.start, rp.start + 1, ...
    while (!cursor.done()) {
      const uint32_t k = cursor.next();
      ASSERT_LT(k, rp.shards.size()) << ctx;
      const uint64_t pos = rp.consumed[k] + picks[k]++;
      ASSERT_LT(pos, rp.take[k]) << ctx << " rank " << r << " shard " << rp.shards[k];
      order.push_back(job.shard_items[rp.shards[k]].at(pos));
    }
    ASSERT_EQ(rp.start + order.size(), rp.items) << ctx << " rank " << r;
    // The batches cover exactly what the rank delivers: from rp.start to rp.items.
    ASSERT_EQ(plan.batch_begin(r, plan.first_step), rp.start) << ctx << " rank " << r;
    ASSERT_EQ(plan.batch_begin(r, plan.steps), rp.items) << ctx << " rank " << r;
    for (uint64_t s = plan.first_step; s < plan.steps; ++s) {
      const uint64_t b0 = plan.batch_begin(r, s), b1 = plan.batch_begin(r, s + 1);
      ASSERT_LE(b0, b1) << ctx << " rank " << r << " step " << s;
      ASSERT_LE(b1 - b0, plan.batch_size) << ctx << " rank " << r << " step " << s;
      out->batches[r][s].assign(order.begin() + static_cast<std::ptrdiff_t>(b0 - rp.start),
                                order.begin() + static_cast<std::ptrdiff_t>(b1 - rp.start));
    }
  }
}

// The per-shard counts of the first `picks` positions of a rank's remaining order.
std::vector<uint64_t> consumed_after(const RankPlan& rp, uint64_t picks) {
  std::vector<uint64_t> consumed = rp.consumed;
  InterleaveCursor cursor(rp.take, rp.consumed);
  for (uint64_t i = 0; i < picks && !cursor.done(); ++i) ++consumed[cursor.next()];
  return consumed;
}

// The cursor of a cut of `plan` at `step`, built as the loader builds a checkpoint.
EpochCursor cut(const Job& job, const EpochPlan& plan, uint64_t step) {
  EpochCursor c;
  c.epoch = plan.epoch;
  c.step = step;
  c.take.assign(job.l(), 0);
  c.consumed.assign(job.l(), 0);
  c.ranks = static_cast<uint32_t>(plan.ranks.size());
  c.batch_size = plan.batch_size;
  c.steps = plan.steps;
  c.layout_step0 = plan.layout_step0;
  for (uint32_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rp = plan.ranks[r];
    const auto consumed = consumed_after(rp, plan.batch_begin(r, step) - rp.start);
    for (size_t k = 0; k < rp.shards.size(); ++k) {
      c.take[rp.shards[k]] = rp.take[k];
      c.consumed[rp.shards[k]] = consumed[k];
    }
    c.layout_offset.push_back(rp.layout_offset);
    c.layout_items.push_back(rp.layout_items);
  }
  return c;
}

Result<EpochPlan> plan(const Job& job, const Shape& shape, const EpochCursor* resume = nullptr) {
  return plan_epoch(job.manifest, job.index, job.shards, job.spec,
                    Topology{shape.ranks, shape.workers}, shape.batch_size, job.epoch, resume);
}

// Every item the epoch delivers (the takes of a fresh plan), sorted.
std::vector<uint64_t> epoch_items(const Job& job, const EpochPlan& fresh) {
  std::vector<uint64_t> out;
  for (const auto& rp : fresh.ranks)
    for (size_t k = 0; k < rp.shards.size(); ++k) {
      const auto& seq = job.shard_items[rp.shards[k]];
      out.insert(out.end(), seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(rp.take[k]));
    }
  std::sort(out.begin(), out.end());
  return out;
}

// A fresh plan of a random job and what it delivers.
struct Fresh {
  Job job;
  Shape shape;
  EpochPlan plan;
  Delivery delivery;
  std::vector<uint64_t> items;  // every item of the epoch, sorted
  std::string str() const { return job.str() + " " + shape.str(); }
};

void make_fresh(Job job, const Shape& shape, Fresh* out) {
  out->job = std::move(job);
  out->shape = shape;
  auto p = plan(out->job, shape);
  ASSERT_TRUE(p.is_ok()) << out->str() << ": " << p.status().to_string();
  out->plan = std::move(p).value();
  ASSERT_EQ(out->plan.first_step, 0u) << out->str();
  ASSERT_EQ(out->plan.layout_step0, 0u) << out->str();
  deliver(out->job, out->plan, out->str(), &out->delivery);
  if (::testing::Test::HasFatalFailure()) return;
  out->items = epoch_items(out->job, out->plan);
  std::vector<uint64_t> all;
  out->delivery.collect(0, out->plan.steps, &all);
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all, out->items) << out->str() << ": the fresh plan delivers its takes";
}

// Resumes `from` (a plan with delivery `before`) cut at `step` on `shape`.
void resume(const Job& job, const EpochPlan& from, uint64_t step, const Shape& shape,
            const std::string& ctx, EpochPlan* plan_out, Delivery* out) {
  const EpochCursor cursor = cut(job, from, step);
  ASSERT_FALSE(cursor.complete()) << ctx;
  auto p = plan(job, shape, &cursor);
  ASSERT_TRUE(p.is_ok()) << ctx << ": " << p.status().to_string();
  *plan_out = std::move(p).value();
  ASSERT_EQ(plan_out->first_step, step) << ctx << ": step numbers continue at the cut";
  ASSERT_EQ(plan_out->ranks.size(), shape.ranks) << ctx;
  for (const auto& rp : plan_out->ranks)
    for (uint32_t w : rp.worker_of) ASSERT_LT(w, shape.workers) << ctx;
  deliver(job, *plan_out, ctx, out);
}

void expect_exactly_once(std::vector<uint64_t> delivered, const std::vector<uint64_t>& items,
                         const std::string& ctx) {
  std::sort(delivered.begin(), delivered.end());
  auto dup = std::adjacent_find(delivered.begin(), delivered.end());
  ASSERT_TRUE(dup == delivered.end()) << ctx << ": item " << *dup << " is delivered twice";
  ASSERT_EQ(delivered, items) << ctx << ": items missing or foreign";
}

void expect_same_batches(const Delivery& a, const Delivery& b, uint64_t from,
                         const std::string& ctx) {
  ASSERT_EQ(a.steps, b.steps) << ctx;
  ASSERT_EQ(a.batches.size(), b.batches.size()) << ctx;
  for (size_t r = 0; r < a.batches.size(); ++r)
    for (uint64_t s = from; s < a.steps; ++s)
      ASSERT_EQ(a.batches[r][s], b.batches[r][s]) << ctx << " rank " << r << " step " << s;
}

// Cut steps worth trying in a plan of steps [first, steps): the ends and a random one.
// A random job at a random shape, planned afresh into `out`; returns the shape.
Shape make_random_fresh(Rng& rng, Fresh* out) {
  Job job = random_job(rng);
  const Shape shape = random_shape(job, rng);
  make_fresh(std::move(job), shape, out);
  return shape;
}

std::vector<uint64_t> cut_steps(uint64_t first, uint64_t steps, Rng& rng) {
  if (steps <= first) return {};
  std::vector<uint64_t> out = {first, steps - 1, rng.in(first, steps - 1)};
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

constexpr int kJobs = 1500;

TEST(InterleaveCursorResume, ContinuesTheInterleaveFromEveryPosition) {
  Rng rng(20240611);
  size_t checked = 0;
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint64_t> sizes(rng.in(1, 10));
    for (auto& s : sizes) s = rng.in(0, 4) == 0 ? 0 : rng.in(1, 15);
    std::vector<uint32_t> full;
    for (InterleaveCursor c(sizes); !c.done();) full.push_back(c.next());
    for (size_t p = 0; p <= full.size(); ++p) {
      InterleaveCursor c(sizes, interleave_counts(sizes, p));
      std::vector<uint32_t> tail;
      while (!c.done() && tail.size() <= full.size()) tail.push_back(c.next());
      ASSERT_EQ(tail,
                std::vector<uint32_t>(full.begin() + static_cast<std::ptrdiff_t>(p), full.end()))
          << "trial " << trial << " position " << p;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10000u);
}

TEST(ResumeProperty, ResumesAtAnyTopologyWithoutRepeatsOrLosses) {
  Rng rng(1);
  size_t checked = 0;
  for (int i = 0; i < kJobs; ++i) {
    Fresh f;
    make_random_fresh(rng, &f);
    if (HasFatalFailure()) return;
    for (uint64_t s : cut_steps(0, f.plan.steps, rng)) {
      for (int t = 0; t < 3; ++t) {
        const Shape next = random_shape(f.job, rng);
        const std::string ctx = f.str() + " cut at " + std::to_string(s) + " of " +
                                std::to_string(f.plan.steps) + ", resumed at " + next.str();
        EpochPlan resumed;
        Delivery d;
        resume(f.job, f.plan, s, next, ctx, &resumed, &d);
        if (HasFatalFailure()) return;
        std::vector<uint64_t> delivered;
        f.delivery.collect(0, s, &delivered);
        d.collect(s, d.steps, &delivered);
        expect_exactly_once(delivered, f.items, ctx);
        if (HasFatalFailure()) return;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 3000u);
}

TEST(ResumeProperty, ResumesAtSameRanksAndBatchSizeWithTheSameBatches) {
  Rng rng(2);
  size_t checked = 0;
  for (int i = 0; i < kJobs; ++i) {
    Fresh f;
    const Shape shape = make_random_fresh(rng, &f);
    if (HasFatalFailure()) return;
    for (uint64_t s : cut_steps(0, f.plan.steps, rng)) {
      for (uint32_t w : {1u, 2u, 5u}) {
        const Shape next{shape.ranks, w, shape.batch_size};
        const std::string ctx = f.str() + " cut at " + std::to_string(s) + " of " +
                                std::to_string(f.plan.steps) + ", resumed at " + next.str();
        EpochPlan resumed;
        Delivery d;
        resume(f.job, f.plan, s, next, ctx, &resumed, &d);
        if (HasFatalFailure()) return;
        expect_same_batches(f.delivery, d, s, ctx);
        if (HasFatalFailure()) return;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 3000u);
}

TEST(ResumeProperty, CursorsOfAFreshPlanAreInterleaveCounts) {
  Rng rng(3);
  for (int i = 0; i < kJobs; ++i) {
    Fresh f;
    const Shape shape = make_random_fresh(rng, &f);
    if (HasFatalFailure()) return;
    for (uint64_t s = 0; s <= f.plan.steps; ++s) {
      const EpochCursor c = cut(f.job, f.plan, s);
      for (uint32_t r = 0; r < shape.ranks; ++r) {
        const RankPlan& rp = f.plan.ranks[r];
        const auto counts = interleave_counts(rp.take, f.plan.batch_begin(r, s));
        for (size_t k = 0; k < rp.shards.size(); ++k)
          ASSERT_EQ(c.consumed[rp.shards[k]], counts[k]) << f.str() << " step " << s;
      }
      ASSERT_EQ(c.complete(), s == f.plan.steps) << f.str() << " step " << s;
    }
  }
}

TEST(ResumeProperty, CursorAtTheEndOfTheEpochIsComplete) {
  Rng rng(4);
  size_t resumed_ends = 0;
  for (int i = 0; i < kJobs; ++i) {
    Fresh f;
    make_random_fresh(rng, &f);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(cut(f.job, f.plan, f.plan.steps).complete()) << f.str();
    if (f.plan.steps == 0) continue;
    // A resumed plan's end is complete too, and no earlier step of it is.
    const uint64_t s = rng.in(0, f.plan.steps - 1);
    const Shape next = random_shape(f.job, rng);
    const std::string ctx = f.str() + " cut at " + std::to_string(s) + ", resumed at " + next.str();
    EpochPlan resumed;
    Delivery d;
    resume(f.job, f.plan, s, next, ctx, &resumed, &d);
    if (HasFatalFailure()) return;
    for (uint64_t s2 = s; s2 <= resumed.steps; ++s2)
      ASSERT_EQ(cut(f.job, resumed, s2).complete(), s2 == resumed.steps) << ctx << " at " << s2;
    ++resumed_ends;
  }
  EXPECT_GT(resumed_ends, 300u);
}

TEST(ResumeProperty, ResumesAtOtherWorldSizeWithTheSameGlobalBatches) {
  // Equal logical shards (L | N), strided assignment, R | L, R' | L and R x B = R' x B': the
  // global batch of every step after the cut is the set it would have been without the cut.
  Rng rng(5);
  size_t checked = 0;
  for (int i = 0; i < kJobs; ++i) {
    const uint32_t l = rng.in32(1, 40);
    std::vector<uint32_t> divisors;  // ranks that divide L
    for (uint32_t r = 1; r <= std::min<uint32_t>(l, 6); ++r)
      if (l % r == 0) divisors.push_back(r);
    Job job = make_job(l * rng.in(1, 400 / l), l, rng);
    const uint32_t r = divisors[rng.in(0, divisors.size() - 1)];
    const uint32_t r2 = divisors[rng.in(0, divisors.size() - 1)];
    // A global batch both world sizes divide, with per-rank batches of at most 20.
    const uint32_t step = std::lcm(r, r2), most = 20 * std::min(r, r2);
    if (step > most) continue;
    const uint32_t global = step * rng.in32(1, most / step);
    Fresh f;
    make_fresh(std::move(job), Shape{r, rng.in32(1, 4), global / r}, &f);
    if (HasFatalFailure()) return;
    for (uint64_t s : cut_steps(0, f.plan.steps, rng)) {
      const Shape next{r2, rng.in32(1, 4), global / r2};
      const std::string ctx = f.str() + " cut at " + std::to_string(s) + " of " +
                              std::to_string(f.plan.steps) + ", resumed at " + next.str();
      EpochPlan resumed;
      Delivery d;
      resume(f.job, f.plan, s, next, ctx, &resumed, &d);
      if (HasFatalFailure()) return;
      ASSERT_EQ(d.steps, f.delivery.steps) << ctx;
      for (uint64_t t = s; t < d.steps; ++t)
        ASSERT_EQ(d.global_batch(t), f.delivery.global_batch(t)) << ctx << " step " << t;
      if (r != r2) ++checked;
    }
  }
  EXPECT_GT(checked, 1000u);
}

TEST(ResumeProperty, ResumesTwiceWithoutRepeatsOrLosses) {
  Rng rng(6);
  size_t checked = 0, same_layout = 0;
  for (int i = 0; i < kJobs; ++i) {
    Fresh f;
    const Shape shape = make_random_fresh(rng, &f);
    if (HasFatalFailure()) return;
    for (uint64_t s : cut_steps(0, f.plan.steps, rng)) {
      const Shape mid = rng.in(0, 3) == 0 ? shape : random_shape(f.job, rng);
      const std::string ctx1 = f.str() + " cut at " + std::to_string(s) + " of " +
                               std::to_string(f.plan.steps) + ", resumed at " + mid.str();
      EpochPlan p1;
      Delivery d1;
      resume(f.job, f.plan, s, mid, ctx1, &p1, &d1);
      if (HasFatalFailure()) return;
      EXPECT_TRUE(cut(f.job, p1, p1.steps).complete()) << ctx1;
      for (uint64_t s2 : cut_steps(s, p1.steps, rng)) {
        for (int t = 0; t < 2; ++t) {
          const Shape last =
              t == 0 ? Shape{mid.ranks, rng.in32(1, 4), mid.batch_size} : random_shape(f.job, rng);
          const std::string ctx = ctx1 + ", cut again at " + std::to_string(s2) + " of " +
                                  std::to_string(p1.steps) + ", resumed at " + last.str();
          EpochPlan p2;
          Delivery d2;
          resume(f.job, p1, s2, last, ctx, &p2, &d2);
          if (HasFatalFailure()) return;
          std::vector<uint64_t> delivered;
          f.delivery.collect(0, s, &delivered);
          d1.collect(s, s2, &delivered);
          d2.collect(s2, d2.steps, &delivered);
          expect_exactly_once(delivered, f.items, ctx);
          if (HasFatalFailure()) return;
          if (last.ranks == mid.ranks && last.batch_size == mid.batch_size) {
            expect_same_batches(d1, d2, s2, ctx);
            if (HasFatalFailure()) return;
            ++same_layout;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 3000u);
  EXPECT_GT(same_layout, 1500u);
}

// ---- plan_epoch's checks of a cursor ----------------------------------------------------

struct Small {
  Job job;
  EpochPlan plan;
  EpochCursor cursor;  // the fresh plan cut at step 2
};

Small small_job() {
  Rng rng(7);
  Small s{make_job(60, 6, rng), {}, {}};
  s.job.spec.drop_last = false;
  auto p = plan(s.job, Shape{2, 2, 4});
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  if (p.is_ok()) s.plan = *p;
  s.cursor = cut(s.job, s.plan, 2);
  return s;
}

TEST(PlanEpochResume, AcceptsTheCursorOfACut) {
  Small s = small_job();
  auto p = plan(s.job, Shape{2, 2, 4}, &s.cursor);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->first_step, 2u);
  EXPECT_EQ(p->steps, s.plan.steps);
}

TEST(PlanEpochResume, RefusesCursorOfAnotherEpoch) {
  Small s = small_job();
  s.cursor.epoch = s.job.epoch + 1;
  auto p = plan(s.job, Shape{2, 2, 4}, &s.cursor);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("epoch"), std::string::npos) << p.status().message();
}

TEST(PlanEpochResume, RefusesCursorOfAnotherNumberOfLogicalShards) {
  Small s = small_job();
  s.cursor.take.push_back(0);
  s.cursor.consumed.push_back(0);
  auto p = plan(s.job, Shape{2, 2, 4}, &s.cursor);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanEpochResume, RefusesConsumedPastTake) {
  for (uint32_t j = 0; j < 6; ++j) {
    Small s = small_job();
    s.cursor.consumed[j] = s.cursor.take[j] + 1;
    auto p = plan(s.job, Shape{3, 1, 2}, &s.cursor);
    ASSERT_FALSE(p.is_ok()) << "shard " << j;
    EXPECT_EQ(p.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(p.status().message().find("logical shard " + std::to_string(j)), std::string::npos)
        << p.status().message();
  }
}

TEST(PlanEpochResume, RefusesTakePastTheShardSize) {
  Small s = small_job();
  s.cursor.take[3] = s.job.shards.size(3) + 1;
  auto p = plan(s.job, Shape{2, 2, 4}, &s.cursor);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorrupt);
}

TEST(PlanEpochResume, RefusesCursorThatDoesNotFitItsLayout) {
  // Same R and batch size: the layout is continued, so the consumed counts must end exactly
  // at the cursor's step.
  Small s = small_job();
  s.cursor.step = 3;
  auto p = plan(s.job, Shape{2, 2, 4}, &s.cursor);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(p.status().message().find("layout"), std::string::npos) << p.status().message();
}

// ---- ShardSequence::seek -----------------------------------------------------------------

TEST(ShardSequenceSeek, FindsTheChunkAndOffsetOfEveryPosition) {
  Rng rng(8);
  size_t checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const uint32_t l = rng.in32(1, 10);
    const uint64_t n = rng.in(0, 200);
    LogicalShards shards(n, l);
    const uint32_t chunk = rng.in32(0, 12);
    const bool shuffle = rng.coin(), permute = rng.coin();
    const uint64_t key = rng.raw();
    for (uint32_t j = 0; j < l; ++j) {
      ShardSequence seq(shards, j, chunk, shuffle, permute, key);
      uint64_t p = 0;
      for (size_t c = 0; c < seq.num_chunks(); ++c) {
        for (uint64_t o = 0; o < seq.chunk_end(c) - seq.chunk_begin(c); ++o, ++p) {
          const auto at = seq.seek(p);
          ASSERT_EQ(at.chunk, c) << "position " << p << " trial " << trial;
          ASSERT_EQ(at.offset, o) << "position " << p << " trial " << trial;
          ++checked;
        }
      }
      ASSERT_EQ(p, shards.size(j));
      const auto end = seq.seek(shards.size(j));
      EXPECT_EQ(end.chunk, seq.num_chunks());
      EXPECT_EQ(end.offset, 0u);
    }
  }
  EXPECT_GT(checked, 20000u);
}

}  // namespace
}  // namespace shardyard
