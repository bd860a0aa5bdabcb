// `shardyard checkpoint inspect DIR`: what a checkpoint holds, readably (or as JSON).
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/fs/file_system.h"
#include "io/persist/checkpoint_store.h"
#include "json_text.h"

namespace shardyard::tools {

namespace {

struct InspectArgs {
  std::string dir;
  bool json = false;
};

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string utc(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json to_json(const Checkpoint& c) {
  const auto& m = c.manifest;
  nlohmann::json j;
  j["format_version"] = kCheckpointFormatVersion;
  j["generation"] = m.generation;
  j["created"] = utc(m.created_unix_ms);
  j["dataset"] = {{"fingerprint", hex(m.job.fingerprint)},
                  {"samples", m.job.num_items},
                  {"logical_shards", m.job.logical_shards},
                  {"chunk_items", m.job.chunk_items},
                  {"seed", m.job.seed},
                  {"shuffle", m.job.shuffle},
                  {"drop_last", m.job.drop_last},
                  {"distributed_strategy", json_text(m.job.distributed_strategy)},
                  {"worker_strategy", json_text(m.job.worker_strategy)}};
  j["topology"] = {{"ranks", m.topology.ranks},
                   {"workers", m.topology.workers},
                   {"batch_size", m.topology.batch_size},
                   {"order", m.topology.exact_order ? "exact" : "as_completed"}};
  uint64_t consumed = 0, take = 0;
  nlohmann::json shards = nlohmann::json::array(), ranks = nlohmann::json::array();
  for (const auto& r : c.ranks) {
    size_t state_bytes = 0;
    for (const auto& s : r.worker_states) state_bytes += s.size();
    const auto& ref = m.ranks[r.rank];
    ranks.push_back({{"rank", r.rank},
                     {"file", json_text(ref.name)},
                     {"bytes", ref.size},
                     {"logical_shards", r.shards.size()},
                     {"stage_state_bytes", state_bytes}});
    for (const auto& s : r.shards) {
      consumed += s.consumed;
      take += s.take;
      shards.push_back(
          {{"shard", s.shard}, {"rank", r.rank}, {"consumed", s.consumed}, {"take", s.take}});
    }
  }
  std::sort(shards.begin(), shards.end(),
            [](const auto& a, const auto& b) { return a["shard"] < b["shard"]; });
  j["cursor"] = {{"epoch", m.epoch},
                 {"step", m.step},
                 {"steps", m.steps},
                 {"epoch_complete", m.epoch_complete},
                 {"resumes_at_epoch", c.resume_epoch()},
                 {"consumed", consumed},
                 {"take", take}};
  j["ranks"] = ranks;
  j["shards"] = shards;
  return j;
}

void print_text(const nlohmann::json& j) {
  const auto& d = j["dataset"];
  const auto& t = j["topology"];
  const auto& c = j["cursor"];
  std::printf("checkpoint generation %llu, format version %u, created %s\n",
              static_cast<unsigned long long>(j["generation"].get<uint64_t>()),
              j["format_version"].get<unsigned>(), j["created"].get<std::string>().c_str());
  std::printf("dataset    fingerprint %s, %llu samples, L=%u logical shards, chunk %u items\n",
              d["fingerprint"].get<std::string>().c_str(),
              static_cast<unsigned long long>(d["samples"].get<uint64_t>()),
              d["logical_shards"].get<unsigned>(), d["chunk_items"].get<unsigned>());
  std::printf("plan       seed %llu, shuffle %s, drop_last %s, strategies %s / %s\n",
              static_cast<unsigned long long>(d["seed"].get<uint64_t>()),
              d["shuffle"].get<bool>() ? "on" : "off", d["drop_last"].get<bool>() ? "on" : "off",
              d["distributed_strategy"].get<std::string>().c_str(),
              d["worker_strategy"].get<std::string>().c_str());
  std::printf("topology   %u ranks x %u workers, batch size %u, order %s\n",
              t["ranks"].get<unsigned>(), t["workers"].get<unsigned>(),
              t["batch_size"].get<unsigned>(), t["order"].get<std::string>().c_str());
  const uint64_t consumed = c["consumed"], take = c["take"];
  std::printf("cursor     epoch %u, step %llu of %llu%s: %llu of %llu samples consumed (%.1f%%)\n",
              c["epoch"].get<unsigned>(),
              static_cast<unsigned long long>(c["step"].get<uint64_t>()),
              static_cast<unsigned long long>(c["steps"].get<uint64_t>()),
              c["epoch_complete"].get<bool>() ? " (epoch complete)" : "",
              static_cast<unsigned long long>(consumed), static_cast<unsigned long long>(take),
              take ? 100.0 * consumed / take : 100.0);
  std::printf("resume     at epoch %u\n", c["resumes_at_epoch"].get<unsigned>());
  std::printf("\nrank  file                          bytes  shards  stage state\n");
  for (const auto& r : j["ranks"])
    std::printf("%4u  %-28s %6llu  %6zu  %llu bytes\n", r["rank"].get<unsigned>(),
                r["file"].get<std::string>().c_str(),
                static_cast<unsigned long long>(r["bytes"].get<uint64_t>()),
                r["logical_shards"].get<size_t>(),
                static_cast<unsigned long long>(r["stage_state_bytes"].get<uint64_t>()));
  std::printf("\nshard  rank   consumed / take\n");
  for (const auto& s : j["shards"]) {
    const uint64_t sc = s["consumed"], st = s["take"];
    const int width = 20, fill = st ? static_cast<int>(width * sc / st) : width;
    std::printf("%5u  %4u  %9llu / %-9llu [%s%s]\n", s["shard"].get<unsigned>(),
                s["rank"].get<unsigned>(), static_cast<unsigned long long>(sc),
                static_cast<unsigned long long>(st), std::string(fill, '#').c_str(),
                std::string(width - fill, '.').c_str());
  }
}

}  // namespace

Command add_checkpoint_commands(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("checkpoint", "inspect checkpoints");
  cmd->require_subcommand(1);
  auto* inspect = cmd->add_subcommand("inspect", "print what a checkpoint directory holds");
  inspect->add_option("dir", args->dir, "checkpoint directory")->required();
  inspect->add_flag("--json", args->json, "print JSON");
  return [args] {
    auto c = io::load_checkpoint(io::local_file_system(), args->dir);
    if (!c.is_ok()) {
      print_error(c.status().to_string());
      return 1;
    }
    auto j = to_json(*c);
    if (args->json) {
      std::cout << dump_json(j, 2) << std::endl;
    } else {
      print_text(j);
    }
    return 0;
  };
}

}  // namespace shardyard::tools
