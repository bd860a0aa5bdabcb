#include "actors/state/job_status.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace shardyard::actors {

using nlohmann::json;

void add_rank(JobStatus* job, RankStatus rank) {
  auto& actors = job->actors;
  actors.erase(std::remove_if(actors.begin(), actors.end(),
                              [&](const ActorSnapshot& a) {
                                return a.role != "coordinator" && a.rank == rank.rank;
                              }),
               actors.end());
  for (auto& a : rank.actors) actors.push_back(std::move(a));
  rank.actors.clear();
  auto& ranks = job->ranks;
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank.rank,
                             [](const RankStatus& r, uint32_t v) { return r.rank < v; });
  if (it != ranks.end() && it->rank == rank.rank) {
    *it = std::move(rank);
  } else {
    ranks.insert(it, std::move(rank));
  }
}

namespace {

json actor_json(const ActorSnapshot& a) {
  return json{{"role", a.role},
              {"rank", a.rank},
              {"worker", a.worker},
              {"node", a.node},
              {"pid", a.pid},
              {"state", a.state},
              {"epoch", a.epoch},
              {"items", a.items},
              {"bytes", a.bytes},
              {"steps", a.steps},
              {"items_per_s", a.items_per_s},
              {"queue_depth", a.queue_depth},
              {"queue_capacity", a.queue_capacity},
              {"input_wait_s", a.input_wait_s},
              {"output_wait_s", a.output_wait_s},
              {"uptime_s", a.uptime_s},
              {"detail", a.detail}};
}

json rank_json(const RankStatus& r) {
  json shards = json::array();
  uint64_t done = 0, unseen = 0;
  for (size_t k = 0; k < r.shards.size(); ++k) {
    const uint64_t take = k < r.take.size() ? r.take[k] : 0;
    const uint64_t consumed = k < r.consumed.size() ? r.consumed[k] : 0;
    const char* state = consumed >= take ? "done" : consumed == 0 ? "unseen" : "partial";
    done += consumed >= take;
    unseen += consumed == 0 && take > 0;
    shards.push_back(
        {{"shard", r.shards[k]}, {"take", take}, {"consumed", consumed}, {"state", state}});
  }
  json queues = json::array();
  for (const auto& q : r.queues)
    queues.push_back(
        {{"name", q.name}, {"depth", q.depth}, {"capacity", q.capacity}, {"bytes", q.bytes}});
  return json{{"rank", r.rank},
              {"node", r.node},
              {"pid", r.pid},
              {"epoch", r.epoch},
              {"epoch_open", r.epoch_open},
              {"step", r.step},
              {"steps", r.steps},
              {"items", r.items},
              {"shards", shards},
              {"shards_done", done},
              {"shards_unseen", unseen},
              {"queues", queues},
              {"checkpoint",
               {{"saves", r.checkpoint_saves},
                {"generation", r.checkpoint_generation},
                {"restored_generation", r.restored_generation},
                {"generations", r.checkpoint_generations}}}};
}

// Reads j[key] into *out when present; a value of the wrong type is an error naming it.
template <typename T>
void field(const json& j, const char* key, T* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || !error->empty()) return;
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    *error = std::string("field '") + key + "' has the wrong type";
  }
}

ActorSnapshot parse_actor(const json& j, std::string* e) {
  ActorSnapshot a;
  field(j, "role", &a.role, e);
  field(j, "rank", &a.rank, e);
  field(j, "worker", &a.worker, e);
  field(j, "node", &a.node, e);
  field(j, "pid", &a.pid, e);
  field(j, "state", &a.state, e);
  field(j, "epoch", &a.epoch, e);
  field(j, "items", &a.items, e);
  field(j, "bytes", &a.bytes, e);
  field(j, "steps", &a.steps, e);
  field(j, "items_per_s", &a.items_per_s, e);
  field(j, "queue_depth", &a.queue_depth, e);
  field(j, "queue_capacity", &a.queue_capacity, e);
  field(j, "input_wait_s", &a.input_wait_s, e);
  field(j, "output_wait_s", &a.output_wait_s, e);
  field(j, "uptime_s", &a.uptime_s, e);
  field(j, "detail", &a.detail, e);
  return a;
}

RankStatus parse_rank(const json& j, std::string* e) {
  RankStatus r;
  field(j, "rank", &r.rank, e);
  field(j, "node", &r.node, e);
  field(j, "pid", &r.pid, e);
  field(j, "epoch", &r.epoch, e);
  field(j, "epoch_open", &r.epoch_open, e);
  field(j, "step", &r.step, e);
  field(j, "steps", &r.steps, e);
  field(j, "items", &r.items, e);
  if (auto it = j.find("shards"); it != j.end() && it->is_array())
    for (const auto& s : *it) {
      uint32_t shard = 0;
      uint64_t take = 0, consumed = 0;
      field(s, "shard", &shard, e);
      field(s, "take", &take, e);
      field(s, "consumed", &consumed, e);
      r.shards.push_back(shard);
      r.take.push_back(take);
      r.consumed.push_back(consumed);
    }
  if (auto it = j.find("queues"); it != j.end() && it->is_array())
    for (const auto& q : *it) {
      QueueStatus qs;
      field(q, "name", &qs.name, e);
      field(q, "depth", &qs.depth, e);
      field(q, "capacity", &qs.capacity, e);
      field(q, "bytes", &qs.bytes, e);
      r.queues.push_back(std::move(qs));
    }
  if (auto it = j.find("checkpoint"); it != j.end() && it->is_object()) {
    field(*it, "saves", &r.checkpoint_saves, e);
    field(*it, "generation", &r.checkpoint_generation, e);
    field(*it, "restored_generation", &r.restored_generation, e);
    field(*it, "generations", &r.checkpoint_generations, e);
  }
  return r;
}

}  // namespace

std::string status_json(const JobStatus& s, int indent) {
  json actors = json::array();
  for (const auto& a : s.actors) actors.push_back(actor_json(a));
  json ranks = json::array();
  for (const auto& r : s.ranks) ranks.push_back(rank_json(r));
  json j{{"schema", "shardyard.status/1"},
         {"job",
          {{"world_size", s.world_size},
           {"workers", s.workers},
           {"batch_size", s.batch_size},
           {"logical_shards", s.logical_shards},
           {"items", s.items},
           {"dispatch", s.dispatch},
           {"fingerprint", s.fingerprint}}},
         {"served_by", {{"node", s.node}, {"pid", s.pid}, {"uptime_s", s.uptime_s}}},
         {"actors", actors},
         {"ranks", ranks}};
  // Names (file names in details) may hold bytes that are not UTF-8: replaced, not thrown.
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

Result<JobStatus> parse_status_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("the status is not a JSON object");
  if (j.value("schema", std::string()) != "shardyard.status/1")
    return invalid_argument("the status has no schema shardyard.status/1 (another program?)");
  JobStatus s;
  std::string e;
  if (auto it = j.find("job"); it != j.end() && it->is_object()) {
    field(*it, "world_size", &s.world_size, &e);
    field(*it, "workers", &s.workers, &e);
    field(*it, "batch_size", &s.batch_size, &e);
    field(*it, "logical_shards", &s.logical_shards, &e);
    field(*it, "items", &s.items, &e);
    field(*it, "dispatch", &s.dispatch, &e);
    field(*it, "fingerprint", &s.fingerprint, &e);
  }
  if (auto it = j.find("served_by"); it != j.end() && it->is_object()) {
    field(*it, "node", &s.node, &e);
    field(*it, "pid", &s.pid, &e);
    field(*it, "uptime_s", &s.uptime_s, &e);
  }
  auto actors = j.find("actors");
  auto ranks = j.find("ranks");
  if (actors == j.end() || !actors->is_array() || ranks == j.end() || !ranks->is_array())
    return invalid_argument("the status has no 'actors' or 'ranks' array");
  for (const auto& a : *actors) s.actors.push_back(parse_actor(a, &e));
  for (const auto& r : *ranks) s.ranks.push_back(parse_rank(r, &e));
  if (!e.empty()) return invalid_argument("the status is malformed: " + e);
  return s;
}

}  // namespace shardyard::actors
