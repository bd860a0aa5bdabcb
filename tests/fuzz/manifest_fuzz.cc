// libFuzzer target for the manifest format (runtime/manifest.h) and the packed sample tables
// inside it (runtime/sample_table.h), decoded from arbitrary bytes with and without
// verification (without: how a worker process decodes the manifest its rank hands over).
// Beyond "no crash, no sanitizer report, no huge allocation", an accepted input must be the
// canonical encoding of what was decoded (encoding it again gives back the same bytes, the
// checksum aside when it was not verified), every sample must read the same by index as by
// iteration, and a verified manifest's fingerprint must match its content. Seeded from
// tests/fuzz/manifest_corpus (files `shardyard manifest build` wrote).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/manifest.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "manifest_fuzz: property broken: %s\n", what);
  std::abort();
}

void check_tables(const shardyard::Manifest& m) {
  for (const auto& s : m.sources) {
    size_t i = 0;
    for (const auto& e : s.samples) {
      const shardyard::SampleEntry at = s.samples[i++];
      check(at.key == e.key && at.begin == e.begin && at.end == e.end &&
                at.payload_bytes == e.payload_bytes,
            "a sample reads the same by index and by iteration");
    }
    check(i == s.samples.size(), "iteration visits size() samples");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto plain = shardyard::decode_manifest(bytes, "fuzz", shardyard::ManifestCheck::kLayout);
  if (plain.is_ok()) {
    check_tables(*plain);
    const std::string again = shardyard::encode_manifest(*plain, /*checksum=*/false);
    check(again.size() == bytes.size() &&
              again.compare(0, again.size() - 8, bytes.substr(0, bytes.size() - 8)) == 0,
          "an unverified manifest re-encodes to the same bytes");
  }
  auto summed = shardyard::decode_manifest(bytes, "fuzz", shardyard::ManifestCheck::kChecksum);
  if (summed.is_ok()) {
    check(plain.is_ok(), "what passes its checksum also decodes unverified");
    check(shardyard::encode_manifest(*summed) == bytes,
          "a manifest that passes its checksum re-encodes to the same bytes");
  }
  auto verified = shardyard::decode_manifest(bytes, "fuzz");
  if (verified.is_ok()) {
    check(summed.is_ok(), "what verifies also passes its checksum");
    check(plain.is_ok(), "what verifies also decodes unverified");
    check(shardyard::encode_manifest(*verified) == bytes,
          "a manifest re-encodes to the same bytes");
    check(shardyard::compute_fingerprint(*verified) == verified->fingerprint,
          "a verified manifest's fingerprint matches its content");
  }
  return 0;
}
