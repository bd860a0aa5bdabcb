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

}  // namespace shardyard::testing
