// libFuzzer target for the control frames between a rank and its worker processes
// (actors/state/worker_frames.h). The first byte picks the decoder, the rest is its input:
//   0  a job frame body, 1 a unit frame body, 2 a done frame body, 3 a status body
// Beyond "no crash, no sanitizer report": an accepted body re-encodes to the very same bytes.
// Seeded from tests/fuzz/worker_frame_corpus (written by tests/fuzz/make_worker_frames.py).
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "actors/state/worker_frames.h"

using namespace shardyard;
using namespace shardyard::actors;

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "worker_frame_fuzz: property broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      if (auto job = decode_job(in); job.is_ok())
        check(encode_job(*job) == in, "a job frame re-encodes to other bytes");
      break;
    case 1:
      if (auto unit = decode_unit(in); unit.is_ok())
        check(encode_unit(*unit) == in, "a unit frame re-encodes to other bytes");
      break;
    case 2:
      if (auto done = decode_done(in); done.is_ok()) {
        check(encode_done(*done) == in, "a done frame re-encodes to other bytes");
      } else {
        // A unit's error or damage; damage is only what done_well_formed() refuses.
        check(done.status().code() != StatusCode::kOk, "an error without a code");
      }
      break;
    case 3:
      if (status_well_formed(in))
        check(encode_status(decode_status(in)) == in, "a status re-encodes to other bytes");
      break;
  }
  return 0;
}
