// In-memory manifests for the shard-math tests (no files needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/manifest.h"

namespace shardyard::testing {

// A manifest whose source s has sizes[s] samples with unique keys.
inline Manifest make_manifest(const std::vector<uint64_t>& sizes,
                              SourceKind kind = SourceKind::kTar,
                              const std::vector<std::string>& uris = {}) {
  Manifest m;
  for (size_t s = 0; s < sizes.size(); ++s) {
    SourceEntry src;
    src.uri = s < uris.size() ? uris[s] : "/data/train-" + std::to_string(s) + ".tar";
    src.kind = kind;
    uint64_t at = 0;
    for (uint64_t i = 0; i < sizes[s]; ++i) {
      SampleEntry e;
      e.key = "s" + std::to_string(s) + "/k" + std::to_string(i);
      e.begin = at;
      e.end = at + 1024;
      e.payload_bytes = 100 + i % 7;
      at = e.end;
      src.samples.push_back(std::move(e));
    }
    m.sources.push_back(std::move(src));
  }
  m.fingerprint = compute_fingerprint(m);
  return m;
}

// Calls edit(entry) on every sample of the table (a SampleTable has no mutation in place, so
// it is rebuilt).
template <typename Edit>
void edit_samples(SampleTable* table, Edit edit) {
  std::vector<SampleEntry> entries = table->to_vector();
  for (auto& e : entries) edit(e);
  *table = SampleTable(entries);
}

// Calls edit on sample i of the table alone.
template <typename Edit>
void edit_sample(SampleTable* table, size_t i, Edit edit) {
  std::vector<SampleEntry> entries = table->to_vector();
  edit(entries.at(i));
  *table = SampleTable(entries);
}

}  // namespace shardyard::testing
