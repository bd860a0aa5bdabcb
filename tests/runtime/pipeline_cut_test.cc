// Tests of runtime/pipeline_cut.h: where every node of a pipeline graph runs (cut_pipeline),
// the graphs of Spec chains per dispatch mode (cut_spec, resolve_dispatch), and, from
// runtime/shard.h and runtime/pipeline.h, the two pieces broadcast dispatch and stateful
// once/post stages rest on: sequential_counts and the "count" stage's saved state.
#include "runtime/pipeline_cut.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/shard.h"

namespace shardyard {
namespace {

constexpr Placement D = Placement::kDispatcher;
constexpr Placement W = Placement::kWorker;
constexpr Placement L = Placement::kLoader;

PipelineNode node(std::string name, std::vector<uint32_t> inputs, bool replicable = true,
                  bool split = false) {
  return PipelineNode{std::move(name), std::move(inputs), replicable, split};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- cut_pipeline ------------------------------------------------------------------------

TEST(CutPipeline, ChainWithoutNonReplicableNodesRunsInWorkersThenLoader) {
  PipelineGraph g;
  g.nodes = {node("read", {}, true, true), node("decode", {0}), node("crop", {1}),
             node("stats", {2})};
  g.merge = 2;
  auto cut = cut_pipeline(g);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->where, (std::vector<Placement>{W, W, W, L}));
  EXPECT_EQ(cut->routed, -1);
}

TEST(CutPipeline, ChainCutsAfterItsLastNonReplicableNode) {
  PipelineGraph g;
  g.nodes = {node("read", {}, false), node("dedupe", {0}, false), node("decode", {1}),
             node("crop", {2}), node("post", {3}, false)};
  g.merge = 3;
  auto cut = cut_pipeline(g);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->where, (std::vector<Placement>{D, D, W, W, L}));
  EXPECT_EQ(cut->routed, 1);
}

TEST(CutPipeline, NonReplicableMergeNodeLeavesWorkersNothing) {
  PipelineGraph g;
  g.nodes = {node("read", {}), node("decode", {0}), node("dedupe", {1}, false)};
  g.merge = 2;
  auto cut = cut_pipeline(g);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->where, (std::vector<Placement>{D, D, D}));
  EXPECT_EQ(cut->routed, 2);
}

// Two non-replicable sources (a label table and an image stream) zipped, then replicable
// maps up to the merge, then a post node: the zip is the lowest common ancestor, so both
// sources and the zip run in the dispatcher and the zip's output is routed.
TEST(CutPipeline, TwoNonReplicableSourcesJoinAtTheZip) {
  PipelineGraph g;
  g.nodes = {node("labels", {}, false),  // 0
             node("images", {}, false),  // 1
             node("zip", {0, 1}),        // 2
             node("decode", {2}),        // 3
             node("augment", {3}),       // 4: merge
             node("stats", {4}, false)};
  g.merge = 4;
  auto cut = cut_pipeline(g);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  ASSERT_EQ(cut->where.size(), 6u);
  EXPECT_EQ(cut->where[0], D) << "labels";
  EXPECT_EQ(cut->where[1], D) << "images";
  EXPECT_EQ(cut->where[2], D) << "zip";
  EXPECT_EQ(cut->where[3], W) << "decode";
  EXPECT_EQ(cut->where[4], W) << "augment";
  EXPECT_EQ(cut->where[5], L) << "stats (after the merge)";
  EXPECT_EQ(cut->routed, 2);
  EXPECT_STREQ(placement_name(cut->where[0]), "dispatcher");
  EXPECT_STREQ(placement_name(cut->where[3]), "worker");
  EXPECT_STREQ(placement_name(cut->where[5]), "loader");
}

TEST(CutPipeline, ASingleNonReplicableNodeIsRoutedItselfAndLaterJoinsStayInWorkers) {
  // One non-replicable node is its own lowest common ancestor: its output is routed, and a
  // replicable branch that joins it further down runs in every worker.
  PipelineGraph g;
  g.nodes = {node("a", {}, false), node("b", {}), node("b_map", {1}), node("zip", {0, 2}),
             node("map", {3})};
  g.merge = 4;
  auto cut = cut_pipeline(g);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->where, (std::vector<Placement>{D, W, W, W, W}));
  EXPECT_EQ(cut->routed, 0);
}

TEST(CutPipeline, NonReplicableNodeAfterASplitIsAnErrorNamingBoth) {
  PipelineGraph g;
  g.nodes = {node("shards", {}, true, true), node("decode", {0}), node("dedupe", {1}, false),
             node("crop", {2})};
  g.merge = 3;
  auto cut = cut_pipeline(g);
  ASSERT_FALSE(cut.is_ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  const auto& m = cut.status().message();
  EXPECT_TRUE(contains(m, "'dedupe'")) << m;
  EXPECT_TRUE(contains(m, "'shards'")) << m;
  EXPECT_TRUE(contains(m, "non-replicable")) << m;
}

TEST(CutPipeline, NonReplicableNodeAfterTheMergeIgnoresTheSplit) {
  PipelineGraph g;
  g.nodes = {node("shards", {}, true, true), node("decode", {0}), node("stats", {1}, false)};
  g.merge = 1;
  auto cut = cut_pipeline(g);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->where, (std::vector<Placement>{W, W, L}));
  EXPECT_EQ(cut->routed, -1);
}

TEST(CutPipeline, NonReplicableNodesMeetingInTwoNodesIsAnError) {
  // a and b both flow into c and into d, which join only at the merge: no single node
  // routes their output.
  PipelineGraph g;
  g.nodes = {node("src", {}),   node("a", {0}, false), node("b", {0}, false),
             node("c", {1, 2}), node("d", {1, 2}),     node("m", {3, 4})};
  g.merge = 5;
  auto cut = cut_pipeline(g);
  ASSERT_FALSE(cut.is_ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  const auto& m = cut.status().message();
  EXPECT_TRUE(contains(m, "'c'") && contains(m, "'d'")) << m;
}

TEST(CutPipeline, MalformedGraphsAreInvalidArguments) {
  PipelineGraph empty;
  EXPECT_EQ(cut_pipeline(empty).status().code(), StatusCode::kInvalidArgument);

  PipelineGraph merge_outside;
  merge_outside.nodes = {node("a", {}), node("b", {0})};
  merge_outside.merge = 2;
  auto r = cut_pipeline(merge_outside);
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status().message(), "merge")) << r.status().message();

  PipelineGraph self_loop;
  self_loop.nodes = {node("a", {}), node("b", {1})};
  self_loop.merge = 1;
  r = cut_pipeline(self_loop);
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status().message(), "'b'")) << r.status().message();

  PipelineGraph forward;
  forward.nodes = {node("a", {1}), node("b", {})};
  forward.merge = 1;
  EXPECT_EQ(cut_pipeline(forward).status().code(), StatusCode::kInvalidArgument);

  PipelineGraph out_of_range;
  out_of_range.nodes = {node("a", {}), node("b", {7})};
  out_of_range.merge = 1;
  EXPECT_EQ(cut_pipeline(out_of_range).status().code(), StatusCode::kInvalidArgument);
}

// ---- Specs -------------------------------------------------------------------------------

TEST(Dispatch, NamesParseBackAndUnknownOnesAreRefused) {
  for (auto d :
       {Dispatch::kNone, Dispatch::kRoundRobin, Dispatch::kOnRequest, Dispatch::kBroadcast}) {
    auto p = parse_dispatch(dispatch_name(d));
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(*p, d);
  }
  auto bad = parse_dispatch("bogus");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_TRUE(contains(bad.status().message(), "'bogus'")) << bad.status().message();
}

TEST(CutSpec, ResolveDispatchPicksRoundRobinOnlyForNonReplicableStagesBeforeTheMerge) {
  EXPECT_EQ(resolve_dispatch(Spec().map("a").map("b"), Dispatch::kNone), Dispatch::kNone);
  EXPECT_EQ(resolve_dispatch(Spec().map("a").once("b"), Dispatch::kNone), Dispatch::kRoundRobin);
  EXPECT_EQ(resolve_dispatch(Spec().map("a").merge().once("b"), Dispatch::kNone), Dispatch::kNone);
  for (auto d : {Dispatch::kRoundRobin, Dispatch::kOnRequest, Dispatch::kBroadcast})
    EXPECT_EQ(resolve_dispatch(Spec().once("a"), d), d) << "an explicit mode stays";
}

TEST(CutSpec, NoneWithANonReplicableStageNeedsADispatcher) {
  auto cut = cut_spec(Spec().map("decode").once("dedupe"), Dispatch::kNone);
  ASSERT_FALSE(cut.is_ok());
  EXPECT_TRUE(contains(cut.status().message(), "'dedupe'")) << cut.status().message();
  EXPECT_TRUE(contains(cut.status().message(), "dispatch")) << cut.status().message();
}

TEST(CutSpec, RoutedModesRunThePrefixUpToTheLastOnceStageInTheDispatcher) {
  Spec spec = Spec().map("a").once("b").map("c").once("d").map("e").merge().map("f").once("g");
  for (auto d : {Dispatch::kRoundRobin, Dispatch::kOnRequest}) {
    auto cut = cut_spec(spec, d);
    ASSERT_TRUE(cut.is_ok()) << dispatch_name(d) << ": " << cut.status().to_string();
    EXPECT_EQ(cut->dispatcher_end, 4u) << dispatch_name(d);
    EXPECT_EQ(cut->merge_at, 5u) << dispatch_name(d);
    EXPECT_EQ(cut->size, 7u) << dispatch_name(d);
    // Without once stages the dispatcher only reads.
    auto plain = cut_spec(Spec().map("a").map("b"), d);
    ASSERT_TRUE(plain.is_ok());
    EXPECT_EQ(plain->dispatcher_end, 0u);
    EXPECT_EQ(plain->merge_at, 2u);
    EXPECT_EQ(plain->size, 2u);
  }
}

TEST(CutSpec, BroadcastRefusesAOnceStageBeforeTheMerge) {
  auto cut = cut_spec(Spec().once("dedupe").map("decode"), Dispatch::kBroadcast);
  ASSERT_FALSE(cut.is_ok());
  const auto& m = cut.status().message();
  EXPECT_TRUE(contains(m, "'dedupe'")) << m;
  EXPECT_TRUE(contains(m, "non-replicable")) << m;
  EXPECT_TRUE(contains(m, "unroll")) << m;
  auto ok = cut_spec(Spec().map("decode").map("crop"), Dispatch::kBroadcast);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->dispatcher_end, 0u);
  EXPECT_EQ(ok->merge_at, 2u);
}

TEST(CutSpec, PostStagesAfterTheMergeAreFineInEveryMode) {
  Spec spec = Spec().map("decode").merge().once("stats").map("tag").once("count");
  for (auto d :
       {Dispatch::kNone, Dispatch::kRoundRobin, Dispatch::kOnRequest, Dispatch::kBroadcast}) {
    auto cut = cut_spec(spec, d);
    ASSERT_TRUE(cut.is_ok()) << dispatch_name(d) << ": " << cut.status().to_string();
    EXPECT_EQ(cut->dispatcher_end, 0u);
    EXPECT_EQ(cut->merge_at, 1u);
    EXPECT_EQ(cut->size, 4u);
  }
  // Everything after the merge, nothing before it.
  Spec all_post = Spec().merge().once("a").map("b");
  for (auto d :
       {Dispatch::kNone, Dispatch::kRoundRobin, Dispatch::kOnRequest, Dispatch::kBroadcast}) {
    auto cut = cut_spec(all_post, d);
    ASSERT_TRUE(cut.is_ok()) << dispatch_name(d) << ": " << cut.status().to_string();
    EXPECT_EQ(cut->merge_at, 0u);
    EXPECT_EQ(cut->size, 2u);
  }
}

TEST(CutSpec, SpecGraphHasTheSourceTheUnrollAndTheMergeNode) {
  Spec spec = Spec().map("a").map("b").merge().map("c");
  auto g = spec_graph(spec, Dispatch::kBroadcast);
  ASSERT_EQ(g.nodes.size(), 5u);  // load, unroll, a, b, c
  EXPECT_TRUE(g.nodes[1].split);
  EXPECT_EQ(g.nodes[g.merge].name, "b");
  auto none = spec_graph(spec, Dispatch::kNone);
  ASSERT_EQ(none.nodes.size(), 4u);
  EXPECT_TRUE(none.nodes[0].split);
  EXPECT_EQ(none.nodes[none.merge].name, "b");
  auto routed = spec_graph(Spec().merge().map("c"), Dispatch::kRoundRobin);
  EXPECT_EQ(routed.merge, 0u) << "no stage before the merge: the source is the merge node";
  EXPECT_FALSE(routed.nodes[0].replicable);
}

// ---- sequential_counts -------------------------------------------------------------------

TEST(SequentialCounts, MatchesABruteForceWalk) {
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint64_t> sizes(rng() % 7);
    uint64_t total = 0;
    for (auto& s : sizes) total += (s = rng() % 9);
    for (uint64_t positions = 0; positions <= total + 2; ++positions) {
      std::vector<uint64_t> want(sizes.size(), 0);
      uint64_t left = positions;
      for (size_t i = 0; i < sizes.size(); ++i)
        for (uint64_t k = 0; k < sizes[i] && left > 0; ++k, --left) ++want[i];
      ASSERT_EQ(sequential_counts(sizes, positions), want)
          << "trial " << trial << " positions " << positions;
    }
  }
}

// ---- the count stage ---------------------------------------------------------------------

std::string count_one(Stage& stage) {
  WorkerInfo worker;
  StageContext ctx{worker, ItemRng(1)};
  Item item;
  EXPECT_TRUE(stage.process(item, ctx).is_ok());
  const Field* f = item.field("n");
  return f ? std::string(f->view()) : std::string("<none>");
}

TEST(CountStage, ResumesFromItsStateAndSumsStatesOnRescale) {
  StageSpec spec{"count", {{"field", "n"}}, false};
  auto a = StageRegistry::global().make(spec);
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE((*a)->has_state());
  EXPECT_EQ(count_one(**a), "0");
  EXPECT_EQ(count_one(**a), "1");
  EXPECT_EQ(count_one(**a), "2");
  EXPECT_EQ((*a)->save_state(), "3");

  auto same = StageRegistry::global().make(spec);
  ASSERT_TRUE(same.is_ok());
  ASSERT_TRUE((*same)->restore_state({"3"}, false).is_ok());
  EXPECT_EQ(count_one(**same), "3");

  auto rescaled = StageRegistry::global().make(spec);
  ASSERT_TRUE(rescaled.is_ok());
  ASSERT_TRUE((*rescaled)->restore_state({"3", "40", "0"}, true).is_ok());
  EXPECT_EQ(count_one(**rescaled), "43");
  EXPECT_EQ((*rescaled)->save_state(), "44");

  for (const std::string bad : {"", "x", "12x", "-"}) {
    auto s = StageRegistry::global().make(spec);
    ASSERT_TRUE(s.is_ok());
    Status st = (*s)->restore_state({"1", bad}, true);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << "'" << bad << "'";
  }
}

TEST(CountStage, DefaultFieldIsSeq) {
  auto s = StageRegistry::global().make(StageSpec{"count", {}, true});
  ASSERT_TRUE(s.is_ok());
  WorkerInfo worker;
  StageContext ctx{worker, ItemRng(1)};
  Item item;
  ASSERT_TRUE((*s)->process(item, ctx).is_ok());
  ASSERT_NE(item.field("seq"), nullptr);
  EXPECT_EQ(item.field("seq")->view(), "0");
}

}  // namespace
}  // namespace shardyard
