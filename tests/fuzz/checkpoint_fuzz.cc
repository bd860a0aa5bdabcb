// libFuzzer target for the checkpoint formats (runtime/checkpoint.h): the CHECKPOINT
// manifest, the rank file and the stage-state list, decoded from arbitrary bytes. Beyond
// "no crash, no sanitizer report, no huge allocation", every accepted input must be the
// canonical encoding of what was decoded: encoding it again gives back the same bytes
// (so nothing is silently dropped or misread). The first byte picks the decoder; the seed
// corpus (tests/fuzz/checkpoint_corpus) holds valid files of each kind, with the selector.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/checkpoint.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "checkpoint_fuzz: property broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto m = shardyard::decode_checkpoint_manifest(bytes, "fuzz");
      if (m.is_ok())
        check(shardyard::encode_checkpoint_manifest(*m) == bytes, "manifest re-encodes");
      break;
    }
    case 1: {
      auto r = shardyard::decode_rank_checkpoint(bytes, "fuzz");
      if (!r.is_ok()) break;
      const std::string again = shardyard::encode_rank_checkpoint(*r);
      if (bytes.size() > 11 && bytes.substr(8, 4) == std::string_view("\1\0\0\0", 4)) {
        // Version 1 (no dispatcher or loader state) loads and is written as the current
        // version, which must then be a fixed point.
        check(r->dispatcher_state.empty() && r->loader_state.empty(), "version 1 has no state");
        auto r2 = shardyard::decode_rank_checkpoint(again, "fuzz");
        check(r2.is_ok() && shardyard::encode_rank_checkpoint(*r2) == again,
              "a version 1 rank file re-encodes as the current version");
      } else {
        check(again == bytes, "rank file re-encodes");
      }
      break;
    }
    default: {
      auto s = shardyard::decode_stage_states(bytes);
      if (s.is_ok()) check(shardyard::encode_stage_states(*s) == bytes, "stage states re-encode");
      break;
    }
  }
  return 0;
}
