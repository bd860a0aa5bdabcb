#include "runtime/pipeline_cut.h"

#include <algorithm>

namespace shardyard {

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kDispatcher:
      return "dispatcher";
    case Placement::kWorker:
      return "worker";
    case Placement::kLoader:
      return "loader";
  }
  return "?";
}

Result<PipelineCut> cut_pipeline(const PipelineGraph& g) {
  const size_t n = g.nodes.size();
  if (n == 0) return invalid_argument("a pipeline graph needs at least one node");
  if (g.merge >= n) return invalid_argument("the merge node is not in the graph");
  for (size_t v = 0; v < n; ++v)
    for (auto in : g.nodes[v].inputs)
      if (in >= v)
        return invalid_argument("node '" + g.nodes[v].name +
                                "' takes an input that does not come before it");
  // reach[u][v]: items of u flow into v (v == u included).
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t v = 0; v < n; ++v) {
    reach[v][v] = true;
    for (auto in : g.nodes[v].inputs)
      for (size_t u = 0; u < n; ++u)
        if (reach[u][in]) reach[u][v] = true;
  }
  PipelineCut cut;
  cut.where.assign(n, Placement::kLoader);
  std::vector<uint32_t> non_replicable;
  for (size_t v = 0; v < n; ++v) {
    if (!reach[v][g.merge]) continue;  // after the merge, or on a branch that joins later
    cut.where[v] = Placement::kWorker;
    if (!g.nodes[v].replicable) non_replicable.push_back(static_cast<uint32_t>(v));
  }
  if (non_replicable.empty()) return cut;
  // Common descendants of every non-replicable node; the lowest common ancestor is the one
  // every other common descendant lies downstream of.
  std::vector<uint32_t> common;
  for (size_t v = 0; v < n; ++v) {
    if (!reach[v][g.merge]) continue;
    bool all = std::all_of(non_replicable.begin(), non_replicable.end(),
                           [&](uint32_t u) { return reach[u][v]; });
    if (all) common.push_back(static_cast<uint32_t>(v));
  }
  const uint32_t lca = common.front();  // topological order: the most upstream candidate
  for (auto v : common)
    if (!reach[lca][v])
      return invalid_argument("the non-replicable stages meet in both '" + g.nodes[lca].name +
                              "' and '" + g.nodes[v].name +
                              "', so no single node can route their output to the workers");
  for (size_t v = 0; v < n; ++v) {
    if (!reach[v][lca]) continue;
    if (g.nodes[v].split) {
      // Name a non-replicable node that sees only a worker's part, if there is one.
      std::string victim = g.nodes[lca].name;
      for (auto u : non_replicable)
        if (reach[v][u]) {
          victim = g.nodes[u].name;
          break;
        }
      return invalid_argument(
          "stage '" + victim + "' is non-replicable but comes after '" + g.nodes[v].name +
          "', which splits items among the workers: it would see only one worker's part. Move "
          "it before '" +
          g.nodes[v].name + "' or after the merge, or make it replicable");
    }
    cut.where[v] = Placement::kDispatcher;
  }
  cut.routed = lca;
  return cut;
}

const char* dispatch_name(Dispatch d) {
  switch (d) {
    case Dispatch::kNone:
      return "none";
    case Dispatch::kRoundRobin:
      return "round_robin";
    case Dispatch::kOnRequest:
      return "on_request";
    case Dispatch::kBroadcast:
      return "broadcast";
    case Dispatch::kByKey:
      return "by_key";
  }
  return "?";
}

Result<Dispatch> parse_dispatch(const std::string& name) {
  for (auto d : {Dispatch::kNone, Dispatch::kRoundRobin, Dispatch::kOnRequest, Dispatch::kBroadcast,
                 Dispatch::kByKey})
    if (name == dispatch_name(d)) return d;
  return invalid_argument("unknown dispatch mode '" + name +
                          "' (none, round_robin, on_request, broadcast, by_key)");
}

PipelineGraph spec_graph(const Spec& spec, Dispatch dispatch) {
  PipelineGraph g;
  PipelineNode source;
  switch (dispatch) {
    case Dispatch::kNone:
      source = {"read (each worker its own logical shards)", {}, true, true};
      break;
    case Dispatch::kRoundRobin:
    case Dispatch::kOnRequest:
    case Dispatch::kByKey:
      source = {"read (the dispatcher, the rank's logical shards)", {}, false, false};
      break;
    case Dispatch::kBroadcast:
      source = {"load (the dispatcher, whole logical shards)", {}, false, false};
      break;
  }
  g.nodes.push_back(source);
  if (dispatch == Dispatch::kBroadcast)
    g.nodes.push_back({"unroll (each worker its part of a loaded shard)", {0}, true, true});
  const size_t first = g.nodes.size();
  const auto& stages = spec.stages();
  const size_t merge_at = spec.merge_at();
  for (size_t i = 0; i < stages.size(); ++i) {
    auto prev = static_cast<uint32_t>(g.nodes.size() - 1);
    g.nodes.push_back({stages[i].type, {prev}, stages[i].replicable, false});
  }
  // The merge node: the last stage before the merge point (or the source side's last node).
  g.merge = static_cast<uint32_t>(first + merge_at - 1);
  if (merge_at == 0) g.merge = static_cast<uint32_t>(first - 1);
  return g;
}

Dispatch resolve_dispatch(const Spec& spec, Dispatch requested) {
  if (requested != Dispatch::kNone) return requested;
  for (size_t i = 0; i < spec.merge_at(); ++i)
    if (!spec.stages()[i].replicable) return Dispatch::kRoundRobin;
  return Dispatch::kNone;
}

Result<SpecCut> cut_spec(const Spec& spec, Dispatch dispatch) {
  for (size_t i = 0; i < spec.merge_at() && dispatch == Dispatch::kNone; ++i)
    if (!spec.stages()[i].replicable)
      return invalid_argument("stage '" + spec.stages()[i].type +
                              "' is non-replicable and needs a dispatcher: choose a dispatch "
                              "mode (round_robin, on_request or broadcast)");
  auto graph = spec_graph(spec, dispatch);
  SY_ASSIGN_OR_RETURN(auto cut, cut_pipeline(graph));
  SpecCut out;
  const size_t first = dispatch == Dispatch::kBroadcast ? 2 : 1;
  out.size = spec.stages().size();
  out.merge_at = spec.merge_at();
  for (size_t i = 0; i < out.merge_at; ++i)
    if (cut.where[first + i] == Placement::kDispatcher) out.dispatcher_end = i + 1;
  return out;
}

}  // namespace shardyard
