// Where each stage of a pipeline runs: the cut between a rank's dispatcher, its workers and
// its loader.
//
// A pipeline is a graph of nodes (sources and stages) whose items flow to one merge node;
// every worker hands the merge node's output to the rank's loader, and nodes downstream of
// the merge run in the loader (once per rank, on the merged rank order: post-processing).
// Non-replicable nodes must run exactly once per rank. The cut finds the lowest common
// ancestor of all non-replicable nodes before the merge (seen from the output: the first
// node that every one of them flows into); that node and everything upstream of it run in
// the dispatcher, which routes the node's output to the workers; the workers run the rest
// up to the merge. A node marked `split` divides its items among the workers (a source
// whose logical shards go to workers, or the unrolling of a loaded shard that every worker
// received); a non-replicable node downstream of a split would see only one worker's part,
// so such a graph cannot be cut and cut_pipeline() says which node and why.
// docs/pipeline-cut.md has worked examples.
//
// A Spec (runtime/pipeline.h) is a chain: cut_spec() builds its graph for a dispatch mode
// (the source node and, for broadcast, the unroll node) and cuts it.
//
// Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/pipeline.h"
#include "runtime/status.h"

namespace shardyard {

struct PipelineNode {
  std::string name;
  std::vector<uint32_t> inputs;  // indices of earlier nodes; empty for a source
  bool replicable = true;
  bool split = false;  // its output is divided among the workers
};

struct PipelineGraph {
  std::vector<PipelineNode> nodes;  // in topological order: a node's inputs come before it
  uint32_t merge = 0;               // the node whose output the loader merges
};

enum class Placement : uint8_t { kDispatcher, kWorker, kLoader };
const char* placement_name(Placement p);

struct PipelineCut {
  std::vector<Placement> where;  // by node
  int64_t routed = -1;           // the lowest common ancestor, whose output is routed; -1: none
};

// Fails (kInvalidArgument) on a malformed graph, on non-replicable nodes that no single
// node joins, and on a non-replicable node downstream of a split before the merge.
Result<PipelineCut> cut_pipeline(const PipelineGraph& graph);

// How a rank's dispatcher feeds its workers.
enum class Dispatch : uint8_t {
  kNone,        // no dispatcher stage: every worker reads its own logical shards
  kRoundRobin,  // the dispatcher reads; item at rank position p goes to worker p mod W
  kOnRequest,   // the dispatcher reads; an idle worker takes the next items
  kBroadcast,   // the dispatcher loads whole logical shards; every worker gets each one
                // and takes its part of the shard's item indices (WORKER level)
  kByKey,       // the dispatcher reads; items with the same routing key (the item's key,
                // or a field's bytes) always go to the same worker: hash mod W
};
const char* dispatch_name(Dispatch d);
Result<Dispatch> parse_dispatch(const std::string& name);

// The chain of a Spec, cut for a dispatch mode: stages [0, dispatcher_end) run in the
// dispatcher, [dispatcher_end, merge_at) in every worker, [merge_at, size) in the loader.
struct SpecCut {
  size_t dispatcher_end = 0;
  size_t merge_at = 0;
  size_t size = 0;
};
// The graph of a Spec's chain for `dispatch` (node 0 is the source; broadcast adds an unroll
// node): the input of docs and of cut_spec().
PipelineGraph spec_graph(const Spec& spec, Dispatch dispatch);
// Fails when a non-replicable stage cannot run once per rank in this mode (kNone has no
// dispatcher: choose a mode first, see resolve_dispatch()).
Result<SpecCut> cut_spec(const Spec& spec, Dispatch dispatch);
// kNone with non-replicable stages before the merge needs a dispatcher: round robin.
Dispatch resolve_dispatch(const Spec& spec, Dispatch requested);

}  // namespace shardyard
