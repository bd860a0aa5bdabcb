#include "actors/state/agreement.h"

#include <functional>
#include <string>

namespace shardyard::actors {

namespace {

std::string on_off(bool b) { return b ? "on" : "off"; }
std::string quoted(const std::string& s) { return "'" + s + "'"; }

struct FieldRule {
  const char* name;  // as a message says it
  std::function<std::string(const JobInfo&)> value;
};

// In the order a user looks for a cause: the dataset first, then the plan, then the
// topology and the pipeline.
const FieldRule kRules[] = {
    {"the dataset (manifest fingerprint)",
     [](const JobInfo& j) { return std::to_string(j.fingerprint); }},
    {"the number of samples", [](const JobInfo& j) { return std::to_string(j.num_items); }},
    {"the windows", [](const JobInfo& j) { return quoted(j.windows); }},
    {"the number of logical shards (L)",
     [](const JobInfo& j) { return std::to_string(j.logical_shards); }},
    {"the shuffle block (chunk items)",
     [](const JobInfo& j) { return std::to_string(j.chunk_items); }},
    {"the seed", [](const JobInfo& j) { return std::to_string(j.seed); }},
    {"shuffle", [](const JobInfo& j) { return on_off(j.shuffle); }},
    {"drop_last", [](const JobInfo& j) { return on_off(j.drop_last); }},
    {"the distributed strategy", [](const JobInfo& j) { return quoted(j.distributed_strategy); }},
    {"the worker strategy", [](const JobInfo& j) { return quoted(j.worker_strategy); }},
    {"the world size", [](const JobInfo& j) { return std::to_string(j.world_size); }},
    {"the number of workers per rank", [](const JobInfo& j) { return std::to_string(j.workers); }},
    {"the batch size", [](const JobInfo& j) { return std::to_string(j.batch_size); }},
    {"the order",
     [](const JobInfo& j) { return std::string(j.exact_order ? "exact" : "as_completed"); }},
    {"the dispatch mode", [](const JobInfo& j) { return quoted(j.dispatch); }},
    {"the pipeline spec", [](const JobInfo& j) { return quoted(j.pipeline); }},
};

}  // namespace

Status check_agreement(const JobInfo& job, const JobInfo& theirs, uint32_t rank) {
  const std::string who = "rank " + std::to_string(rank);
  for (const auto& rule : kRules) {
    std::string a = rule.value(job), b = rule.value(theirs);
    if (a != b)
      return invalid_argument(who + " does not agree with the job on " + rule.name +
                              ": the job has " + a + ", " + who + " has " + b);
  }
  return Status::ok();
}

}  // namespace shardyard::actors
