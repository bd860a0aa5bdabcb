// JSON output of the command line, safe for any bytes in names.
//
// Member, file and folder names are bytes, not text: one may hold bytes that are not
// UTF-8, and nlohmann::json throws when it dumps such a string. json_text() turns any bytes
// into valid UTF-8, unchanged where they already are, and dump_json() is how the commands
// print JSON. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace shardyard::tools {

// `bytes` as valid UTF-8: every byte that is not part of a well-formed UTF-8 sequence
// becomes the four characters \xNN (lower-case hex), as Python's
// bytes.decode("utf-8", "backslashreplace") writes it. Valid UTF-8 is returned unchanged.
std::string json_text(std::string_view bytes);

// j.dump(indent); a string that still is not UTF-8 (one that skipped json_text) is written
// with U+FFFD in place of its bad bytes rather than ending the command with an exception.
std::string dump_json(const nlohmann::json& j, int indent = -1);

}  // namespace shardyard::tools
