// `shardyard manifest build|show`: build a dataset's manifest ahead of time (into the cache
// or a file) and print one readably.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/format/manifest_scan.h"
#include "io/remote/remote_file_system.h"
#include "json_text.h"

namespace shardyard::tools {

namespace {

struct ManifestArgs {
  std::vector<std::string> sources;
  std::string output, file, cache_dir, on_corrupt = "fail";
  bool samples = false, json = false, strict = false;
  unsigned threads = 2;
};

// `build` scans every time (it is the command that replaces a stale or damaged cached
// manifest); `show --source` reads the cache when it is fresh.
Result<Manifest> obtain(const ManifestArgs& a, bool build, io::ScanReport* report) {
  if (!a.file.empty()) return io::load_manifest(a.file);
  io::ScanOptions scan;
  scan.on_corrupt = a.on_corrupt == "skip" ? io::OnCorrupt::kSkip : io::OnCorrupt::kFail;
  scan.strict_members = a.strict;
  scan.threads = a.threads;
  scan.cache_dir = a.cache_dir.empty() ? io::default_cache_dir() : a.cache_dir;
  scan.cache_mode = build ? io::CacheMode::kRebuild : io::CacheMode::kUse;
  return io::build_manifest(io::default_file_system(), a.sources, scan, report);
}

int show(const Manifest& m, const ManifestArgs& a) {
  if (a.json) {
    nlohmann::json j;
    j["fingerprint"] = m.fingerprint_hex();
    j["samples"] = m.num_samples();
    j["payload_bytes"] = m.payload_bytes();
    j["damaged"] = m.num_damaged();
    j["members_skipped"] = m.members_skipped();
    j["strict_members"] = m.strict_members;
    for (const auto& s : m.sources) {
      nlohmann::json js{{"uri", json_text(s.uri)},
                        {"kind", source_kind_name(s.kind)},
                        {"size_bytes", s.size_bytes},
                        {"samples", s.samples.size()},
                        {"members_skipped", s.members_skipped}};
      if (s.damaged) js["damage"] = json_text(s.damage);
      if (a.samples)
        for (const auto& e : s.samples)
          js["sample_list"].push_back({{"key", json_text(e.key)},
                                       {"begin", e.begin},
                                       {"end", e.end},
                                       {"payload_bytes", e.payload_bytes}});
      j["sources"].push_back(js);
    }
    std::cout << dump_json(j, 2) << std::endl;
    return 0;
  }
  std::printf(
      "fingerprint  %s\nsources      %zu\nsamples      %llu\npayload      %.1f MB\ndamaged      "
      "%zu\nskipped      %llu members\n",
      m.fingerprint_hex().c_str(), m.sources.size(),
      static_cast<unsigned long long>(m.num_samples()), m.payload_bytes() / 1e6, m.num_damaged(),
      static_cast<unsigned long long>(m.members_skipped()));
  for (const auto& s : m.sources) {
    std::printf("  %-9s %8zu samples %12llu bytes %6llu skipped  %s%s%s\n",
                source_kind_name(s.kind), s.samples.size(),
                static_cast<unsigned long long>(s.size_bytes),
                static_cast<unsigned long long>(s.members_skipped), s.uri.c_str(),
                s.damaged ? "  DAMAGED: " : "", s.damaged ? s.damage.c_str() : "");
    if (a.samples)
      for (const auto& e : s.samples)
        std::printf("      %s  [%llu, %llu)  %llu bytes\n", e.key.c_str(),
                    static_cast<unsigned long long>(e.begin),
                    static_cast<unsigned long long>(e.end),
                    static_cast<unsigned long long>(e.payload_bytes));
  }
  return 0;
}

}  // namespace

Command add_manifest_commands(CLI::App& app) {
  auto args = std::make_shared<ManifestArgs>();
  auto* m = app.add_subcommand("manifest", "build or show dataset manifests");
  m->require_subcommand(1);
  auto* build = m->add_subcommand("build", "scan the sources' headers and cache the manifest");
  build->add_option("--source", args->sources, "shard paths, brace patterns or directories")
      ->required();
  build->add_option("--output", args->output, "also write the manifest to this file");
  build->add_option("--cache-dir", args->cache_dir, "manifest cache folder");
  build->add_option("--on-corrupt", args->on_corrupt, "fail | skip")
      ->check(CLI::IsMember({"fail", "skip"}));
  build->add_option("--threads", args->threads, "sources scanned in parallel");
  build->add_flag("--strict", args->strict,
                  "a member WebDataset skips (no key.ext name, a link; not a directory) is an "
                  "error (or, with --on-corrupt skip, damage)");
  auto* showc = m->add_subcommand("show", "print a manifest (from a file or the sources)");
  showc->add_option("file", args->file, "a manifest file");
  showc->add_option("--source", args->sources, "shard paths, brace patterns or directories");
  showc->add_option("--cache-dir", args->cache_dir, "manifest cache folder");
  showc->add_flag("--samples", args->samples, "list every sample");
  showc->add_flag("--json", args->json, "print JSON");
  return [args, build, showc]() -> int {
    if (showc->parsed() && args->file.empty() && args->sources.empty()) {
      print_error("manifest show needs a manifest file or --source");
      return 2;
    }
    io::ScanReport report;
    auto t0 = std::chrono::steady_clock::now();
    auto m = obtain(*args, build->parsed(), &report);
    if (!m.is_ok()) {
      std::string hint;
      if (!args->file.empty() && m.status().code() == StatusCode::kCorrupt)
        hint = "; write it again with `shardyard manifest build --source ... --output " +
               args->file + "`";
      print_error(m.status().to_string() + hint);
      return 1;
    }
    for (const auto& w : report.skipped) print_warning("skipped: " + w);
    for (const auto& w : report.warnings) print_warning(w);
    if (build->parsed()) {
      if (!args->output.empty()) {
        Status st = io::save_manifest(*m, args->output);
        if (!st.is_ok()) {
          print_error(st.to_string());
          return 1;
        }
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf(
          "manifest %s: %zu sources, %llu samples, %.1f MB payload, %zu damaged, %llu members "
          "skipped, %s in %.3f s -> %s\n",
          m->fingerprint_hex().c_str(), m->sources.size(),
          static_cast<unsigned long long>(m->num_samples()), m->payload_bytes() / 1e6,
          m->num_damaged(), static_cast<unsigned long long>(m->members_skipped()),
          report.from_cache ? "from cache" : "scanned", s,
          args->output.empty() ? report.cache_path.c_str() : args->output.c_str());
      return 0;
    }
    return show(*m, *args);
  };
}

}  // namespace shardyard::tools
