// Parsers of command-line values: numbers that CLI11 would accept too loosely (CLI11 2.1
// reads "-1" into an unsigned option as 2^64-1 and lets a value past the type's range
// through, so such options are taken as text and parsed here), byte counts, and stage
// specs. Each error names the flag and says what it takes. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/pipeline.h"
#include "runtime/status.h"

namespace shardyard::tools {

// A decimal integer from 0 to 2^64-1 (digits only: no sign, no spaces).
Result<uint64_t> parse_u64(const std::string& flag, const std::string& text);

// A byte count: digits with an optional binary unit K, M, G or T (also KiB, KB, ...:
// 1K = 1024), at least 1 and at most 2^64-1.
Result<uint64_t> parse_byte_size(const std::string& flag, const std::string& text);

// A --map stage: "type" or "type:key=value;key=value".
Result<StageSpec> parse_stage(const std::string& text);

}  // namespace shardyard::tools
